"""PPG's auxiliary phase: the loss terms against their definitions (the Gaussian and categorical
KL written out), the shared value head, the cloning term holding the policy, bad input named."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import minibatches
from tdrl.envs import make_vec_env
from tdrl.keys import AUX_VALUE, KL, LOC, LOGITS, OBSERVATION, SCALE, VALUE_TARGET
from tdrl.modules import actor_critic, aux_value_head
from tdrl.objectives import PPGAuxLoss, total_loss
from tdrl.trainers import optimizer_step


def _parts(env_id: str, **kwargs):
    with make_vec_env(env_id, 2, seed=0) as env:
        actor, critic, _ = actor_critic(env.observation_spec, env.action_spec, **kwargs)
        obs_dim = env.observation_spec[OBSERVATION].shape[-1]
    return actor, aux_value_head(actor), critic, obs_dim


def _data(obs_dim: int, n: int = 256, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, obs_dim, generator=g)
    # a target the policy's features do not hold yet
    target = (obs.sin().sum(-1, keepdim=True) * 3.0 + 1.0).detach()
    return TensorDict({OBSERVATION: obs, VALUE_TARGET: target}, batch_size=[n])


def test_the_aux_head_shares_the_policys_hidden_layers_and_leaves_its_output_alone():
    actor, aux, _, obs_dim = _parts("Pendulum-v1", normalize_observations=True)
    actor_params = {id(p) for p in actor.parameters()}
    head = list(aux.net[-1].parameters())
    body = [p for p in aux.parameters() if all(p is not h for h in head)]
    assert body and all(id(p) in actor_params for p in body)  # the same tensors
    assert all(id(p) not in actor_params for p in head)
    data = _data(obs_dim)
    out = aux(data.clone())
    assert out[AUX_VALUE].shape == (256, 1)
    out[AUX_VALUE].sum().backward()
    first, last = actor.net[-1][0], actor.net[-1][-1]  # the MLP's first and output layers
    assert first.weight.grad is not None and first.weight.grad.abs().sum() > 0
    assert last.weight.grad is None  # the policy's output layer is not in the head


def test_gaussian_terms_equal_their_definitions():
    actor, aux, critic, obs_dim = _parts("Pendulum-v1", normalize_observations=False)
    loss = PPGAuxLoss(actor, aux, critic, beta_clone=0.7)
    data = loss.snapshot(_data(obs_dim, n=32))
    mu0, sigma0 = data[LOC].clone(), data[SCALE].clone()
    with torch.no_grad():  # move the policy: a KL to the snapshot
        for p in actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
    out = loss(data)
    with torch.no_grad():
        dist = actor.get_dist(data)
        mu1, sigma1 = dist.loc, dist.scale.expand_as(mu1 := dist.loc)
        # KL(N0 || N1) per dimension, summed over the action dims, averaged over the batch
        kl = (
            torch.log(sigma1 / sigma0) + (sigma0**2 + (mu0 - mu1) ** 2) / (2 * sigma1**2) - 0.5
        ).sum(-1)
        target = data[VALUE_TARGET].squeeze(-1)
        v_aux = aux.net(data[OBSERVATION]).squeeze(-1)
        v = critic.net(data[OBSERVATION]).squeeze(-1)
    assert kl.mean() > 1e-4
    torch.testing.assert_close(out[KL], kl.mean())
    torch.testing.assert_close(out["loss_clone"], 0.7 * kl.mean())
    torch.testing.assert_close(out["loss_aux_value"], 0.5 * ((v_aux - target) ** 2).mean())
    torch.testing.assert_close(out["loss_critic"], 0.5 * ((v - target) ** 2).mean())


def test_categorical_kl_equals_its_definition():
    actor, aux, critic, obs_dim = _parts("CartPole-v1", normalize_observations=False)
    loss = PPGAuxLoss(actor, aux, critic)
    data = loss.snapshot(_data(obs_dim, n=16))
    p0 = data[LOGITS].softmax(-1)
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(0.2 * torch.randn_like(p))
        p1 = actor.get_dist(data).probs
    kl = (p0 * (p0.log() - p1.log())).sum(-1).mean()
    assert kl > 1e-4
    torch.testing.assert_close(loss(data)[KL], kl)


def _aux_phase(beta_clone: float, seed: int = 0) -> tuple[float, float, float]:
    """CleanRL's auxiliary phase (Adam 5e-4, 6 epochs) on 2048 states, for a policy whose output
    layer has grown from its 0.01 init to gain 1 as training makes it: the policy's KL to the
    snapshot after it, and the aux value loss before and after."""
    torch.manual_seed(seed)
    actor, aux, critic, obs_dim = _parts("Pendulum-v1", normalize_observations=False)
    with torch.no_grad():
        actor.net[-1].weight.mul_(100.0)
    loss = PPGAuxLoss(actor, aux, critic, beta_clone=beta_clone)
    params = dict.fromkeys([*actor.parameters(), *aux.parameters(), *critic.parameters()])
    optimizer = torch.optim.Adam(params, lr=5e-4)
    data = loss.snapshot(_data(obs_dim, n=2048, seed=seed))
    with torch.no_grad():
        before = float(loss(data)["loss_aux_value"])
    generator = torch.Generator().manual_seed(seed)
    for minibatch in minibatches(data, 128, epochs=6, generator=generator):
        optimizer_step(total_loss(loss(minibatch)), optimizer, max_grad_norm=0.5)
    with torch.no_grad():
        out = loss(data)
    return float(out[KL]), before, float(out["loss_aux_value"])


@pytest.mark.parametrize("seed", [0, 1])
def test_the_aux_phase_keeps_the_policy_within_its_kl_bound_while_the_value_head_learns(seed):
    """The cloning term is what holds the policy: with beta_clone 1 the KL to the snapshot after
    the phase stays below 0.01 nats (PPO's usual per-update target KL), without it the same
    phase moves the policy over ten times further, and either way the aux value head learns."""
    kl, before, after = _aux_phase(1.0, seed)
    free_kl, _, free_after = _aux_phase(0.0, seed)
    assert kl < 0.01, kl
    assert free_kl > 10 * kl and free_kl > 0.05, (free_kl, kl)
    assert after < 0.5 * before and free_after < 0.5 * before, (before, after, free_after)


def test_bad_input_is_named():
    actor, aux, critic, obs_dim = _parts("CartPole-v1")
    with pytest.raises(ValueError, match="beta_clone must be finite and >= 0, got -1"):
        PPGAuxLoss(actor, aux, critic, beta_clone=-1.0)
    with pytest.raises(ValueError, match="beta_clone must be finite and >= 0, got nan"):
        PPGAuxLoss(actor, aux, critic, beta_clone=math.nan)
    loss = PPGAuxLoss(actor, aux, critic)
    with pytest.raises(KeyError, match=r"no \['logits'\] entries \(pi_old\): run loss.snapshot"):
        loss(_data(obs_dim, n=8))
    data = loss.snapshot(_data(obs_dim, n=8))
    data[VALUE_TARGET][3] = float("nan")
    with pytest.raises(ValueError, match="value_target"):
        loss(data)
    with make_vec_env("Pendulum-v1", 2, seed=0) as env:
        gsde, _, _ = actor_critic(env.observation_spec, env.action_spec, sde_sample_freq=4)
        recurrent, _, _ = actor_critic(env.observation_spec, env.action_spec, recurrent="gru")
    for actor in (gsde, recurrent):
        with pytest.raises(ValueError, match="has no feed-forward network ending in a linear"):
            aux_value_head(actor)


def test_ppg_flags_out_of_range_are_named():
    from recipes import ppg
    from tdrl.trainers import configure

    with pytest.raises(ValueError, match="--aux-epochs must be >= 1, got 0"):
        configure(ppg.Config, aux_epochs=0)
    with pytest.raises(ValueError, match="--policy-iterations must be >= 1, got 0"):
        configure(ppg.Config, policy_iterations=0)
    with pytest.raises(ValueError, match="--beta-clone \\(a loss weight\\) must be finite"):
        configure(ppg.Config, beta_clone=-0.5)
