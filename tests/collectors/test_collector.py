"""tdrl.collectors: batch layout, episode ends, traj_ids, statistics, policies, evaluate."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    TensorDictModule,
    TensorDictSequential,
)
from torch import nn
from torchrl.modules import IndependentNormal, ProbabilisticActor

from tdrl.collectors import Collector, evaluate
from tdrl.envs import make_vec_env
from tests.tiny_envs import Episodic


class GaussianMLP(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, action_dim))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.net(observation)
        return loc + 0.1 * torch.randn_like(loc), loc


def _plain_policy(obs_dim: int = 11, action_dim: int = 3) -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(GaussianMLP(obs_dim, action_dim), ["observation"], ["action", "loc"])


def _torchrl_actor(obs_dim: int = 11, action_dim: int = 3) -> ProbabilisticActor:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(obs_dim, 2 * action_dim), NormalParamExtractor())
    module = TensorDictModule(net, ["observation"], ["loc", "scale"])
    return ProbabilisticActor(
        module,
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )


def test_batch_layout_and_names():
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        batch = Collector(env, None, frames_per_batch=20).rollout()
    assert batch.batch_size == (2, 10) and batch.names == [None, "time"]
    for key in ("done", "terminated", "truncated"):
        assert batch[key].shape == (2, 10, 1) and batch[key].dtype == torch.bool
        assert not batch[key].any()  # root flags: False (same-step autoreset)
        assert batch["next", key].shape == (2, 10, 1) and batch["next", key].dtype == torch.bool
    assert batch["next", "reward"].shape == (2, 10, 1)
    assert batch["observation"].shape == batch["next", "observation"].shape == (2, 10, 11)
    assert batch["action"].shape == (2, 10, 3)
    assert batch["collector", "traj_ids"].shape == (2, 10)
    assert batch["collector", "traj_ids"].dtype == torch.int64
    assert not any(t.requires_grad for t in batch.values(True, True))


def test_frames_per_batch_must_divide():
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        with pytest.raises(ValueError, match="frames_per_batch=7 .* num_envs=2"):
            Collector(env, None, frames_per_batch=7)


def test_truncation_and_continuity_against_hand_stepped_env():
    """max_episode_steps=7 with T=5: episodes end mid-batch and across batch boundaries."""
    seed, n = 11, 2
    with make_vec_env("HalfCheetah-v5", n, seed=seed, max_episode_steps=7) as env:
        collector = Collector(env, None, frames_per_batch=n * 5, total_frames=n * 15)
        batches = list(collector)
    assert len(batches) == 3
    for i in range(n):
        ref = gym.make("HalfCheetah-v5", max_episode_steps=7)
        obs, _ = ref.reset(seed=seed + i)
        steps = [b[i, t] for b in batches for t in range(5)]
        for k, step in enumerate(steps):
            torch.testing.assert_close(
                step["observation"], torch.as_tensor(obs, dtype=torch.float32)
            )
            obs, reward, terminated, truncated, _ = ref.step(step["action"].numpy())
            real_next = torch.as_tensor(obs, dtype=torch.float32)
            torch.testing.assert_close(step["next", "observation"], real_next)
            torch.testing.assert_close(
                step["next", "reward"], torch.tensor([reward], dtype=torch.float32)
            )
            assert bool(step["next", "truncated"]) == truncated == ((k + 1) % 7 == 0)
            assert bool(step["next", "terminated"]) == terminated is False
            if truncated:
                obs, _ = ref.reset()
                # the root of the next step is the reset obs, not the final one
                if k + 1 < len(steps):
                    assert not torch.equal(steps[k + 1]["observation"], real_next)
            elif k + 1 < len(steps):
                torch.testing.assert_close(steps[k + 1]["observation"], real_next)
        ref.close()


def test_termination_traj_ids_and_episode_statistics():
    with make_vec_env("Hopper-v5", 3, seed=2) as env:
        collector = Collector(env, None, frames_per_batch=3 * 60, total_frames=3 * 120)
        batches, episodes = [], []
        for batch in collector:
            batches.append(batch)
            episodes.append(collector.episodes)
    rollout = torch.cat(batches, dim=1)
    done = rollout["next", "done"].squeeze(-1)
    ids = rollout["collector", "traj_ids"]
    assert rollout["next", "terminated"].any()  # Hopper falls under random actions
    # traj_ids change exactly after a done, and never repeat across envs.
    assert torch.equal(ids[:, 1:] != ids[:, :-1], done[:, :-1])
    for i in range(3):
        for j in range(3):
            if i != j:
                assert not set(ids[i].tolist()) & set(ids[j].tolist())
    # Statistics: every finished episode, with return and length summed from the batch.
    finished = torch.cat(episodes)
    assert len(finished) == int(done.sum())
    reward = rollout["next", "reward"].squeeze(-1)
    for ret, length, traj in zip(
        finished["episode_return"], finished["episode_length"], finished["traj_ids"], strict=True
    ):
        mask = ids == traj
        assert int(mask.sum()) == int(length)
        torch.testing.assert_close(reward[mask].double().sum().float(), ret, rtol=1e-5, atol=1e-4)
    # each batch reports only its own episodes
    assert len(episodes[0]) == int(batches[0]["next", "done"].sum())


@pytest.mark.parametrize("policy_kind", ["random", "plain", "torchrl"])
def test_sync_and_async_give_identical_batches(policy_kind):
    results = []
    for mode in ("sync", "async"):
        policy = {"random": None, "plain": _plain_policy(), "torchrl": _torchrl_actor()}[
            policy_kind
        ]
        torch.manual_seed(123)
        with make_vec_env("Hopper-v5", 2, mode=mode, seed=4) as env:
            results.append(list(Collector(env, policy, frames_per_batch=2 * 40, total_frames=160)))
    for a, b in zip(*results, strict=True):
        assert (a == b).all(), policy_kind


def test_torchrl_probabilistic_actor_and_deterministic_mode():
    actor = _torchrl_actor()
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        batch = Collector(env, actor, frames_per_batch=20).rollout()
        assert {"loc", "scale", "action_log_prob"} <= set(batch.keys())
        assert batch["action_log_prob"].shape == (2, 10)
        assert not torch.allclose(batch["action"], batch["loc"])
        det = Collector(env, actor, frames_per_batch=20, deterministic=True).rollout()
        torch.testing.assert_close(det["action"], det["loc"])
    # Batches are ordinary tensors: a loss on them backpropagates into the actor.
    log_prob = actor.get_dist(batch.select("observation")).log_prob(batch["action"])
    log_prob.sum().backward()
    assert all(p.grad is not None for p in actor.parameters())


def test_direct_call_of_plain_module_matches_generic_call():
    plain = _plain_policy()
    generic = TensorDictSequential(plain)  # not a plain TensorDictModule: the generic path
    results = []
    for policy in (plain, generic):
        torch.manual_seed(7)
        with make_vec_env("Hopper-v5", 2, seed=0) as env:
            results.append(Collector(env, policy, frames_per_batch=30).rollout())
    assert set(results[0].keys(True, True)) == set(results[1].keys(True, True))
    assert (results[0] == results[1]).all()


def test_batches_do_not_alias_and_init_random_frames():
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        collector = Collector(env, _plain_policy(), frames_per_batch=20, init_random_frames=20)
        first = collector.rollout()
        kept = first.clone()
        second = collector.rollout()
    assert (first == kept).all()
    assert "loc" not in first.keys() and "loc" in second.keys()
    assert collector.frames == 40


class PassThroughAndCounter(nn.Module):
    """Returns its input unchanged (``seen``), a step count kept in a buffer it updates in
    place (``count``) and a slice of its input (``head``): outputs in the same memory on every
    call."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(11, 3)
        self.register_buffer("step", torch.zeros(2, 1))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.step += 1
        return self.net(observation), observation, self.step, observation[:, :2]


