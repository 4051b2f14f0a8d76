"""GAE over the agent dim: per-agent rewards and flags, truncation per agent, no bootstrap from a
gone agent's steps; checked against the single-agent op per agent and an explicit sum."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import MultiAgentCollector
from tdrl.envs import PettingZooVecEnv, make_vec_env
from tdrl.estimators import GAE
from tdrl.ops import gae
from tests.tiny_envs import LeavingAgents

A = "agents"
GAMMA, LMBDA = 0.9, 0.8


def _critic(obs_dim: int) -> TensorDictModule:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(obs_dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return TensorDictModule(net, [(A, "observation")], [(A, "state_value")])


def _estimator(critic: TensorDictModule) -> GAE:
    estimator = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)
    return estimator.set_keys(
        advantage=(A, "advantage"), value_target=(A, "value_target"), value=(A, "state_value"),
        reward=(A, "reward"), done=(A, "done"), terminated=(A, "terminated"),
        truncated=(A, "truncated"),
    )  # fmt: skip


def _explicit_gae(reward, value, next_value, terminated, done):
    """``A_t = sum_l (gamma lambda)^l delta_{t+l}``, the sum stopping after the first step that
    ends the agent's episode; ``delta = r + gamma (1 - terminated) V(s') - V(s)``."""
    steps = len(reward)
    delta = [
        reward[t] + GAMMA * (1.0 - terminated[t]) * next_value[t] - value[t] for t in range(steps)
    ]
    out = []
    for t in range(steps):
        total, weight = 0.0, 1.0
        for k in range(t, steps):
            total += weight * delta[k]
            if done[k]:
                break
            weight *= GAMMA * LMBDA
        out.append(total)
    return torch.tensor(out)


def _batch(which: str):
    if which == "vmas":
        pytest.importorskip("vmas")
        env = make_vec_env("vmas/navigation", 2, seed=0, n_agents=3, max_steps=5)
    else:  # agents that leave at steps 2 and 4, one truncated at 5
        env = PettingZooVecEnv(LeavingAgents, 2, seed=0)
    return MultiAgentCollector(env, None, 2 * 9).rollout()


@pytest.mark.parametrize("which", ["vmas", "leaving_agents"])
def test_per_agent_gae_is_the_single_agent_op_per_agent_and_the_explicit_sum(which):
    batch = _batch(which)
    critic = _critic(batch[A, "observation"].shape[-1])
    _estimator(critic)(batch)
    advantage = batch[A, "advantage"]  # [envs, T, agents, 1]
    assert advantage.shape == batch["next", A, "reward"].shape
    for agent in range(batch[A, "observation"].shape[2]):
        pick = (slice(None), slice(None), agent)
        single = gae(
            batch["next", A, "reward"][pick], batch[A, "state_value"][pick],
            batch["next", A, "state_value"][pick], batch["next", A, "terminated"][pick],
            batch["next", A, "done"][pick], gamma=GAMMA, lmbda=LMBDA, time_dim=1,
        )  # fmt: skip
        torch.testing.assert_close(advantage[pick], single.advantage)
        for env in range(batch.batch_size[0]):
            row = (env, slice(None), agent, 0)
            expected = _explicit_gae(
                batch["next", A, "reward"][row].tolist(), batch[A, "state_value"][row].tolist(),
                batch["next", A, "state_value"][row].tolist(),
                batch["next", A, "terminated"][row].float().tolist(),
                batch["next", A, "done"][row].tolist(),
            )  # fmt: skip
            torch.testing.assert_close(advantage[row], expected, rtol=1e-5, atol=1e-5)


def test_a_gone_agent_bootstraps_nothing_and_its_last_step_sees_no_future():
    """Agent 0 leaves at step 1 (terminated): its advantage there is r - V(s) whatever comes after
    in the episode, and the steps it is absent from change nothing before them."""
    batch = MultiAgentCollector(PettingZooVecEnv(LeavingAgents, 1, seed=0), None, 5).rollout()
    critic = _critic(3)
    _estimator(critic)(batch)
    advantage = batch[A, "advantage"][0, :, 0, 0]
    reward, value = batch["next", A, "reward"][0, :, 0, 0], batch[A, "state_value"][0, :, 0, 0]
    torch.testing.assert_close(advantage[1], reward[1] - value[1])
    changed = batch.clone()
    changed["next", A, "reward"][0, 2:, 0] = 100.0  # the absent steps
    _estimator(critic)(changed)
    torch.testing.assert_close(changed[A, "advantage"][0, :2, 0], batch[A, "advantage"][0, :2, 0])
