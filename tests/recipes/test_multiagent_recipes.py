"""The multi-agent recipes (mappo.py, qmix.py, maddpg.py) run in seconds on VMAS and MPE with a
tiny config and write their logs; a paused run resumes to its end (with fresh episodes: the
simulators' states are not checkpointed); QMIX refuses a task without a global state."""

from __future__ import annotations

import sys
import types

import pytest

from recipes import maddpg, mappo, qmix
from tdrl.trainers import configure, read_csv
from tests.tiny_envs import MaskedAgents

pytest.importorskip("vmas")
pytest.importorskip("mpe2")
VARIANT = pytest.mark.variants  # run with -m variants (CI does)

# two batches of 120 frames from 4 envs, an evaluation after each
RUN = dict(
    total_frames=240, num_envs=4, eval_every=120, log_every=120, eval_episodes=2, eval_envs=2,
    hidden_sizes=(16,), progress=False, tensorboard=False,
)  # fmt: skip
TINY = dict(RUN, frames_per_batch=120, minibatch_size=40, epochs=2)  # MAPPO
OFF_POLICY = dict(RUN, frames_per_batch=120, batch_size=32, utd_ratio=0.1)  # 24 gradient steps
QMIX, MADDPG = dict(OFF_POLICY, eps_frames=200), dict(OFF_POLICY, noise_frames=200)


@pytest.mark.parametrize(
    "env_id, extra",
    [
        ("vmas/navigation", {}),
        pytest.param("vmas/navigation", {"critic": "local", "share_params": False}, marks=VARIANT),
        pytest.param("mpe2/simple_spread_v3", {"discrete": True}, marks=VARIANT),
        pytest.param("vmas/navigation", {"compile": True}, marks=VARIANT),
    ],
    ids=["mappo-vmas", "ippo-vmas-own-params", "mappo-mpe-discrete", "mappo-vmas-compiled"],
)
def test_mappo_trains_and_evaluates(tmp_path, env_id, extra):
    cfg = configure(mappo.Config, env_id=env_id, log_dir=str(tmp_path), **TINY, **extra)
    result = mappo.main(cfg)
    assert result["eval_n_episodes"] == 2 and result["updates"] == 2 * 2 * 3  # 2 batches
    rows = read_csv(tmp_path / "train.csv")
    assert [row["step"] for row in rows] == [120, 240]
    assert all(row["loss_critic"] > 0 for row in rows)
    assert [row["step"] for row in read_csv(tmp_path / "eval.csv")] == [120, 240]


def test_mappo_on_a_masked_env_takes_only_its_valid_actions(tmp_path, monkeypatch):
    """MaskedAgents (a PettingZoo-API env) raises on a forbidden action, so a run that trains and
    evaluates sampled and greedily chose only valid ones."""
    module = types.SimpleNamespace(parallel_env=MaskedAgents)
    monkeypatch.setitem(sys.modules, "masked_agents_v0", module)
    cfg = configure(mappo.Config, env_id="pettingzoo/masked_agents_v0", discrete=True,
                    log_dir=str(tmp_path), **TINY)  # fmt: skip
    result = mappo.main(cfg)
    assert result["updates"] == 12 and result["eval_n_episodes"] == 2
    with pytest.raises(ValueError, match=r"needs a continuous \(Box\) action space; .* Categ"):
        mappo.main(configure(cfg, discrete=False, log_dir=str(tmp_path / "continuous")))


def test_mappo_refuses_compile_with_a_decaying_clip_range(tmp_path):
    cfg = configure(mappo.Config, log_dir=str(tmp_path), compile=True, clip_decay=True, **TINY)
    with pytest.raises(ValueError, match="--compile: --clip-decay changes the clip range"):
        mappo.main(cfg)


@pytest.mark.parametrize("recipe", [mappo, qmix, maddpg], ids=["mappo", "qmix", "maddpg"])
def test_multiagent_recipes_refuse_cudagraphs_by_name(recipe, tmp_path):
    cfg = configure(recipe.Config, log_dir=str(tmp_path), device="auto", cudagraphs=True)
    name = recipe.__name__.rsplit(".", 1)[-1]
    with pytest.raises(ValueError, match=f"--cudagraphs: {name}.py runs its networks on the CPU"):
        recipe.main(cfg)


