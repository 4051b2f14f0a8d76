"""NPG/TRPO: conjugate gradient, Fisher-vector products, the KL bound of a step, critic loss."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torch.distributions import kl_divergence

import tdrl.estimators
from tdrl.modules import CategoricalActor, GaussianActor, ValueCritic, mlp
from tdrl.objectives import NPGLoss, TRPOLoss, conjugate_gradient, flat_grad

OBS, ACT = 4, 2


def batch(n: int = 256, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    observation = torch.randn(n, OBS, generator=g)
    action = torch.randn(n, ACT, generator=g)
    # Advantages that reward moving the mean towards the action in the first dimension.
    advantage = (action[:, :1] * observation[:, :1]).sign()
    return TensorDict(
        observation=observation,
        action=action,
        advantage=advantage,
        value_target=torch.randn(n, 1, generator=g),
        batch_size=[n],
    )


def test_conjugate_gradient_solves_spd_system() -> None:
    g = torch.Generator().manual_seed(0)
    m = torch.randn(6, 6, generator=g, dtype=torch.float64)
    a = m @ m.T + 0.5 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iters=20)
    torch.testing.assert_close(x, torch.linalg.solve(a, b))


def test_fisher_vector_product_matches_explicit_hessian_of_kl() -> None:
    torch.manual_seed(0)
    actor = GaussianActor(torch.nn.Linear(OBS, ACT), ACT)
    td = batch(16)
    params = list(actor.parameters())
    with torch.no_grad():
        old = actor.get_dist(td)
    kl = kl_divergence(old, actor.get_dist(td)).mean()
    kl_grad = flat_grad(kl, params, create_graph=True)
    v = torch.randn(kl_grad.numel())
    fvp = flat_grad(kl_grad.dot(v), params, retain_graph=True)
    # Explicit Hessian, one row per parameter coordinate, by differentiating each grad entry.
    rows = [flat_grad(kl_grad[i], params, retain_graph=True) for i in range(kl_grad.numel())]
    torch.testing.assert_close(fvp, torch.stack(rows) @ v, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("discrete", [False, True])
def test_trpo_step_keeps_kl_within_bound_and_improves(discrete: bool) -> None:
    torch.manual_seed(1)
    td = batch()
    if discrete:
        actor = CategoricalActor(mlp(OBS, 3))
        td["action"] = torch.randint(0, 3, (256,))
    else:
        actor = GaussianActor(mlp(OBS, ACT), ACT)
    loss = TRPOLoss(actor, ValueCritic(mlp(OBS, 1)), max_kl=0.01)
    before = copy.deepcopy(actor)
    stats = loss.actor_step(td)
    with torch.no_grad():
        measured = kl_divergence(before.get_dist(td), actor.get_dist(td)).mean()
        log_ratio = actor.get_dist(td).log_prob(td["action"]) - before.get_dist(td).log_prob(
            td["action"]
        )
        advantage = td["advantage"].squeeze(-1)
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        improvement = (log_ratio.exp() * advantage).mean() - advantage.mean()
    assert 0 < float(stats["step_size"]) <= 1
    assert 0 < float(measured) <= 0.01
    torch.testing.assert_close(stats["kl"], measured)
    assert float(improvement) > 0
    torch.testing.assert_close(stats["surrogate_improvement"], improvement, atol=1e-5, rtol=1e-4)


def test_npg_step_has_the_kl_of_its_quadratic_model() -> None:
    torch.manual_seed(2)
    td = batch()
    actor = GaussianActor(mlp(OBS, ACT), ACT)
    before = copy.deepcopy(actor)
    stats = NPGLoss(actor, ValueCritic(mlp(OBS, 1)), max_kl=0.005, damping=0.0).actor_step(td)
    with torch.no_grad():
        measured = float(kl_divergence(before.get_dist(td), actor.get_dist(td)).mean())
    # No line search: the KL equals max_kl up to the quadratic model's error (third order).
    assert 0.5 * 0.005 < measured < 1.5 * 0.005
    assert float(stats["step_size"]) == 1.0
    assert float(stats["surrogate_improvement"]) > 0
    for bad in (dict(max_kl=float("nan")), dict(damping=float("nan")), dict(max_kl=0.0)):
        with pytest.raises(ValueError, match="need max_kl > 0, damping >= 0"):
            NPGLoss(actor, ValueCritic(mlp(OBS, 1)), **bad)


def test_line_search_failure_restores_parameters() -> None:
    torch.manual_seed(3)
    td = batch()
    td["advantage"] = torch.zeros(256, 1)  # zero gradient: no step can improve the surrogate
    actor = GaussianActor(mlp(OBS, ACT), ACT)
    before = [p.detach().clone() for p in actor.parameters()]
    stats = TRPOLoss(actor, ValueCritic(mlp(OBS, 1)), normalize_advantage=False).actor_step(td)
    assert float(stats["step_size"]) == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, actor.parameters(), strict=True))


def test_forward_is_the_critic_loss_only() -> None:
    actor, critic = GaussianActor(mlp(OBS, ACT), ACT), ValueCritic(mlp(OBS, 1))
    loss = NPGLoss(actor, critic)
    td = batch(32)
    before = td.clone()
    out = loss(td)
    assert [key for key in out.keys() if key.startswith("loss_")] == ["loss_critic"]
    out["loss_critic"].backward()
    assert all(p.grad is None for p in actor.parameters())
    assert all(p.grad is not None for p in critic.parameters())
    loss.actor_step(td)
    assert (td == before).all() and set(td.keys()) == set(before.keys())
    with pytest.raises(KeyError, match="estimator"):
        loss.actor_step(td.exclude("advantage"))


@pytest.mark.parametrize("loss_cls", [NPGLoss, TRPOLoss])
def test_actor_step_writes_parameters_in_place(loss_cls) -> None:
    """The step copies into each parameter's own storage: no views into a flat vector, so
    optimizers and checkpoints keep the same tensors (and resumed runs the same rounding)."""
    torch.manual_seed(0)
    actor = GaussianActor(mlp(OBS, ACT), ACT)
    before = {name: (p, p.data_ptr(), p.detach().clone()) for name, p in actor.named_parameters()}
    stats = loss_cls(actor, ValueCritic(mlp(OBS, 1))).actor_step(batch())
    assert stats["step_size"] > 0
    for name, param in actor.named_parameters():
        same, ptr, old = before[name]
        assert param is same and param.data_ptr() == ptr, name
        assert param.untyped_storage().nbytes() == param.numel() * param.element_size(), name
    assert any(not torch.equal(p, before[n][2]) for n, p in actor.named_parameters())


def test_the_trpo_recipe_refuses_a_nan_advantage_before_the_actor_moves(
    tmp_path, monkeypatch
) -> None:
    from recipes import trpo
    from tdrl.estimators import GAE
    from tdrl.trainers import configure

    class Leaky(GAE):  # an estimator that lets a NaN through
        def forward(self, tensordict, **kwargs):
            out = super().forward(tensordict, **kwargs)
            out["advantage"][0, 3] = float("nan")
            return out

    def actor_step(self, tensordict):
        raise AssertionError("the actor moved on a NaN advantage")

    monkeypatch.setattr(tdrl.estimators, "GAE", Leaky)
    monkeypatch.setattr(TRPOLoss, "actor_step", actor_step)
    cfg = configure(
        trpo.Config, env_id="Pendulum-v1", total_frames=64, num_envs=2, frames_per_batch=64,
        eval_episodes=1, eval_envs=1, hidden_sizes=(16,), log_dir=str(tmp_path), progress=False,
        tensorboard=False, curve=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"'advantage' contains NaN or inf \(1 of 64 entries\)"):
        trpo.main(cfg)
