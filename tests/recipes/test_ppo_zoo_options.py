"""recipes/ppo.py's SB3-matching options reach the run: --no-ortho-init, --no-rescale-actions
(the networks) and --adam-eps (the optimizer), as benchmarks/time_to_solve.py's zoo mapping of
sb3-contrib's RecurrentPPO uses them."""

from __future__ import annotations

from pathlib import Path

import torch

from recipes import ppo
from tdrl.trainers import configure, latest_checkpoint


def checkpoint(tmp_path: Path, **options: object) -> dict:
    cfg = configure(
        ppo.Config, env_id="PendulumNoVel-v1", total_frames=128, num_envs=2, frames_per_batch=64,
        epochs=1, minibatch_size=32, seq_len=16, recurrent="lstm", recurrent_critic=True,
        sde_sample_freq=4, hidden_sizes=(16,), eval_every=128, eval_episodes=1, eval_envs=1,
        progress=False, tensorboard=False, curve=False, checkpoint_every=128,
        log_dir=str(tmp_path), **options,
    )  # fmt: skip
    ppo.main(cfg)
    return torch.load(latest_checkpoint(tmp_path) / "checkpoint.pt", weights_only=False)


def test_zoo_options_reach_the_networks_and_the_optimizer(tmp_path: Path) -> None:
    default = checkpoint(tmp_path / "default")
    zoo = checkpoint(tmp_path / "zoo", ortho_init=False, rescale_actions=False, adam_eps=1e-5)
    assert default["optimizer"]["param_groups"][0]["eps"] == 1e-8
    assert zoo["optimizer"]["param_groups"][0]["eps"] == 1e-5
    # the gSDE features' biases: zero at the orthogonal init and moved by at most ~1e-3 by the
    # two Adam steps; PyTorch's default init draws them in +-1/sqrt(16)
    bias = "module.2.body.0.0.bias"
    assert float(default["actor"][bias].abs().max()) < 0.01
    assert float(zoo["actor"][bias].abs().max()) > 0.05