def test_a_paused_mappo_run_resumes_to_its_end(tmp_path):
    cfg = configure(mappo.Config, log_dir=str(tmp_path), checkpoint_every=120, **TINY)
    mappo.main(configure(cfg, stop_after_frames=120))
    assert [row["step"] for row in read_csv(tmp_path / "eval.csv")] == [120]
    result = mappo.main(configure(cfg, resume=True))
    assert result["updates"] == 12
    assert [row["step"] for row in read_csv(tmp_path / "train.csv")] == [120, 240]


@pytest.mark.parametrize(
    "extra",
    [{}, pytest.param({"mixer": "vdn"}, marks=VARIANT),
     pytest.param({"tau": 0.0, "target_update_interval": 5}, marks=VARIANT),
     pytest.param({"compile": True}, marks=VARIANT)],
    ids=["qmix", "vdn", "qmix-hard-targets", "qmix-compiled"],
)  # fmt: skip
def test_qmix_trains_and_evaluates(tmp_path, extra):
    cfg = configure(qmix.Config, log_dir=str(tmp_path), **QMIX, **extra)
    result = qmix.main(cfg)
    assert result["updates"] == 24 and result["eval_n_episodes"] == 2
    rows = read_csv(tmp_path / "train.csv")
    assert [row["step"] for row in rows] == [120, 240] and rows[-1]["epsilon"] < 1.0


@VARIANT
def test_qmix_stores_random_batches_and_policy_batches_alike(tmp_path):
    """A first batch of random actions, then the policy's: the buffer stores neither the greedy
    actor's action values nor anything else a policy writes under "agents"."""
    result = qmix.main(
        configure(qmix.Config, log_dir=str(tmp_path), init_random_frames=120, **QMIX)
    )
    assert result["updates"] == 12  # 0.1 a step from step 120 on


def test_qmix_on_a_task_without_a_global_state_is_refused(tmp_path):
    cfg = configure(qmix.Config, env_id="vmas/navigation", log_dir=str(tmp_path), **QMIX)
    with pytest.raises(ValueError, match=r"--mixer qmix reads the global state"):
        qmix.main(cfg)
    result = qmix.main(configure(cfg, mixer="vdn", log_dir=str(tmp_path / "vdn")))
    assert result["updates"] == 24


@pytest.mark.parametrize(
    "env_id, extra",
    [
        ("vmas/navigation", {}),
        pytest.param("mpe2/simple_spread_v3", {}, marks=VARIANT),
        pytest.param("vmas/navigation", {"compile": True}, marks=VARIANT),
    ],
    ids=["vmas/navigation", "mpe2/simple_spread_v3", "vmas/navigation-compiled"],
)
def test_maddpg_trains_and_evaluates(tmp_path, env_id, extra):
    cfg = configure(maddpg.Config, env_id=env_id, log_dir=str(tmp_path), **MADDPG, **extra)
    result = maddpg.main(cfg)
    assert result["updates"] == 24 and result["eval_n_episodes"] == 2
    rows = read_csv(tmp_path / "train.csv")
    assert [row["step"] for row in rows] == [120, 240] and rows[-1]["sigma"] < 0.8


@pytest.mark.parametrize("recipe, tiny", [(qmix, QMIX), (maddpg, MADDPG)], ids=["qmix", "maddpg"])
def test_a_paused_off_policy_run_resumes_to_its_end(tmp_path, recipe, tiny):
    cfg = configure(recipe.Config, log_dir=str(tmp_path), checkpoint_every=120, **tiny)
    recipe.main(configure(cfg, stop_after_frames=120))
    result = recipe.main(configure(cfg, resume=True))
    assert result["updates"] == 24
    assert [row["step"] for row in read_csv(tmp_path / "eval.csv")] == [120, 240]
