"""recipes/dqn.py on uint8 frames: --network auto builds the CNN and a tiny run trains."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tdrl.envs import make_vec_env
from tdrl.modules import MinAtarCNN, NatureCNN

pytest.importorskip("minatar")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes"))


def test_dqn_picks_the_cnn_for_frames_and_the_mlp_otherwise():
    import dqn

    with make_vec_env("MinAtar/Breakout-v1", 1) as env:
        qnet, _ = dqn.q_network_and_loss(dqn.Config(), env.observation_spec, env.action_spec)
        assert isinstance(qnet.net, MinAtarCNN)
        assert qnet.net.features[0].scale == 1.0  # MinAtar's channels are 0 or 1
        with pytest.raises(ValueError, match="--algo iqn takes flat observations"):
            dqn.q_network_and_loss(dqn.Config(algo="iqn"), env.observation_spec, env.action_spec)
        with pytest.raises(ValueError, match="one flat 'observation'"):
            dqn.q_network_and_loss(dqn.Config(network="mlp"), env.observation_spec, env.action_spec)
    with make_vec_env("CartPole-v1", 1) as env:
        qnet, _ = dqn.q_network_and_loss(dqn.Config(), env.observation_spec, env.action_spec)
        assert not isinstance(qnet.net, (MinAtarCNN, NatureCNN))
        with pytest.raises(ValueError, match="--network cnn needs uint8 frames"):
            dqn.q_network_and_loss(dqn.Config(network="cnn"), env.observation_spec, env.action_spec)


def test_dqn_runs_on_minatar(tmp_path):
    import dqn

    cfg = dqn.Config(
        env_id="MinAtar/Breakout-v1",
        total_frames=256,
        init_random_frames=128,
        frames_per_batch=64,
        batch_size=16,
        buffer_size=1_000,
        eval_episodes=1,
        checkpoint_every=128,  # saving the env and buffer state works with frames
        progress=False,
        tensorboard=False,
        log_dir=str(tmp_path / "dqn"),
    )
    result = dqn.main(cfg)
    assert result["frames"] == 256 and result["updates"] > 0
    assert math.isfinite(result["eval_return_mean"])