@pytest.mark.parametrize("fast", [True, False])
def test_outputs_in_reused_buffers_are_stored_per_step(fast):
    """A policy output that is an input passed through, or a buffer the policy updates in place,
    is the same storage on every step; each step must still store its own value."""
    torch.manual_seed(0)
    module = TensorDictModule(
        PassThroughAndCounter(), ["observation"], ["action", "seen", "count", "head"]
    )
    policy = module if fast else (lambda td: module(td))  # a plain callable takes the slow path
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        collector = Collector(env, policy, frames_per_batch=10)
        first, second = collector.rollout(), collector.rollout()
    for batch, start in ((first, 0), (second, 5)):
        assert torch.equal(batch["seen"], batch["observation"])
        assert torch.equal(batch["head"], batch["observation"][..., :2])  # a view of a buffer
        expected = torch.arange(start + 1, start + 6, dtype=torch.float32)
        assert torch.equal(batch["count"][..., 0], expected.expand(2, 5))


def test_policy_errors_name_the_key():
    def no_action(td):
        td["something"] = torch.zeros(td.batch_size)
        return td

    wrong_shape = TensorDictModule(nn.Linear(11, 2), ["observation"], ["action"])
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        with pytest.raises(KeyError, match="did not write 'action'"):
            Collector(env, no_action, frames_per_batch=4).rollout()
        with pytest.raises(ValueError, match=r"'action' has shape \(2, 2\), expected \(2, 3\)"):
            Collector(env, wrong_shape, frames_per_batch=4).rollout()


