"""TorchRL modules in tdrl losses, tdrl modules in TorchRL's ClipPPOLoss, TorchRL's GAE upstream."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import AddStateIndependentNormalScale, NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.modules import IndependentNormal, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss as TorchRLClipPPOLoss
from torchrl.objectives.value import GAE

from tdrl.modules import GaussianActor, ValueCritic, mlp
from tdrl.objectives import A2CLoss, ClipPPOLoss, TRPOLoss

OBS, ACT = 4, 2


def rollout(n: int = 48) -> TensorDict:
    return TensorDict(
        observation=torch.randn(n, OBS),
        action=torch.randn(n, ACT).clamp(-0.9, 0.9),
        action_log_prob=torch.randn(n) - 2,
        advantage=torch.randn(n, 1),
        value_target=torch.randn(n, 1),
        batch_size=[n],
    )


def torchrl_twins() -> tuple[ProbabilisticActor, ValueOperator, GaussianActor, ValueCritic]:
    actor = GaussianActor(mlp(OBS, ACT), ACT, init_log_std=-0.5)
    critic = ValueCritic(mlp(OBS, 1))
    scale = AddStateIndependentNormalScale(ACT, init_value=-0.5)
    torchrl_actor = ProbabilisticActor(
        TensorDictModule(nn.Sequential(actor.net, scale), ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    return torchrl_actor, ValueOperator(critic.net, in_keys=["observation"]), actor, critic


def test_torchrl_modules_give_the_same_tdrl_losses() -> None:
    torchrl_actor, torchrl_critic, actor, critic = torchrl_twins()
    td = rollout()
    before = td.clone()
    ours = ClipPPOLoss(actor, critic, entropy_coeff=0.01, clip_value=None)(td)
    theirs = ClipPPOLoss(torchrl_actor, torchrl_critic, entropy_coeff=0.01)(td)
    for key in ("loss_objective", "loss_critic", "loss_entropy", "kl_approx", "clip_fraction"):
        torch.testing.assert_close(theirs[key], ours[key])
    assert (td == before).all() and set(td.keys()) == set(before.keys())  # not mutated
    ours = A2CLoss(actor, critic)(td)
    theirs = A2CLoss(torchrl_actor, torchrl_critic)(td)
    torch.testing.assert_close(theirs["loss_objective"], ours["loss_objective"])


def test_torchrl_tanh_actor_trains_in_tdrl_losses() -> None:
    net = nn.Sequential(mlp(OBS, 2 * ACT), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    critic = ValueOperator(mlp(OBS, 1), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic, entropy_coeff=0.01)
    out = loss(rollout())
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    total.backward()
    assert all(torch.isfinite(out[key]) for key in out.keys())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    # TorchRL's TanhNormal has no registered KL: TRPO falls back to the sample estimate.
    stats = TRPOLoss(actor, critic).actor_step(rollout())
    assert float(stats["kl"]) <= 0.01


def test_tdrl_modules_train_in_torchrl_clip_ppo_loss() -> None:
    actor, critic = GaussianActor(mlp(OBS, ACT), ACT), ValueCritic(mlp(OBS, 1))
    td = rollout()
    settings = {"clip_epsilon": 0.2, "critic_coeff": 0.5, "normalize_advantage": False}
    theirs_loss = TorchRLClipPPOLoss(
        actor, critic, entropy_bonus=False, loss_critic_type="l2", **settings
    )
    ours = ClipPPOLoss(actor, critic, **settings)(td)
    theirs = theirs_loss(td.clone())
    torch.testing.assert_close(theirs["loss_objective"], ours["loss_objective"])
    torch.testing.assert_close(theirs["loss_critic"], ours["loss_critic"])
    optimizer = torch.optim.Adam(theirs_loss.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in (*actor.parameters(), *critic.parameters())]
    (theirs["loss_objective"] + theirs["loss_critic"]).backward()
    optimizer.step()
    after = [*actor.parameters(), *critic.parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_torchrl_gae_then_tdrl_ppo_on_a_rollout() -> None:
    actor, critic = GaussianActor(mlp(OBS, ACT), ACT), ValueCritic(mlp(OBS, 1))
    n_envs, steps = 3, 10
    td = TensorDict(observation=torch.randn(n_envs, steps, OBS), batch_size=[n_envs, steps])
    td["next"] = TensorDict(
        observation=torch.randn(n_envs, steps, OBS),
        reward=torch.randn(n_envs, steps, 1),
        done=torch.zeros(n_envs, steps, 1, dtype=torch.bool),
        terminated=torch.zeros(n_envs, steps, 1, dtype=torch.bool),
        batch_size=[n_envs, steps],
    )
    with torch.no_grad():
        actor(td)
        GAE(gamma=0.99, lmbda=0.95, value_network=critic)(td)
    out = ClipPPOLoss(actor, critic)(td)
    torch.testing.assert_close(out["kl_approx"], torch.tensor(0.0))  # same policy: ratio 1
    assert torch.isfinite(out["loss_objective"] + out["loss_critic"])


def test_tdrl_actors_train_in_torchrl_klpen_ppo_loss() -> None:
    from torchrl.objectives import KLPENPPOLoss

    from tdrl.modules import CategoricalActor

    # The behaviour policy is the one whose parameters were stored at collection; the actor
    # has moved since, so the penalty is the KL between the stored and the current policy.
    torch.manual_seed(0)
    gaussian = GaussianActor(mlp(OBS, ACT), ACT, init_log_std=-0.5)
    categorical = CategoricalActor(mlp(OBS, 3))
    for actor in (gaussian, categorical):
        td = TensorDict(observation=torch.randn(16, OBS), batch_size=[16])
        with torch.no_grad():
            actor(td)
            old = actor.get_dist(td)
            for p in actor.parameters():
                p.add_(0.1 * torch.randn_like(p))
        td["advantage"], td["value_target"] = torch.randn(16, 1), torch.randn(16, 1)
        loss = KLPENPPOLoss(actor, ValueCritic(mlp(OBS, 1)), entropy_bonus=False, beta=0.5)
        out = loss(td.clone())
        new = actor.get_dist(td)
        if (
            actor is gaussian
        ):  # explicit: sum over actions of log(s1/s0) + (s0^2 + dm^2)/2s1^2 - 1/2
            m0, s0, m1, s1 = old.mean, old.stddev, new.mean, new.stddev
            kl = (s1.log() - s0.log() + (s0**2 + (m0 - m1) ** 2) / (2 * s1**2) - 0.5).sum(-1)
        else:  # explicit: sum over actions of p0 (log p0 - log p1)
            p0 = old.probs
            kl = (p0 * (p0.log() - new.probs.log())).sum(-1)
        torch.testing.assert_close(out["kl"].squeeze(-1), kl.detach())
        ratio = (new.log_prob(td["action"]) - td["action_log_prob"]).exp()
        objective = -(ratio * td["advantage"].squeeze(-1) - 0.5 * kl).mean()
        torch.testing.assert_close(out["loss_objective"], objective)
        out["loss_objective"].backward()
        assert all(p.grad is not None for p in actor.net.parameters())
