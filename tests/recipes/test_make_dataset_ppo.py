"""recipes/make_dataset.py --kind policy on a PPO run: the recipe rebuilds the run's policy, which
records a dataset acting through the observation normalization the run trained with (GAIL's
experts come from PPO)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from recipes import make_dataset, ppo
from tdrl import keys, trainers
from tdrl.trainers.run import CHECKPOINT


def test_make_dataset_records_a_ppo_runs_policy_with_its_observation_norm(tmp_path, monkeypatch):
    minari = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    run = str(tmp_path / "ppo")
    ppo.main(
        trainers.configure(
            ppo.Config, env_id="Hopper-v5", total_frames=256, num_envs=2, frames_per_batch=64,
            epochs=1, minibatch_size=64, eval_every=0, eval_episodes=1, eval_envs=1,
            hidden_sizes=(16, 16), checkpoint_every=256, log_dir=run, progress=False,
            tensorboard=False, curve=False,
        )
    )  # fmt: skip
    common = dict(kind="policy", run=run, steps=64, num_envs=2)
    cfg = make_dataset.Config(**common, deterministic=True)
    assert make_dataset.main(cfg) == "tdrl/hopper-policy-v0"  # the run's task
    data = minari.load_dataset("tdrl/hopper-policy-v0")
    assert data.total_steps == 64

    # The rebuilt actor carries the run's running statistics (not the fresh zeros and ones) ...
    path = trainers.latest_checkpoint(run) / CHECKPOINT
    actor, env_id, env_kwargs, _ = make_dataset.trained_policy(run)
    assert env_id == "Hopper-v5" and env_kwargs == {}
    saved = trainers.load_checkpoint(path, restore_rng=False)["actor"]
    mean = next(v for k, v in saved.items() if k.endswith("obs_norm.mean"))
    assert mean.abs().sum() > 0
    state = actor.state_dict()
    assert torch.equal(next(v for k, v in state.items() if k.endswith("obs_norm.mean")), mean)
    # ... and the recorded actions are its deterministic ones on the recorded observations,
    # clipped into the box as the env executed them.
    episode = next(iter(data.iterate_episodes()))
    obs = torch.as_tensor(episode.observations[:-1], dtype=torch.float32)
    with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
        out = actor(TensorDict({keys.OBSERVATION: obs}, batch_size=obs.shape[:1]))
    recorded = torch.as_tensor(episode.actions, dtype=torch.float32)
    assert bool((recorded.abs() <= 1).all())  # Hopper's box is [-1, 1]
    assert torch.allclose(out[keys.ACTION].clamp(-1, 1), recorded, atol=1e-5)

    with pytest.raises(ValueError, match="trained on Hopper-v5"):
        make_dataset.main(make_dataset.Config(**common, env_id="Walker2d-v5"))
