"""RunningObservationNorm: exact running statistics, clipping, update switch, checkpoints."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.modules import RewardScaling, RunningObservationNorm


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


def _rollout(reward: torch.Tensor, done: torch.Tensor) -> TensorDict:
    n, t = reward.shape
    nxt = TensorDict(reward=reward.unsqueeze(-1), done=done.unsqueeze(-1), batch_size=[n, t])
    return TensorDict(next=nxt, batch_size=[n, t])


def _returns_by_sum(reward: torch.Tensor, done: torch.Tensor, gamma: float) -> torch.Tensor:
    """R_t = sum_{k=s..t} gamma^(t-k) r_k, s = first step after the last episode end before t."""
    out = torch.zeros_like(reward, dtype=torch.float64)
    for i in range(reward.shape[0]):
        start = 0
        for t in range(reward.shape[1]):
            out[i, t] = sum(gamma ** (t - k) * float(reward[i, k]) for k in range(start, t + 1))
            if done[i, t]:
                start = t + 1
    return out


def test_reward_scaling_tracks_discounted_returns_across_batch_cuts() -> None:
    gen = torch.Generator().manual_seed(0)
    reward = torch.randn(3, 40, generator=gen) * 5 + 1
    done = torch.rand(3, 40, generator=gen) < 0.1
    gamma = 0.9
    scaler = RewardScaling(gamma, clip=None, epsilon=1e-12)
    first = scaler(_rollout(reward[:, :25].clone(), done[:, :25]))  # a batch cut inside episodes
    second = scaler(_rollout(reward[:, 25:].clone(), done[:, 25:]))
    returns = _returns_by_sum(reward, done, gamma)
    torch.testing.assert_close(scaler.return_stats.var, returns.var(unbiased=False))
    std_first = float(returns[:, :25].var(unbiased=False).sqrt())
    std_all = float(returns.var(unbiased=False).sqrt())
    torch.testing.assert_close(first["next", "reward"].squeeze(-1), reward[:, :25] / std_first)
    torch.testing.assert_close(second["next", "reward"].squeeze(-1), reward[:, 25:] / std_all)


def test_reward_scaling_clips_keeps_carry_in_state_dict_and_names_missing_keys() -> None:
    reward = torch.tensor([[1.0, 1.0, 100.0]])
    scaler = RewardScaling(0.99, clip=1.5)
    out = scaler(_rollout(reward.clone(), torch.zeros(1, 3, dtype=torch.bool)))
    assert float(out["next", "reward"].max()) == 1.5
    restored = RewardScaling(0.99, clip=1.5)
    restored.load_state_dict(scaler.state_dict())
    torch.testing.assert_close(restored.discounted_return, scaler.discounted_return)
    assert float(restored.discounted_return[0]) > 100  # the episode goes on into the next batch
    with pytest.raises(KeyError, match="done"):
        scaler(TensorDict(next=TensorDict(reward=reward, batch_size=[1, 3]), batch_size=[1, 3]))
    # one unbatched env's [T] rollout (TorchRL's, reward [T, 1]) is not T envs of one step
    flat = _rollout(reward.clone(), torch.zeros(1, 3, dtype=torch.bool))[0]
    assert flat["next", "reward"].shape == (3, 1)
    with pytest.raises(ValueError, match=r"\[num_envs, T\] rollout .* batch size \(3,\)"):
        RewardScaling(0.99)(flat)


def _gae_by_sum(reward, value, next_value, terminated, done, gamma, lmbda):
    """A_t = sum_k (gamma lmbda)^k delta_{t+k} up to the episode's last step in the batch, with
    delta_k = r_k + gamma (1 - terminated_k) V(s_{k+1}) - V(s_k)."""
    adv = torch.zeros_like(reward)
    for i in range(reward.shape[0]):
        for t in range(reward.shape[1]):
            total, coef = 0.0, 1.0
            for k in range(t, reward.shape[1]):
                delta = reward[i, k] + gamma * (1 - terminated[i, k]) * next_value[i, k]
                total += coef * (delta - value[i, k])
                if done[i, k]:
                    break
                coef *= gamma * lmbda
            adv[i, t] = total
    return adv


def _scaling_batch(seed: int) -> TensorDict:
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(2, 6, 3, generator=gen)
    nxt_obs = torch.randn(2, 6, 3, generator=gen)
    terminated = torch.zeros(2, 6, 1, dtype=torch.bool)
    truncated = torch.zeros(2, 6, 1, dtype=torch.bool)
    terminated[0, 2] = True  # env 0 ends at step 2 (no bootstrap)
    truncated[1, 3] = True  # env 1 is cut at step 3 (bootstrapped from its real final obs)
    nxt = TensorDict(
        observation=nxt_obs, reward=torch.randn(2, 6, 1, generator=gen) * 20,
        terminated=terminated, truncated=truncated, done=terminated | truncated,
        batch_size=[2, 6],
    )  # fmt: skip
    return TensorDict(observation=obs, next=nxt, batch_size=[2, 6])


def test_value_target_scaling_keeps_advantages_in_reward_units_and_scales_targets() -> None:
    from tensordict.nn import TensorDictModule

    from tdrl.estimators import GAE
    from tdrl.modules import ValueTargetScaling

    torch.manual_seed(0)
    critic = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
    scaling = ValueTargetScaling(
        GAE(gamma=0.9, lmbda=0.8, value_network=critic), epsilon=0.0, preserve_outputs=False
    )
    seen = torch.tensor([0.0, 10.0, -4.0], dtype=torch.float64)
    scaling.return_stats.update(seen)  # var 32.89: std 5.73
    std = float(seen.var(unbiased=False).sqrt())
    targets = [seen]
    for seed in (1, 2):  # the second call scales with the statistics the first one left
        batch = _scaling_batch(seed)
        with torch.no_grad():
            value = critic(batch.select("observation"))["state_value"]
            next_value = critic(TensorDict(observation=batch["next", "observation"],
                                           batch_size=[2, 6]))["state_value"]  # fmt: skip
        value_r, next_value_r = value * std, next_value * std  # in reward units
        out = scaling(batch)
        adv = _gae_by_sum(
            batch["next", "reward"], value_r, next_value_r, batch["next", "terminated"].float(),
            batch["next", "done"], 0.9, 0.8,
        )  # fmt: skip
        torch.testing.assert_close(out["advantage"], adv)  # not divided by std
        torch.testing.assert_close(out["value_target"], (adv + value_r) / std)
        torch.testing.assert_close(out["state_value"], value)  # the critic's own units
        torch.testing.assert_close(out["next", "state_value"], next_value)
        targets.append((adv + value_r).reshape(-1).double())
        std = float(torch.cat(targets).var(unbiased=False).sqrt())
        # float32 targets on both sides (the kernel's rounded from float64, these from float32
        # sums): float32's tolerance
        torch.testing.assert_close(float(scaling.std), std, rtol=1.3e-6, atol=0.0)
    restored = ValueTargetScaling(GAE(gamma=0.9, lmbda=0.8, value_network=critic))
    restored.load_state_dict(scaling.state_dict())
    torch.testing.assert_close(restored.return_stats.var, scaling.return_stats.var)
    with pytest.raises(ValueError, match="no value_network"):
        ValueTargetScaling(GAE(gamma=0.9, lmbda=0.8, value_network=None))
    with pytest.raises(ValueError, match="already wrapped"):
        ValueTargetScaling(scaling.estimator)  # the critic would be scaled twice
    from torchrl.objectives.value import GAE as TorchRLGAE

    with pytest.raises(TypeError, match="torchrl.*GAE"):
        ValueTargetScaling(TorchRLGAE(gamma=0.9, lmbda=0.8, value_network=critic))


def test_value_target_scaling_preserving_outputs_keeps_the_critics_values_in_reward_units() -> None:
    from tensordict.nn import TensorDictModule

    from tdrl.estimators import GAE
    from tdrl.modules import ValueTargetScaling

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    critic = TensorDictModule(net, ["observation"], ["state_value"])
    scaling = ValueTargetScaling(GAE(gamma=0.9, lmbda=0.8, value_network=critic), epsilon=0.0)
    assert not any(k.startswith("_value_head") for k in scaling.state_dict())  # the critic's own
    seen = torch.tensor([0.0, 10.0, -4.0], dtype=torch.float64)
    scaling.return_stats.update(seen)
    std = float(seen.var(unbiased=False).sqrt())
    targets = [seen]
    hidden = net[0].weight.clone()
    for seed in (1, 2):
        batch = _scaling_batch(seed)
        obs, next_obs = batch["observation"], batch["next", "observation"]
        with torch.no_grad():
            value_r, next_value_r = net(obs) * std, net(next_obs) * std  # in reward units
        out = scaling(batch)
        adv = _gae_by_sum(
            batch["next", "reward"], value_r, next_value_r, batch["next", "terminated"].float(),
            batch["next", "done"], 0.9, 0.8,
        )  # fmt: skip
        targets.append((adv + value_r).reshape(-1).double())
        new_std = float(torch.cat(targets).var(unbiased=False).sqrt())
        assert abs(new_std / std - 1) > 0.05  # the scale moved
        torch.testing.assert_close(float(scaling.std), new_std, rtol=1.3e-6, atol=0.0)
        torch.testing.assert_close(out["advantage"], adv)  # reward units
        # the targets and the written values in the new scale, which the critic now outputs
        torch.testing.assert_close(out["value_target"], (adv + value_r) / new_std)
        with torch.no_grad():
            torch.testing.assert_close(net(obs) * new_std, value_r)  # its values kept
            torch.testing.assert_close(out["state_value"], net(obs))
            torch.testing.assert_close(out["next", "state_value"], net(next_obs))
        std = new_std
    torch.testing.assert_close(net[0].weight, hidden)  # only the output layer rescales
    two_heads = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["state_value"])
    with pytest.raises(ValueError, match="single output.*found 0 nn.Linear.*preserve_outputs"):
        ValueTargetScaling(GAE(gamma=0.9, lmbda=0.8, value_network=two_heads))
    normed = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 1))
    with pytest.raises(ValueError, match="whose weight is parametrized"):
        ValueTargetScaling(GAE(gamma=0.9, lmbda=0.8, value_network=TensorDictModule(
            normed, ["observation"], ["state_value"])))  # fmt: skip
    # an image encoder registered after the head: its wide layers are not the value head
    encoded = torch.nn.Module()
    encoded.net, encoded.encoder = torch.nn.Linear(4, 1), torch.nn.Linear(16, 4)
    wrapped = TensorDictModule(encoded, ["observation"], ["state_value"])
    head = ValueTargetScaling(GAE(gamma=0.9, lmbda=0.8, value_network=wrapped))._value_head
    assert head is encoded.net
