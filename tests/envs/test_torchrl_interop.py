"""TorchRL envs both ways (tdrl.envs.to_torchrl / from_torchrl) on Hopper-v5: the same seed gives
the same transitions through tdrl's collector, TorchRL's collector over ``to_torchrl`` and tdrl's
collector over ``from_torchrl(GymEnv)``, and terminated steps carry the unhealthy final
observation in every path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector as TorchRLCollector
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase, GymEnv, SerialEnv, StepCounter, TransformedEnv
from torchrl.envs.utils import check_env_specs

from tdrl.collectors import Collector, evaluate
from tdrl.envs import from_torchrl, make_vec_env, to_torchrl

STEPS = 400


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(11, 3), torch.nn.Tanh())
    with torch.no_grad():
        net[0].weight.mul_(8.0)  # strong actions: Hopper falls (terminates) within tens of steps
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


def _unhealthy(obs: torch.Tensor) -> torch.Tensor:
    # Hopper-v5's health check (gymnasium hopper_v5.py): z > 0.7, |angle| < 0.2, |state| < 100.
    z, angle, state = obs[..., 0], obs[..., 1], obs[..., 1:]
    healthy = (z > 0.7) & (angle.abs() < 0.2) & (state.abs() < 100).all(-1)
    return ~healthy


def _transitions(batch) -> dict[str, torch.Tensor]:
    batch = batch.reshape(-1)
    return {
        "observation": batch["observation"].float(),
        "action": batch["action"],
        "next_observation": batch["next", "observation"].float(),
        "reward": batch["next", "reward"].float().reshape(-1),
        "terminated": batch["next", "terminated"].reshape(-1),
        "truncated": batch["next", "truncated"].reshape(-1),
    }


def test_same_transitions_through_all_three_paths():
    policy = _policy()
    with make_vec_env("Hopper-v5", 1, seed=0) as env:
        tdrl_batch = next(iter(Collector(env, policy, frames_per_batch=STEPS, total_frames=STEPS)))
    torchrl_env = to_torchrl(make_vec_env("Hopper-v5", 1, seed=0))
    collector = TorchRLCollector(
        torchrl_env,
        policy,
        frames_per_batch=STEPS,
        total_frames=STEPS,
        auto_register_policy_transforms=False,
    )
    torchrl_batch = next(iter(collector))
    collector.shutdown()
    with from_torchrl(GymEnv("Hopper-v5"), seed=0) as env:
        back_batch = next(iter(Collector(env, policy, frames_per_batch=STEPS, total_frames=STEPS)))

    reference = _transitions(tdrl_batch)
    assert reference["terminated"].sum() >= 3  # several episode ends inside the batch
    for name, other in (("to_torchrl", torchrl_batch), ("from_torchrl", back_batch)):
        got = _transitions(other)
        for key, value in reference.items():
            torch.testing.assert_close(got[key], value, msg=f"{name}: {key} differs")
    # Terminated steps carry the real (unhealthy) final observation, never the reset one.
    ended = reference["terminated"]
    assert _unhealthy(reference["next_observation"][ended]).all()
    assert not _unhealthy(reference["observation"]).any()
    following = torch.nonzero(ended).reshape(-1) + 1
    following = following[following < STEPS]
    assert not torch.equal(
        reference["next_observation"][following - 1], reference["observation"][following]
    )


def test_to_torchrl_specs_transforms_and_partial_resets():
    env = to_torchrl(make_vec_env("Hopper-v5", 3, seed=1))
    check_env_specs(env)
    counted = TransformedEnv(env, StepCounter(max_steps=7))
    rollout = counted.rollout(20, break_when_any_done=False)
    truncated = rollout["next", "truncated"].squeeze(-1)
    terminated = rollout["next", "terminated"].squeeze(-1)
    # Every env is cut at step 7 and 14 unless it terminated before; the cut env alone restarts.
    steps = rollout["step_count"].squeeze(-1)
    assert (steps <= 6).all() and truncated.any()
    for row in range(3):
        for t in torch.nonzero(truncated[row] | terminated[row]).reshape(-1).tolist():
            if t + 1 < 20:
                assert steps[row, t + 1] == 0
                # the reset observation is healthy and differs from the final one
                assert not torch.equal(
                    rollout["next", "observation"][row, t], rollout["observation"][row, t + 1]
                )
    counted.close()


def test_from_torchrl_batched_env_runs_in_collector_and_evaluate():
    serial = SerialEnv(2, lambda: GymEnv("Hopper-v5"))
    with from_torchrl(serial, seed=3) as env:
        assert env.num_envs == 2 and env.action_spec.shape == (2, 3)
        batch = next(iter(Collector(env, _policy(), frames_per_batch=200, total_frames=200)))
        assert batch.batch_size == (2, 100)
        ended = batch["next", "terminated"].squeeze(-1)
        assert ended.any()
        assert _unhealthy(batch["next", "observation"][ended]).all()
        result = evaluate(env, _policy(), n_episodes=2, seed=0)
        assert result["return_mean"] != 0


class _IntegerObservation(EnvBase):
    def __init__(self):
        super().__init__(batch_size=torch.Size([]))
        self.observation_spec = Composite(observation=Unbounded((3,), dtype=torch.int64))
        self.action_spec = Bounded(-1, 1, (1,))
        self.done_spec = Composite(done=Categorical(2, (1,), dtype=torch.bool))

    def _reset(self, td=None, **kw):
        raise AssertionError

    def _step(self, td):
        raise AssertionError

    def _set_seed(self, seed):
        pass


def test_from_torchrl_bad_input_is_named():
    with pytest.raises(TypeError, match="TorchRL EnvBase"):
        from_torchrl(object())  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match=r"observation_spec\.observation"):
        from_torchrl(_IntegerObservation())
    with pytest.raises(TypeError, match="tdrl VecEnv"):
        to_torchrl(GymEnv("Pendulum-v1"))  # type: ignore[arg-type]


def test_final_observation_numbers_match_gymnasium():
    # Spot check against raw gymnasium: the first episode's final observation equals what a
    # plain gymnasium env stepped with the same actions returns at termination.
    import gymnasium as gym

    policy = _policy()
    with make_vec_env("Hopper-v5", 1, seed=0) as env:
        batch = next(iter(Collector(env, policy, frames_per_batch=STEPS, total_frames=STEPS)))
    raw = gym.make("Hopper-v5")
    raw.reset(seed=0)
    for t in range(STEPS):
        obs, _, terminated, truncated, _ = raw.step(batch["action"][0, t].numpy())
        if terminated or truncated:
            np.testing.assert_allclose(
                batch["next", "observation"][0, t].numpy(), obs.astype(np.float32)
            )
            assert bool(batch["next", "terminated"][0, t]) == terminated
            break
    else:
        pytest.fail("no episode ended")
