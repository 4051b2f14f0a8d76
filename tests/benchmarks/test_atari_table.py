"""benchmarks/atari_table.py: PPO on Breakout, tdrl beside SB3, on mujoco_table's machinery: its
cells, and that both libraries get the same Atari PPO settings where CleanRL and the zoo agree."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the driver imports mujoco_table as a sibling
import atari_table as at  # noqa: E402

mt = at.mt


def test_the_cells_are_ppo_on_breakout_in_both_libraries():
    cells = mt.build_cells(at.ATARI, ["ppo"], at.TASKS, [0])
    assert sorted(c.library for c in cells) == ["SB3", "tdrl"]
    assert {(c.task, c.steps, c.eval_every) for c in cells} == {
        ("tdrl/Breakout-v5", 500_000, 100_000)
    }


def test_both_libraries_run_the_same_atari_ppo():
    from recipes import ppo
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    tdrl = flat_dict(configure(ppo.Config, **dict(at.ALGOS["ppo"].preset)))
    sb3 = at.sb3_settings("ppo", at.TASKS[0])
    assert sb3 is not None
    pairs = {
        "num_envs": "n_envs", "epochs": "n_epochs", "minibatch_size": "batch_size", "lr":
        "learning_rate", "clip_epsilon": "clip_range", "critic_coeff": "vf_coef",
        "entropy_coeff": "ent_coef", "gamma": "gamma", "lmbda": "gae_lambda",
        "max_grad_norm": "max_grad_norm",
    }  # fmt: skip
    for ours, theirs in pairs.items():
        assert tdrl[ours] == sb3[theirs], ours
    assert tdrl["frames_per_batch"] == sb3["n_envs"] * sb3["n_steps"]
    assert tdrl["adam_eps"] == 1e-5  # SB3's on-policy Adam eps
    assert tdrl["frame_stack"] == 4 and tdrl["terminal_on_life_loss"] and tdrl["clip_rewards"]
    assert tdrl["lr_decay"] and tdrl["normalize_advantage"] and not tdrl["scale_rewards"]
    assert tdrl["env_backend"] == "envpool" and tdrl["eval_deterministic"] is False


def test_the_learner_sees_sign_clipped_rewards_and_the_monitor_the_games():
    import gymnasium as gym

    env = at._sign_rewards(gym.make("CartPole-v1"))
    env.reset(seed=0)
    _, reward, *_ = env.step(0)
    assert reward == 1.0
    clipped = at._sign_rewards(
        gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: -7 * r)
    )
    clipped.reset(seed=0)
    assert clipped.step(0)[1] == -1.0
