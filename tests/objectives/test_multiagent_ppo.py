"""PPO on multi-agent batches: the agents' mask keeps a gone agent's steps out of the loss, and
the layout interoperates with TorchRL both ways (its ClipPPOLoss on tdrl's batch, tdrl's loss
and GAE on a batch of TorchRL's collector over its VmasEnv)."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal

from tdrl.collectors import MultiAgentCollector
from tdrl.envs import PettingZooVecEnv, make_vec_env
from tdrl.estimators import GAE
from tdrl.objectives import A2CLoss, ClipPPOLoss
from tests.tiny_envs import LeavingAgents

A = "agents"
AGENT_KEYS = {
    "advantage": (A, "advantage"), "value_target": (A, "value_target"),
    "value": (A, "state_value"),
}  # fmt: skip
FLAG_KEYS = {name: (A, name) for name in ("reward", "done", "terminated", "truncated")}


def _nets(obs_dim: int, n_agents: int, actions: int | None, centralized: bool = True):
    """A categorical actor (``actions``) or a TanhNormal one (None: 2 action dims) and a critic."""
    torch.manual_seed(0)

    def mlp(outputs: int, central: bool = False) -> MultiAgentMLP:
        return MultiAgentMLP(obs_dim, outputs, n_agents, centralized=central, share_params=True,
                             num_cells=[16], activation_class=nn.Tanh)  # fmt: skip

    obs = [(A, "observation")]
    if actions is not None:
        body = TensorDictModule(mlp(actions), obs, [(A, "logits")])
        kwargs: dict = dict(distribution_class=torch.distributions.Categorical)
    else:
        body = TensorDictModule(nn.Sequential(mlp(4), NormalParamExtractor()), obs,
                                [(A, "loc"), (A, "scale")])  # fmt: skip
        kwargs = dict(distribution_class=TanhNormal, distribution_kwargs={"low": -1.0, "high": 1.0})
    actor = ProbabilisticActor(body, in_keys=body.out_keys, out_keys=[(A, "action")],
                               return_log_prob=True, **kwargs)  # fmt: skip
    critic = TensorDictModule(mlp(1, centralized), obs, [(A, "state_value")])
    return actor, critic


def _gae(critic) -> GAE:
    return GAE(gamma=0.99, lmbda=0.9, value_network=critic).set_keys(
        advantage=(A, "advantage"), value_target=(A, "value_target"), value=(A, "state_value"),
        **FLAG_KEYS,
    )  # fmt: skip


def _loss(actor, critic, mask: bool = True) -> ClipPPOLoss:
    loss = ClipPPOLoss(actor, critic, critic_coeff=1.0, normalize_advantage=True)
    extra = {"mask": (A, "mask")} if mask else {}
    return loss.set_keys(**AGENT_KEYS, action=(A, "action"),
                         sample_log_prob=(A, "action_log_prob"), **extra)  # fmt: skip


def _outputs_and_grads(loss, batch):
    loss.zero_grad()
    out = loss(batch)
    (out["loss_objective"] + out["loss_critic"]).backward()
    grads = [p.grad.clone() for p in loss.parameters() if p.grad is not None]
    return out, grads


def test_the_steps_of_a_gone_agent_carry_no_gradient_with_the_mask():
    env = PettingZooVecEnv(LeavingAgents, 2, seed=0)  # agent 0 gone after step 2, agent 1 after 4
    actor, critic = _nets(3, 3, actions=2)
    batch = MultiAgentCollector(env, actor, 2 * 5).rollout()
    _gae(critic)(batch)
    absent = ~batch[A, "mask"]
    assert absent.any()
    changed = batch.clone()  # anything at the absent steps: their values, targets and actions
    changed[A, "advantage"][absent] = 50.0
    changed[A, "value_target"][absent] = -50.0
    changed[A, "action_log_prob"][absent] = -3.0
    changed[A, "action"][absent] = 1 - changed[A, "action"][absent]
    out, grads = _outputs_and_grads(_loss(actor, critic), batch)
    out_changed, grads_changed = _outputs_and_grads(_loss(actor, critic), changed)
    for key in ("loss_objective", "loss_critic", "kl_approx", "clip_fraction", "entropy"):
        torch.testing.assert_close(out[key], out_changed[key])
    for grad, other in zip(grads, grads_changed, strict=True):
        torch.testing.assert_close(grad, other)
    # without the mask the same change moves the loss: the comparison above can fail
    plain, _ = _outputs_and_grads(_loss(actor, critic, mask=False), batch)
    plain_changed, _ = _outputs_and_grads(_loss(actor, critic, mask=False), changed)
    assert not torch.allclose(plain["loss_critic"], plain_changed["loss_critic"])


def test_a_mask_is_refused_by_a_loss_that_averages_every_sample_and_checked_for_dtype():
    actor, critic = _nets(3, 3, actions=2)
    with pytest.raises(ValueError, match=r"A2CLoss.set_keys: mask=\('agents', 'mask'\)"):
        A2CLoss(actor, critic).set_keys(mask=(A, "mask"))
    env = PettingZooVecEnv(LeavingAgents, 1, seed=0)
    batch = MultiAgentCollector(env, actor, 4).rollout()
    _gae(critic)(batch)
    batch[A, "mask"] = batch[A, "mask"].float()
    with pytest.raises(TypeError, match=r"\('agents', 'mask'\) must be a bool tensor"):
        _loss(actor, critic)(batch)


def test_torchrl_clip_ppo_loss_with_group_keys_matches_tdrl_on_a_tdrl_batch():
    from torchrl.objectives import ClipPPOLoss as TorchRLClipPPOLoss

    pytest.importorskip("vmas")
    env = make_vec_env("vmas/navigation", 4, seed=0, n_agents=3, max_steps=10)
    obs_dim = env.observation_spec[A, "observation"].shape[-1]
    actor, critic = _nets(obs_dim, 3, actions=None)
    batch = MultiAgentCollector(env, actor, 4 * 12).rollout()
    _gae(critic)(batch)
    ours = ClipPPOLoss(actor, critic, critic_coeff=1.0, normalize_advantage=False)
    ours.set_keys(**AGENT_KEYS, action=(A, "action"), sample_log_prob=(A, "action_log_prob"))
    theirs = TorchRLClipPPOLoss(actor, critic, entropy_bonus=False, critic_coeff=1.0,
                                loss_critic_type="l2", normalize_advantage=False)  # fmt: skip
    flags = {name: key for name, key in FLAG_KEYS.items() if name != "truncated"}
    theirs.set_keys(**AGENT_KEYS, action=(A, "action"), sample_log_prob=(A, "action_log_prob"),
                    **flags)  # fmt: skip
    flat = batch.reshape(-1)
    a, b = ours(flat), theirs(flat)
    torch.testing.assert_close(a["loss_objective"], b["loss_objective"])
    torch.testing.assert_close(a["loss_critic"], b["loss_critic"])


def test_tdrl_gae_and_ppo_train_on_a_batch_of_torchrl_collector_over_its_vmas_env():
    pytest.importorskip("vmas")
    from torchrl.collectors import Collector
    from torchrl.envs import VmasEnv
    from torchrl.objectives.value import GAE as TorchRLGAE

    env = VmasEnv("navigation", num_envs=4, n_agents=3, max_steps=10, seed=0)
    obs_dim = env.observation_spec[A, "observation"].shape[-1]
    actor, critic = _nets(obs_dim, 3, actions=None)
    collector = Collector(env, actor, frames_per_batch=4 * 12, total_frames=4 * 12)
    batch = next(iter(collector))
    collector.shutdown()
    # TorchRL's VMAS env keeps done at the root: expanded to the agents, as its MARL tutorial does
    shape = batch["next", A, "reward"].shape
    for flag in ("done", "terminated"):
        batch["next", A, flag] = batch["next", flag].unsqueeze(-1).expand(shape)
    ours = _gae(critic)
    theirs = TorchRLGAE(gamma=0.99, lmbda=0.9, value_network=critic)
    theirs.set_keys(advantage=(A, "advantage"), value_target=(A, "value_target"),
                    value=(A, "state_value"), reward=(A, "reward"), done=(A, "done"),
                    terminated=(A, "terminated"))  # fmt: skip
    expected = theirs(batch.clone())[A, "advantage"]
    ours(batch)
    torch.testing.assert_close(batch[A, "advantage"], expected, rtol=1e-5, atol=1e-5)
    loss = _loss(actor, critic, mask=False)
    out = loss(batch.reshape(-1))
    (out["loss_objective"] + out["loss_critic"]).backward()
    assert all(torch.isfinite(p.grad).all() for p in actor.parameters() if p.grad is not None)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())


def test_a_masked_mean_ignores_what_it_leaves_out_and_names_a_shape_that_does_not_fit():
    from tdrl.objectives.common import masked_mean

    values = torch.tensor([[1.0, float("inf")], [3.0, float("nan")]])
    mask = torch.tensor([[True, False], [True, False]])
    assert masked_mean(values, mask) == 2.0
    assert masked_mean(values.unsqueeze(-1), mask) == 2.0  # [B, agents, 1] against [B, agents]
    with pytest.raises(ValueError, match=r"a mask of shape \(2, 2\) does not fit values of shape"):
        masked_mean(torch.zeros(2, 1), mask)
