"""ExpertPairs: the demonstrations a GAIL discriminator compares a policy's pairs with."""

from __future__ import annotations

import pytest
import torch

from tdrl import keys
from tdrl.data.expert import ExpertPairs

LOW, HIGH = torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 2.0])


def pairs(n: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, generator=gen) * 4 + 1, torch.randn(n, 2, generator=gen) * 3


def test_actions_are_clipped_to_the_box_before_the_statistics():
    obs, action = pairs()
    raw = ExpertPairs(obs, action, LOW, HIGH, standardize=False)
    assert torch.equal(raw.observation, obs)
    assert torch.equal(raw.action, torch.maximum(torch.minimum(action, HIGH), LOW))
    assert (action.abs() > HIGH).any()  # the clip did something
    std = ExpertPairs(obs, action, LOW, HIGH)
    joined = torch.cat([raw.observation, raw.action], -1).double()
    mean, var = joined.mean(0), joined.var(0, unbiased=False)
    torch.testing.assert_close(std.norm.mean, mean)
    torch.testing.assert_close(std.norm.var, var)
    # the stored expert pairs are standardized: mean 0, std 1 per column (eps aside)
    stored = torch.cat([std.observation, std.action], -1).double()
    torch.testing.assert_close(
        stored.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        stored.std(0, unbiased=False), torch.ones(5, dtype=torch.float64), atol=1e-3, rtol=0
    )


def test_a_policys_pairs_get_the_experts_clip_and_fixed_statistics():
    obs, action = pairs()
    expert = ExpertPairs(obs, action, LOW, HIGH)
    before = expert.norm.mean.clone()
    policy_obs, policy_action = torch.zeros(4, 6, 3), torch.full((4, 6, 2), 10.0)
    p_obs, p_action = expert.prepare(policy_obs, policy_action)
    assert p_obs.shape == (4, 6, 3) and p_action.shape == (4, 6, 2)
    clipped = torch.cat([policy_obs, HIGH.expand(4, 6, 2)], -1).double()
    want = (clipped - expert.norm.mean) / torch.sqrt(expert.norm.var + expert.norm.epsilon)
    torch.testing.assert_close(torch.cat([p_obs, p_action], -1).double(), want, atol=1e-5, rtol=0)
    assert torch.equal(expert.norm.mean, before)  # preparing does not move the statistics


def test_draw_takes_n_of_each_kind_and_the_policys_without_replacement():
    obs, action = pairs()
    expert = ExpertPairs(obs, action, LOW, HIGH, standardize=False)
    policy_obs = torch.arange(24.0).reshape(4, 6, 1).expand(4, 6, 3)
    policy_action = torch.zeros(4, 6, 2)
    torch.manual_seed(0)
    batch = expert.draw(policy_obs, policy_action, 10)
    assert batch[keys.OBSERVATION].shape == (10, 3) and batch[keys.ACTION].shape == (10, 2)
    drawn = batch[keys.COLLECTOR_OBSERVATION][:, 0]
    assert drawn.shape == (10,) and len(drawn.unique()) == 10  # no pair twice
    assert batch[keys.COLLECTOR_ACTION].shape == (10, 2)
    assert all((expert.observation == row).all(-1).any() for row in batch[keys.OBSERVATION])
    capped = expert.draw(policy_obs, policy_action, 100)  # at most every policy pair
    assert sorted(capped[keys.COLLECTOR_OBSERVATION][:, 0].tolist()) == list(range(24))
    torch.manual_seed(0)  # torch's global generator draws: the same seed, the same batch
    assert (expert.draw(policy_obs, policy_action, 10) == batch).all()


def test_pairs_of_the_wrong_shape_are_named():
    obs, action = pairs()
    with pytest.raises(
        ValueError, match=r"\[n, obs_dim\] and \[n, action_dim\].*\(50, 3\) and \(49, 2\)"
    ):
        ExpertPairs(obs, action[:49], LOW, HIGH)
