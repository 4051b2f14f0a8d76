"""recipes/gail.py on a small Minari dataset made here: it runs, trains on the discriminator's
reward while logging the env's returns, resumes exactly, and names bad datasets."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from recipes import gail
from tdrl.data.expert import ExpertPairs
from tdrl.envs import make_vec_env
from tdrl.trainers import configure, latest_checkpoint, load_checkpoint, read_csv
from tdrl.trainers.run import CHECKPOINT

TINY = dict(
    total_frames=384, num_envs=2, frames_per_batch=64, epochs=2, minibatch_size=32,
    eval_every=192, eval_episodes=2, eval_envs=2, hidden_sizes=(16, 16),
    disc_hidden_sizes=(16,), disc_batch_size=48, expert_episodes=3, progress=False,
    tensorboard=False,
)  # fmt: skip


@pytest.fixture
def dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A Hopper-v5 dataset of whole short episodes (stand-in demonstrations: the recipe's
    plumbing, not an expert's quality, is under test)."""
    pytest.importorskip("minari")
    from tdrl.collectors import Collector
    from tdrl.data import save_minari
    from tdrl.envs import make_vec_env

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        save_minari(Collector(env, None, 400).rollout(), "tdrl/hopper-demo-v0", "Hopper-v5")
    return "tdrl/hopper-demo-v0"


def test_gail_runs_on_the_discriminator_reward_and_resumes_exactly(dataset, tmp_path, device):
    straight = configure(
        gail.Config, **TINY, dataset=dataset, log_dir=str(tmp_path / "straight"), device=device
    )
    result = gail.main(straight)
    assert result["frames"] == 384 and math.isfinite(result["eval_return_mean"])
    train = read_csv(tmp_path / "straight" / "train.csv")
    assert all(0.0 < row["disc_expert"] < 1.0 and row["gail_reward"] > 0 for row in train)
    # The logged episode returns are the env's (Hopper pays about 1 a step while healthy); the
    # discriminator's reward only drives the update.
    lengths = [row for row in train if "episode_return" in row]
    assert lengths and all(row["episode_return"] != row["gail_reward"] for row in lengths)
    first = configure(straight, log_dir=str(tmp_path / "resumed"), stop_after_frames=192)
    gail.main(first)
    torch.manual_seed(4321)  # disturb the global RNG: the checkpoint restores it
    gail.main(configure(first, stop_after_frames=0, resume=True))
    drop = ("time",)
    rows = [
        [
            {k: v for k, v in r.items() if k not in drop}
            for r in read_csv(tmp_path / d / "train.csv")
        ]
        for d in ("straight", "resumed")
    ]
    assert rows[0] == rows[1]


def test_expert_episodes_and_shapes_are_checked(dataset, tmp_path):
    with pytest.raises(ValueError, match="--expert-episodes must be >= 1"):
        configure(gail.Config, **{**TINY, "expert_episodes": 0}, dataset=dataset)
    many = configure(
        gail.Config, **{**TINY, "expert_episodes": 1000}, dataset=dataset, log_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="episodes, 1000 asked for"):
        gail.main(many)
    wrong = configure(
        gail.Config, **TINY, dataset=dataset, env_id="HalfCheetah-v5", log_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="do not fit HalfCheetah-v5's"):
        gail.main(wrong)
    # its rewards are the discriminator's: no reward scaling
    scaled = configure(gail.Config, **TINY, dataset=dataset, scale_rewards=True)
    with pytest.raises(ValueError, match="--scale-rewards does not apply to GAIL"):
        gail.main(scaled)


def test_the_discriminator_sees_the_actions_the_env_executed(dataset, tmp_path, monkeypatch):
    # A wide policy samples far outside Hopper's [-1, 1] box; the expert's actions lie inside.
    # Unclipped actions would let the discriminator tell them apart by range alone.
    import tdrl.objectives as objectives  # the recipe imports its parts when main runs

    seen = []
    real = objectives.gail_reward

    def recording(discriminator, observation, action):
        seen.append(action.clone())
        return real(discriminator, observation, action)

    monkeypatch.setattr(objectives, "gail_reward", recording)
    # (raw pairs: --disc-normalize would hand the discriminator standardized actions)
    cfg = configure(gail.Config, **{**TINY, "total_frames": 128}, dataset=dataset,
                    init_log_std=1.5, disc_normalize=False, log_dir=str(tmp_path))  # fmt: skip
    gail.main(cfg)
    actions = torch.cat([a.reshape(-1, a.shape[-1]) for a in seen])
    assert actions.abs().max() <= 1.0
    assert (actions.abs() == 1.0).float().mean() > 0.2  # many samples were clipped to the box


def test_disc_normalize_standardizes_with_the_expert_pairs_statistics(dataset, tmp_path):
    cfg = configure(gail.Config, **{**TINY, "total_frames": 128}, dataset=dataset,
                    disc_normalize=True, log_dir=str(tmp_path))  # fmt: skip
    gail.main(cfg)
    with make_vec_env("Hopper-v5", 1) as env:
        raw = ExpertPairs.from_minari(
            dataset, TINY["expert_episodes"], env.observation_spec, env.action_spec,
            standardize=False,
        )  # fmt: skip
    pairs = torch.cat([raw.observation, raw.action], dim=-1).double()
    folder = latest_checkpoint(tmp_path)
    state = load_checkpoint(folder / CHECKPOINT, restore_rng=False)["expert"]
    mean, var = state["norm.mean"], state["norm.var"]
    # fixed: the statistics are the demonstrations' after the run's updates, not the policy's
    torch.testing.assert_close(mean, pairs.mean(0))
    torch.testing.assert_close(var, pairs.var(0, unbiased=False))


def test_a_recurrent_policy_trains_on_whole_sequences(dataset, tmp_path):
    # --seq-len reaches the update (it was dropped: a recurrent GAIL actor trained on shuffled
    # single steps), so a length that does not divide the rollout is named there
    cfg = configure(
        gail.Config, **{**TINY, "total_frames": 128}, dataset=dataset, recurrent="lstm",
        recurrent_size=8, seq_len=7, log_dir=str(tmp_path / "bad"),
    )  # fmt: skip
    with pytest.raises(ValueError, match="seq_len=7 does not divide"):
        gail.main(cfg)
    good = configure(cfg, seq_len=16, log_dir=str(tmp_path / "good"))
    assert gail.main(good)["frames"] == 128