def test_evaluate_counts_exactly_n_episodes_spread_over_envs():
    factories = [lambda length=3 + i: Episodic(length) for i in range(4)]
    with make_vec_env(factories, 4, seed=0) as env:
        stats = evaluate(env, None, n_episodes=6)
    # envs 0 and 1 give two episodes each, envs 2 and 3 one each (not the 6 shortest ones)
    lengths = np.array([3, 3, 4, 4, 5, 6])
    assert stats["n_episodes"] == 6
    assert stats["length_mean"] == pytest.approx(lengths.mean())
    assert stats["length_std"] == pytest.approx(lengths.std())
    assert stats["return_mean"] == pytest.approx(lengths.mean())


def test_evaluate_with_policy_is_deterministic_by_default():
    actor = _torchrl_actor()
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        a = evaluate(env, actor, n_episodes=3, seed=5)
        b = evaluate(env, actor, n_episodes=3, seed=5)
    assert a == b and a["n_episodes"] == 3


def test_a_sampled_evaluation_repeats_with_its_seed_and_leaves_the_training_stream_alone():
    actor = _torchrl_actor()
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        torch.manual_seed(3)
        before = torch.get_rng_state()
        a = evaluate(env, actor, n_episodes=3, seed=5, deterministic=False)
        assert torch.equal(torch.get_rng_state(), before)  # the training run draws on as before
        torch.manual_seed(4)  # another training stream: the evaluation's draws are its seed's
        b = evaluate(env, actor, n_episodes=3, seed=5, deterministic=False)
        c = evaluate(env, actor, n_episodes=3, seed=6, deterministic=False)
        greedy = evaluate(env, actor, n_episodes=3, seed=5)
    assert a == b and a != c  # the seed picks the draws
    assert a["return_mean"] != greedy["return_mean"]  # and they are draws, not the mode


def test_collect_random_recipe_runs_in_process():
    from recipes.collect_random import Config, main

    out = main(Config(env_id="Hopper-v5", num_envs=2, frames_per_batch=100, total_frames=200))
    assert out["steps_per_s"] > 0


def test_collector_flags_episode_starts_and_ou_noise_restarts_per_env():
    """Env 0 ends its episodes every 3 steps, env 1 every 5: the OU state (read off the actions
    of a zero actor) is back at x0 exactly on each env's first step of an episode, and decays
    deterministically (sigma=0) in between, independently per env."""
    from tensordict.nn import TensorDictSequential

    from tdrl.modules import OrnsteinUhlenbeckNoise

    lengths = (3, 5)
    factories = [lambda n=n: gym.make("Pendulum-v1", max_episode_steps=n) for n in lengths]
    seen_is_init = []

    def zero_actor(td):
        seen_is_init.append(td["is_init"][:, 0].clone())
        td["action"] = torch.zeros(2, 1)
        return td

    theta, dt, x0 = 0.5, 0.1, 0.5
    noise = OrnsteinUhlenbeckNoise(
        1, theta=theta, sigma=0.0, dt=dt, x0=x0, mu=0.0, action_low=-2.0, action_high=2.0
    )
    with make_vec_env(factories, 2, seed=0) as env:
        collector = Collector(env, TensorDictSequential(zero_actor, noise), 2 * 16)
        batch = collector.rollout()
    action = batch["action"][..., 0]  # [2, 16]: half-range 2, so action = 2 * state
    for i, n in enumerate(lengths):
        for t in range(16):
            step_in_episode = t % n
            first = step_in_episode == 0
            assert bool(seen_is_init[t][i]) == first, (i, t)
            # The first step of an episode resets x to x0, then takes one OU step.
            expected = x0 * (1 - theta * dt) ** (step_in_episode + 1)
            assert action[i, t].item() == pytest.approx(2 * expected, rel=1e-5), (i, t)
    assert "is_init" not in batch.keys()


