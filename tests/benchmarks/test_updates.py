"""benchmarks/updates.py's --fused-peers: the peers' own code with torch's Adam defaulting to
fused, undone afterwards, and a fused row for every peer of every section."""

from __future__ import annotations

import pytest
import torch

from tests.bench_scripts import load

updates = load("updates", "updates_bench")


def _fused(optimizer: torch.optim.Optimizer) -> bool:
    return bool(optimizer.param_groups[0]["fused"])


def test_adam_defaults_to_fused_inside_only_and_keeps_what_the_caller_asked_for():
    params = [torch.nn.Parameter(torch.zeros(3))]
    with updates.fused_adam_default():
        assert _fused(torch.optim.Adam(params, lr=1e-3))
        chosen = torch.optim.Adam(params, lr=1e-3, foreach=True)  # the caller's choice stands
        assert not _fused(chosen) and chosen.param_groups[0]["foreach"]
        assert not _fused(torch.optim.Adam(params, fused=False))
    assert not _fused(torch.optim.Adam(params, lr=1e-3))  # restored
    with pytest.raises(RuntimeError, match="boom"), updates.fused_adam_default():
        raise RuntimeError("boom")
    assert not _fused(torch.optim.Adam(params, lr=1e-3))  # restored after an error too


def test_fused_rows_follow_every_peer_of_every_section(monkeypatch):
    tables = [dict(table) for table in updates.PEER_TABLES]
    monkeypatch.setattr(updates, "PEER_TABLES", tables)
    updates.add_fused_rows()
    assert len(tables) >= 10
    for table in tables:
        peers = [name for name in table if not name.startswith("tdrl") and "fused" not in name]
        assert peers and [f"{name} fused" for name in peers] == list(table)[-len(peers) :]


def test_a_peers_optimizers_are_fused_in_its_fused_row():
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    from stable_baselines3 import SAC

    class Shapes(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (3,), "float32")
        action_space = gym.spaces.Box(-1.0, 1.0, (2,), "float32")

    def optimizers() -> list[torch.optim.Optimizer]:
        model = SAC("MlpPolicy", Shapes(), buffer_size=10, device="cpu")
        policy = model.policy
        return [policy.actor.optimizer, policy.critic.optimizer, model.ent_coef_optimizer]

    assert not any(_fused(o) for o in optimizers())
    with updates.fused_adam_default():
        assert all(_fused(o) for o in optimizers())  # the entropy coefficient's too


@pytest.mark.table  # imports Tianshou and sb3-contrib: ~10 s
def test_every_library_of_the_qrdqn_section_takes_its_steps():
    pytest.importorskip("sb3_contrib")
    pytest.importorskip("tianshou")
    data = updates.dqn_data(300)
    table = next(t for t in updates.PEER_TABLES if t["tdrl"] is updates.qrdqn_tdrl)
    assert set(table) == {"tdrl", "tdrl plain", "SB3", "Tianshou"}
    for name, bench in table.items():
        seconds = bench(data, 12)  # past one target copy (every 10 steps)
        assert 0 < seconds < 60, name
