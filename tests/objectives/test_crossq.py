"""CrossQLoss against its definition (Bhatt et al. 2024; sb3-contrib's CrossQ.train), written out
with explicit loops: the critic regressed on a target from the same joint forward of (s, a) and
(s', a'), whose batch statistics are the mixture's; the actor on its batch statistics and the
critic on its running ones; no target network; and the inputs it refuses."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import make_vec_env
from tdrl.modules import batch_statistics, q_ensemble, tanh_gaussian_actor
from tdrl.objectives import CrossQLoss
from tdrl.objectives.offpolicy import rsample_and_log_prob

N, B = 2, 6
RENORM = {"momentum": 0.3, "warmup_steps": 0}  # renorm active at once: r and d matter


@pytest.fixture(scope="module")
def specs():
    with make_vec_env("Pendulum-v1", 1) as env:
        return env.observation_spec, env.action_spec


def make_loss(specs, **kwargs):
    torch.manual_seed(0)
    actor = tanh_gaussian_actor(*specs, (8,), batch_renorm=RENORM)
    critic = q_ensemble(*specs, (8,), N, batch_renorm=RENORM)
    loss = CrossQLoss(actor, critic, **kwargs)
    warm = make_batch(seed=5)  # running statistics away from their (0, 1) start
    for _ in range(3):
        loss(warm)
    return loss


def make_batch(terminated=(False,) * B, seed=1) -> TensorDict:
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "observation": torch.randn(B, 3, generator=gen),
            "action": torch.rand(B, 1, generator=gen) * 4 - 2,
            "next": {
                "observation": torch.randn(B, 3, generator=gen) + 1.0,
                "reward": torch.randn(B, 1, generator=gen),
                "terminated": torch.tensor(terminated).view(B, 1),
                "truncated": torch.zeros(B, 1, dtype=torch.bool),
                "done": torch.tensor(terminated).view(B, 1),
            },
        },
        batch_size=[B],
    )


def q_rows(critic, observation, action) -> list[list[float]]:
    """Q_e(s_b, a_b) as nested lists [e][b], the critic learning from this batch."""
    td = TensorDict({"observation": observation, "action": action}, batch_size=[len(action)])
    with torch.no_grad(), batch_statistics(critic):
        values = critic.values(td)
    return [[float(values[e, b, 0]) for b in range(len(action))] for e in range(N)]


@pytest.mark.parametrize("terminated", [(False,) * B, (True, False, True, False, False, True)])
def test_the_critic_regresses_on_a_target_from_the_same_joint_forward(specs, terminated):
    loss, batch = make_loss(specs), make_batch(terminated)
    alpha = float(loss.alpha)
    critic = copy.deepcopy(loss.qvalue_network)  # the same statistics, before this step
    old_mean = critic.net.renorms[0].running_mean[0, 0].clone()
    torch.manual_seed(7)  # a' ~ pi(.|s') on the actor's running statistics, as the loss draws
    with torch.no_grad():
        dist = loss.actor_network.get_dist(batch["next"].select("observation"))
        next_action, next_log_prob = rsample_and_log_prob(dist)
    observations = torch.cat([batch["observation"], batch["next", "observation"]])
    q = q_rows(critic, observations, torch.cat([batch["action"], next_action]))
    want = 0.0
    for e in range(N):
        total = 0.0
        for b in range(B):
            r = float(batch["next", "reward"][b])
            soft = min(q[k][B + b] for k in range(N)) - alpha * float(next_log_prob[b])
            y = r + (0.0 if terminated[b] else 0.99 * soft)
            total += (q[e][b] - y) ** 2
        want += total / B
    torch.manual_seed(7)
    got, td_error = loss.qvalue_loss(batch)
    assert float(got.detach()) == pytest.approx(want, rel=1e-5)
    assert td_error.shape == (B,)
    # The same joint batch moved the running statistics of the critic's first layer: the
    # mixture's mean, not the current rows' alone.
    first = loss.qvalue_network.net.renorms[0]
    inputs = torch.cat([observations, torch.cat([batch["action"], next_action])], dim=-1)
    mixture = old_mean * 0.7 + 0.3 * inputs.mean(0)
    torch.testing.assert_close(first.running_mean[0, 0], mixture, rtol=1e-5, atol=1e-6)


def test_the_actor_learns_from_its_batch_and_the_critic_keeps_its_running_statistics(specs):
    loss, twin, batch = make_loss(specs), make_loss(specs), make_batch()  # twin: the same state
    actor_steps = [int(m.steps) for m in loss.actor_network.modules() if hasattr(m, "steps")]
    critic_state = copy.deepcopy(loss.qvalue_network.state_dict())
    alpha = float(loss.alpha)
    torch.manual_seed(3)
    got, _ = loss.actor_loss(batch)
    # by hand: the actor's sample on its batch statistics, Q on the critic's running ones
    torch.manual_seed(3)
    with torch.no_grad(), batch_statistics(twin.actor_network):
        dist = twin.actor_network.get_dist(batch.select("observation"))
        action, log_prob = rsample_and_log_prob(dist)
    td = TensorDict({"observation": batch["observation"], "action": action}, batch_size=[B])
    with torch.no_grad():
        q = twin.qvalue_network.values(td)[:, :, 0]
    want = sum(alpha * float(log_prob[b]) - min(float(q[e, b]) for e in range(N)) for b in range(B))
    assert float(got.detach()) == pytest.approx(want / B, rel=1e-5)
    # the actor's statistics moved, the critic's did not; the gradient reaches the actor only
    steps = [int(m.steps) for m in loss.actor_network.modules() if hasattr(m, "steps")]
    assert steps == [s + 1 for s in actor_steps]
    for key, value in loss.qvalue_network.state_dict().items():
        assert torch.equal(value, critic_state[key]), key
    got.backward()
    assert all(p.grad is None for p in loss.qvalue_network.parameters())
    assert any(p.grad is not None for p in loss.actor_network.parameters())


def test_acting_reads_the_running_statistics_and_changes_nothing(specs):
    loss = make_loss(specs)
    actor = loss.actor_network
    state = copy.deepcopy(actor.state_dict())
    one = TensorDict({"observation": torch.randn(1, 3)}, batch_size=[1])  # one env's step
    actor.train()
    actor(one)
    for key, value in actor.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_no_target_network_and_bad_inputs_are_named(specs):
    loss = make_loss(specs)
    assert loss.target_pairs() == []
    assert loss.target_qvalue_network is loss.qvalue_network
    torch.manual_seed(0)
    actor = tanh_gaussian_actor(*specs, (8,))
    with pytest.raises(ValueError, match="delay_qvalue=True asks for a target network"):
        CrossQLoss(actor, q_ensemble(*specs, (8,), N, batch_renorm={}), delay_qvalue=True)
    with pytest.raises(ValueError, match="EnsembleCritic with BatchRenorm layers"):
        CrossQLoss(actor, q_ensemble(*specs, (8,), N))