def test_fast_and_plain_policy_calls_collect_the_same_batches():
    # tdrl._fast.policy calls a plain TensorDictModule on its tensors; policy(td) is its twin:
    # the same batches (keys in the same order, values, names, nested ones too).
    from tensordict.nn import TensorDictModule

    import tdrl

    class Noisy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(11, 3)

        def forward(self, observation):
            loc = self.net(observation)
            return loc + 0.3 * torch.randn_like(loc), loc

    batches = []
    for fast in (True, False, True):
        previous = tdrl.set_fast(fast)
        try:
            torch.manual_seed(0)
            policy = TensorDictModule(Noisy(), ["observation"], ["action", "loc"])
            with make_vec_env("Hopper-v5", 2, seed=1) as env:
                collector = Collector(env, policy, frames_per_batch=100, total_frames=200)
                batches.append(list(collector))
        finally:
            tdrl.set_fast(previous)
    for other in batches[1:]:
        for a, b in zip(batches[0], other, strict=True):
            assert type(a) is type(b) is TensorDict and a.batch_size == b.batch_size
            assert list(a.keys(True, True)) == list(b.keys(True, True))
            assert (a == b).all()
            assert a.names == b.names == [None, "time"]
            assert a["next"].names == b["next"].names == [None, "time"]
            assert a["collector"].names == b["collector"].names


def test_device_arguments_plumb_through_on_cpu():
    # What runs here without a GPU: explicit devices, the inferred policy device, the storing
    # device, and a clear error for CUDA on a machine without one (the next test runs the CUDA
    # path where a GPU is).
    torch.manual_seed(0)
    policy = TensorDictModule(nn.Linear(3, 1), ["observation"], ["action"])
    batches = []
    for kwargs in ({}, {"device": "cpu"}, {"device": torch.device("cpu"), "storing_device": "cpu"}):
        with make_vec_env("Pendulum-v1", 2, seed=0) as env:
            batch = next(iter(Collector(env, policy, 20, **kwargs)))
        assert batch["action"].device.type == "cpu" and batch["observation"].device.type == "cpu"
        batches.append(batch)
    assert all((b == batches[0]).all() for b in batches[1:])
    if not torch.cuda.is_available():
        with make_vec_env("Pendulum-v1", 1) as env:
            with pytest.raises(ValueError, match="no CUDA device"):
                Collector(env, policy, 10, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_policy_collects_the_same_batches_as_on_cpu():
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    cpu_policy = TensorDictModule(
        net,
        ["observation"],
        [
            "action",
        ],
    )
    with make_vec_env("Pendulum-v1", 2, seed=0) as env:
        reference = next(iter(Collector(env, cpu_policy, 40)))
    gpu_policy = TensorDictModule(copy.deepcopy(net).cuda(), ["observation"], ["action"])
    with make_vec_env("Pendulum-v1", 2, seed=0) as env:
        batch = next(iter(Collector(env, gpu_policy, 40)))
    assert batch["action"].is_cuda and batch["observation"].is_cuda  # out on the policy's device
    torch.testing.assert_close(batch["action"].cpu(), reference["action"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        batch["next", "observation"].cpu(), reference["next", "observation"], rtol=1e-4, atol=1e-4
    )


def test_a_policy_that_overwrites_its_observation_sees_each_steps_new_observation():
    # An observation normalizer in front of the actor writes the normalized observation over
    # the raw one; the next step must still read the env's new observation, not re-normalize
    # the last one (which compounded the transform step after step before the fix).
    def shift(observation: torch.Tensor) -> torch.Tensor:
        return observation - 1.0

    norm = TensorDictModule(shift, ["observation"], ["observation"])
    head = TensorDictModule(lambda x: (torch.tanh(x[..., :3]), x.clone()), ["observation"],
                            ["action", "seen"])  # fmt: skip
    policy = TensorDictSequential(norm, head)
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        batch = Collector(env, policy, frames_per_batch=40).rollout()
        stats = evaluate(env, policy, n_episodes=2, seed=1)
    torch.testing.assert_close(batch["seen"], batch["observation"] - 1.0)  # every step once
    assert np.isfinite(stats["return_mean"])


def test_a_policy_module_returning_a_dict_writes_each_out_key(fast_mode):
    # TensorDictModule maps a dict output onto its out-keys; the fast policy call does too.
    from tensordict.nn import TensorDictModule

    class DictPolicy(torch.nn.Module):
        def forward(self, observation):
            return {"action": observation[..., :1].clamp(-2.0, 2.0), "loc": observation + 1.0}

    policy = TensorDictModule(DictPolicy(), in_keys=["observation"], out_keys=["action", "loc"])
    with make_vec_env("Pendulum-v1", 2, seed=0) as env:
        batch = Collector(env, policy, 20).rollout()
    assert torch.equal(batch["loc"], batch["observation"] + 1.0)
    assert torch.equal(batch["action"], batch["observation"][..., :1].clamp(-2.0, 2.0))
