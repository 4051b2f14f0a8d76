"""MuJoCo Warp's worlds (``make_vec_env(..., backend="mujoco_warp")``) against gymnasium's v5
tasks: one step from the same state gives the same observation, reward and termination within
float32's tolerance; resets, truncation and same-step autoreset follow gymnasium's rules; the
device collector batches them; bad input is named."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_warp")

from tdrl.collectors import DeviceCollector  # noqa: E402
from tdrl.envs import make_vec_env  # noqa: E402
from tdrl.envs.warp_backend import WarpVecEnv  # noqa: E402

# One env step from the same float32 state: MuJoCo Warp steps in float32, gymnasium in float64.
# Measured over 8 worlds x 100 random-action steps: observations within 2e-6 (Hopper), 3e-5
# (Walker2d), 4.4e-4 (HalfCheetah) of 1 + |x|; rewards within 1.1e-5.
OBS_RTOL, REWARD_ATOL = 1e-3, 1e-4


@pytest.mark.parametrize(
    "task",
    [
        "Hopper-v5",
        pytest.param("Walker2d-v5", marks=pytest.mark.variants),
        pytest.param("HalfCheetah-v5", marks=pytest.mark.variants),
    ],
)
def test_a_step_agrees_with_gymnasium_from_the_same_state(task: str, device: str) -> None:
    n, steps = 4, 40
    env = make_vec_env(task, n, seed=0, backend="mujoco_warp", device=device)
    env.reset()
    refs = [gym.make(task).unwrapped for _ in range(n)]
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
    rng = np.random.default_rng(0)
    terminations = 0
    for _ in range(steps):
        qpos, qvel = env._qpos.clone(), env._qvel.clone()
        env.set_state(qpos, qvel)
        for i, ref in enumerate(refs):
            ref.set_state(qpos[i].double().cpu().numpy(), qvel[i].double().cpu().numpy())
        action = rng.uniform(-1, 1, (n, env.action_spec.shape[-1])).astype(np.float32)
        nxt, _ = env.step(torch.from_numpy(action).to(device))
        expected = [ref.step(action[i]) for i, ref in enumerate(refs)]
        obs = np.stack([e[0] for e in expected])
        got = nxt["observation"].cpu().double().numpy()
        np.testing.assert_array_less(np.abs(got - obs), OBS_RTOL * (1 + np.abs(obs)))
        reward = np.array([e[1] for e in expected])
        np.testing.assert_allclose(nxt["reward"].squeeze(-1).cpu(), reward, atol=REWARD_ATOL)
        terminated = np.array([e[2] for e in expected])
        assert nxt["terminated"].squeeze(-1).cpu().tolist() == terminated.tolist()
        terminations += int(terminated.sum())
    if task == "Hopper-v5":  # random actions topple the hopper: the rule was exercised
        assert terminations > 0


def test_resets_draw_gymnasium_noise_and_follow_the_seed(device: str) -> None:
    env = WarpVecEnv("Hopper-v5", 64, seed=3, device=device)
    first = env.reset()["observation"].cpu()
    task = gym.make("Hopper-v5").unwrapped
    init = np.concatenate([task.init_qpos[1:], task.init_qvel])
    scale = task._reset_noise_scale
    offset = first.double().numpy() - init
    assert (np.abs(offset) <= scale + 1e-6).all()
    assert offset.std() > scale / 4  # spread over the range, not a constant
    again = WarpVecEnv("Hopper-v5", 64, seed=3, device=device).reset()["observation"].cpu()
    other = WarpVecEnv("Hopper-v5", 64, seed=4, device=device).reset()["observation"].cpu()
    torch.testing.assert_close(again, first)
    assert not torch.equal(other, first)
    torch.testing.assert_close(env.reset(seed=3)["observation"].cpu(), first)


def test_truncation_and_same_step_autoreset(device: str) -> None:
    env = make_vec_env(
        "Hopper-v5", 3, seed=0, backend="mujoco_warp", device=device, max_episode_steps=4
    )
    start = env.reset()["observation"]
    zero = torch.zeros(3, 3, device=device)
    for t in range(1, 9):
        nxt, following = env.step(zero)
        ended = t % 4 == 0
        assert nxt["truncated"].all().item() is ended and nxt["done"].all().item() is ended
        assert not nxt["terminated"].any()  # standing still for 4 steps keeps it healthy
        if ended:  # the real final observation, then a fresh start near the initial pose
            assert not torch.equal(nxt["observation"], following["observation"])
            near = (following["observation"] - start)[:, :5].abs()  # positions: 2 x noise
            assert (near <= 0.0101).all()
        else:
            torch.testing.assert_close(nxt["observation"], following["observation"])
        assert not following["done"].any()


def test_an_unhealthy_world_terminates_and_only_it_resets(device: str) -> None:
    env = WarpVecEnv("Hopper-v5", 3, seed=0, device=device)
    env.reset()
    qpos, qvel = env._qpos.clone(), env._qvel.clone()
    qpos[1, 1] = 0.5  # below the healthy z range (0.7, inf)
    env.set_state(qpos, qvel)
    nxt, following = env.step(torch.zeros(3, 3, device=device))
    assert nxt["terminated"].squeeze(-1).tolist() == [False, True, False]
    assert not nxt["truncated"].any()
    reward = nxt["reward"].squeeze(-1).cpu()
    assert reward[1] < reward[0] - 0.5  # no healthy reward for the fallen one
    torch.testing.assert_close(following["observation"][0], nxt["observation"][0])
    assert following["observation"][1, 0] > 1.2  # z back at the start height (1.25)
    assert nxt["observation"][1, 0] < 0.7


def test_the_device_collector_batches_episodes(device: str) -> None:
    env = make_vec_env("Hopper-v5", 4, seed=0, backend="mujoco_warp", device=device,
                       max_episode_steps=4)  # fmt: skip
    collector = DeviceCollector(env, None, frames_per_batch=4 * 8, total_frames=64)
    batches = list(collector)
    assert len(batches) == 2 and collector.frames == 64
    batch = batches[0]
    assert batch.batch_size == torch.Size([4, 8]) and batch.names == [None, "time"]
    assert (
        batch["observation"].shape == (4, 8, 11) and batch.device.type == torch.device(device).type
    )
    assert batch["action"].shape == (4, 8, 3)
    for key in ("reward", "done", "terminated", "truncated"):
        assert batch["next", key].shape == (4, 8, 1)
    ids = torch.cat([b["collector", "traj_ids"] for b in batches], 1).cpu()
    done = torch.cat([b["next", "done"] for b in batches], 1).squeeze(-1).cpu()
    # a trajectory id changes exactly after each episode end and is never used twice
    assert torch.equal(ids[:, 1:] != ids[:, :-1], done[:, :-1])
    runs = [tuple(row.unique_consecutive().tolist()) for row in ids]
    flat = [i for run in runs for i in run]
    assert len(flat) == len(set(flat))
    episodes = collector.episodes  # those that ended in the last batch, in the order they ended
    assert len(episodes) == int(batches[1]["next", "done"].sum())
    rewards = batches[1]["next", "reward"].squeeze(-1).cpu()
    last_ids = batches[1]["collector", "traj_ids"].cpu()
    checked = 0
    for ret, length, tid in zip(*(episodes[k] for k in ("episode_return", "episode_length",
                                                        "traj_ids")), strict=True):  # fmt: skip
        steps = last_ids == tid
        if int(steps.sum()) == int(length):  # started and ended in this batch: its rewards' sum
            torch.testing.assert_close(rewards[steps].sum(), ret, rtol=1e-5, atol=1e-4)
            checked += 1
    assert checked > 0 and (episodes["episode_length"] <= 4).all()


def test_a_nan_action_is_caught_in_the_batch_and_named() -> None:
    env = make_vec_env("Hopper-v5", 2, seed=0, backend="mujoco_warp", device="cpu")

    def nan_policy(td):
        td.set("action", torch.full((2, 3), float("nan")))
        return td

    collector = DeviceCollector(env, nan_policy, frames_per_batch=4)
    with pytest.raises(ValueError, match=r"non-finite \('next', 'reward'\) at env 0, step 0"):
        collector.rollout()


def test_a_world_short_of_contact_buffers_is_named() -> None:
    env = make_vec_env("Hopper-v5", 2, seed=0, backend="mujoco_warp", device="cpu",
                       contacts_per_world=1, rows_per_world=2)  # fmt: skip
    collector = DeviceCollector(env, None, frames_per_batch=2 * 30)
    with pytest.raises(RuntimeError, match=r"overflowed mujoco_warp's buffers \(\[.*'NEFC'"):
        collector.rollout()  # the hopper lands: more contacts and rows than allocated
    roomy = make_vec_env("Hopper-v5", 2, seed=0, backend="mujoco_warp", device="cpu")
    DeviceCollector(roomy, None, frames_per_batch=2 * 30).rollout()  # the defaults suffice


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="models the tasks .*'Hopper-v5'.*'Ant-v5' is a AntEnv"):
        make_vec_env("Ant-v5", 2, backend="mujoco_warp", device="cpu")
    with pytest.raises(ValueError, match="is a CartPoleEnv"):
        make_vec_env("CartPole-v1", 2, backend="mujoco_warp", device="cpu")
    with pytest.raises(ValueError, match="mode='sync'"):
        make_vec_env("Hopper-v5", 2, mode="async", backend="mujoco_warp")
    with pytest.raises(ValueError, match="backend must be 'gymnasium', 'envpool' or 'mujoco_warp'"):
        make_vec_env("Hopper-v5", 2, backend="warp")
    with pytest.raises(ValueError, match="clips actions to the control range"):
        make_vec_env("Hopper-v5", 2, backend="mujoco_warp", out_of_bounds="reject")
    env = WarpVecEnv("Hopper-v5", 2, device="cpu")
    with pytest.raises(RuntimeError, match=r"reset\(\) before the first step"):
        env.step(torch.zeros(2, 3))
    env.reset()
    with pytest.raises(ValueError, match=r"'action' has shape \(2, 4\), expected \(2, 3\)"):
        env.step(torch.zeros(2, 4))
    with pytest.raises(TypeError, match="'action' has dtype torch.float64"):
        env.step(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="DeviceCollector: env must be a WarpVecEnv"):
        DeviceCollector(make_vec_env("Hopper-v5", 2), None, frames_per_batch=4)
    env.close()
    with pytest.raises(RuntimeError, match="is closed"):
        env.step(torch.zeros(2, 3))


def test_torchrl_collects_from_the_worlds_through_to_torchrl(device: str) -> None:
    """TorchRL's own Collector over the worlds: real final observations in ("next", ...), the
    reset observation at the step after an end, nothing copied off the device."""
    from torchrl.collectors import Collector

    from tdrl.envs import to_torchrl

    env = to_torchrl(make_vec_env("Hopper-v5", 3, seed=0, backend="mujoco_warp", device=device,
                                  max_episode_steps=4))  # fmt: skip
    collector = Collector(env, None, frames_per_batch=3 * 10, total_frames=30, device=device)
    batch = next(iter(collector))
    collector.shutdown()
    assert (
        batch.batch_size == torch.Size([3, 10]) and batch.device.type == torch.device(device).type
    )
    done = batch["next", "done"].squeeze(-1).cpu()
    assert done[:, [3, 7]].all() and done.sum() == 6  # truncated at 4 steps, in every world
    obs, nxt = batch["observation"].cpu(), batch["next", "observation"].cpu()
    running = ~done[:, :-1]
    torch.testing.assert_close(obs[:, 1:][running], nxt[:, :-1][running])  # continuity
    ended = done[:, :-1]
    assert (obs[:, 1:][ended] - nxt[:, :-1][ended]).abs().amax(-1).gt(1e-3).all()
    start = obs[:, 0]  # each world's first observation: a reset one, near the initial pose
    assert ((obs[:, 4] - start)[:, :5].abs() <= 0.0101).all()


def test_partial_resets_reset_only_the_masked_worlds_also_through_torchrl() -> None:
    from tensordict import TensorDict
    from torchrl.envs import StepCounter, TransformedEnv

    from tdrl.envs import to_torchrl

    env = WarpVecEnv("Hopper-v5", 3, seed=0, device="cpu")
    with pytest.raises(RuntimeError, match="needs a full reset first"):
        env.reset(mask=torch.tensor([True, False, False]))
    first = env.reset()["observation"]
    with pytest.raises(ValueError, match=r"bool tensor of shape \(3,\), got torch.int64"):
        env.reset(mask=torch.tensor([1, 0, 0]))
    nxt, _ = env.step(torch.ones(3, 3))
    again = env.reset(mask=torch.tensor([False, True, False]))["observation"]
    torch.testing.assert_close(again[[0, 2]], nxt["observation"][[0, 2]])  # untouched
    assert not torch.equal(again[1], nxt["observation"][1])  # a fresh start
    assert ((again[1] - first[1])[:5].abs() <= 0.0101).all()
    # TorchRL's StepCounter truncates running worlds: its partial reset resets them alone
    worlds = TransformedEnv(to_torchrl(WarpVecEnv("Hopper-v5", 2, seed=1)), StepCounter(3))
    td = worlds.rollout(7, break_when_any_done=False)
    steps = td["step_count"].squeeze(-1)
    assert steps[0].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert td["next", "truncated"].squeeze(-1)[:, 2].all()
    # a seeded partial reset re-seeds the noise and resets the masked world alone
    adapter = to_torchrl(WarpVecEnv("Hopper-v5", 2, seed=1))
    adapter.rand_step(adapter.reset())
    qpos = adapter.env._qpos.clone()
    mask = TensorDict({"_reset": torch.tensor([[True], [False]])}, batch_size=[2])
    adapter.reset(mask, seed=3)
    torch.testing.assert_close(adapter.env._qpos[1], qpos[1])  # the running world kept its state
    assert not torch.equal(adapter.env._qpos[0], qpos[0])
