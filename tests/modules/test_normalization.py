"""RunningObservationNorm: exact running statistics, clipping, update switch, checkpoints."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from tdrl.modules import RunningObservationNorm


def test_chunked_updates_match_full_statistics() -> None:
    data = torch.randn(1000, 3, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 3.0
    norm = RunningObservationNorm(3, epsilon=1e-12)
    for chunk in torch.split(data, [1, 7, 300, 2, 690]):
        norm.update(chunk)
    torch.testing.assert_close(norm.mean, data.mean(0))
    torch.testing.assert_close(norm.var, data.var(0, unbiased=False))
    assert abs(float(norm.count) - 1000) < 1e-6


def test_forward_updates_only_when_told_and_clips() -> None:
    norm = RunningObservationNorm(2, in_keys=["observation", ("next", "observation")], clip=1.0)
    obs = torch.tensor([[0.0, 10.0], [2.0, -10.0]])
    td = TensorDict(
        observation=obs, next=TensorDict(observation=obs * 3, batch_size=[2]), batch_size=[2]
    )
    norm(td.clone())
    assert float(norm.count) < 1  # not updated: update_stats is False
    norm.update_stats = True
    out = norm(td)
    assert float(norm.count) > 2 - 1e-6  # updated from "observation" only
    torch.testing.assert_close(
        out["observation"], torch.tensor([[-1.0, 1.0], [1.0, -1.0]]), atol=1e-4, rtol=0
    )
    assert float(out["next", "observation"].abs().max()) <= 1.0


def test_statistics_saved_in_state_dict() -> None:
    norm = RunningObservationNorm(4)
    norm.update(torch.randn(50, 4) * 3 + 1)
    restored = RunningObservationNorm(4)
    restored.load_state_dict(norm.state_dict())
    assert set(norm.state_dict()) == {"mean", "var", "count"}
    x = torch.randn(5, 4)
    torch.testing.assert_close(restored.normalize(x), norm.normalize(x))
