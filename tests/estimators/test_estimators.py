"""tdrl.estimators: keys, values, errors, agreement with the ops and with TorchRL 0.14."""

from __future__ import annotations

import re

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl import estimators as E
from tdrl.ops import gae, td0_return, td_lambda_return, vtrace
from tests.ops.estimator_reference import gae_ref

FLAGS = ["..x..t....x.t..", "t..t.x.xx...t..", "...............", "..x....t..t...t"]


def make_td(flags=FLAGS, obs_dim=3, seed=0) -> TensorDict:
    """A rollout in TorchRL's layout: [B, T] with ("next", ...) entries and [*, 1] flags."""
    g = torch.Generator().manual_seed(seed)
    b, t = len(flags), len(flags[0])
    terminated = torch.tensor([[c == "x" for c in f] for f in flags]).unsqueeze(-1)
    truncated = torch.tensor([[c == "t" for c in f] for f in flags]).unsqueeze(-1)
    obs = torch.randn(b, t, obs_dim, generator=g)
    final = torch.randn(b, t, obs_dim, generator=g)  # the real final observations
    done = terminated | truncated
    next_obs = torch.where(done, final, torch.cat([obs[:, 1:], final[:, -1:]], 1))
    return TensorDict(
        {
            "observation": obs,
            "action": torch.zeros(b, t, dtype=torch.long),
            "action_log_prob": -0.5 * torch.rand(b, t, generator=g),
            "next": {
                "observation": next_obs,
                "reward": torch.randn(b, t, 1, generator=g),
                "terminated": terminated,
                "truncated": truncated,
                "done": done,
            },
        },
        batch_size=[b, t],
    )


def value_net(obs_dim=3, seed=0) -> TensorDictModule:
    torch.manual_seed(seed)
    linear = nn.Linear(obs_dim, 1)
    return TensorDictModule(linear, in_keys=["observation"], out_keys=["state_value"])


def one_action_actor(obs_dim=3):
    """An actor with one discrete action: log pi(a|s) = 0 whatever TorchRL samples."""
    from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential

    logits = TensorDictModule(nn.Linear(obs_dim, 1), in_keys=["observation"], out_keys=["logits"])
    head = ProbabilisticTensorDictModule(
        in_keys=["logits"], out_keys=["action"], distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )  # fmt: skip
    return ProbabilisticTensorDictSequential(logits, head)


def build(kind, truncation="bootstrap", net=None, **kw):
    args = dict(gamma=0.95, value_network=net, truncation=truncation, **kw)
    if kind == "gae":
        return E.GAE(lmbda=0.9, **args)
    if kind == "td0":
        return E.TD0Estimator(**args)
    if kind == "td1":
        return E.TD1Estimator(**args)
    if kind == "tdl":
        return E.TDLambdaEstimator(lmbda=0.9, **args)
    return E.VTrace(**args)


KINDS = ["gae", "td0", "td1", "tdl", "vtrace"]


@pytest.mark.parametrize("truncation", ["bootstrap", "mask", "terminate"])
@pytest.mark.parametrize("kind", KINDS)
def test_module_equals_op(kind, truncation, device):
    td = make_td().to(device)
    net = value_net().to(device)
    with torch.no_grad():
        v = net(td.select("observation"))["state_value"]
        nv = net(td["next"].select("observation"))["state_value"]
    td["target_log_prob"] = -0.3 * torch.ones(td.shape)
    out = build(kind, truncation, net)(td.clone())
    r, term, trunc = td["next", "reward"], td["next", "terminated"], td["next", "truncated"]
    kw = dict(truncated=trunc, truncation=truncation)
    if kind == "gae":
        want = gae(r, v, nv, term, gamma=0.95, lmbda=0.9, **kw).value_target
    elif kind == "vtrace":
        log_rho = (td["target_log_prob"] - td["action_log_prob"]).unsqueeze(-1)
        want = vtrace(r, v, nv, log_rho, term, gamma=0.95, **kw).value_target
    elif kind == "td0":
        want = td0_return(r, nv, term, value=v, gamma=0.95, **kw)
    else:
        lmbda = 1.0 if kind == "td1" else 0.9
        want = td_lambda_return(r, nv, term, value=v, gamma=0.95, lmbda=lmbda, **kw)
    torch.testing.assert_close(out["value_target"], want)
    if kind != "vtrace":
        torch.testing.assert_close(out["advantage"], want - v)
    # values written as TorchRL does; nothing else added
    torch.testing.assert_close(out["state_value"], v)
    added = set(out.keys(True, True)) - set(td.keys(True, True))
    assert added == {"advantage", "value_target", "state_value", ("next", "state_value")}


def test_gae_module_against_definition_with_values_in_batch():
    td = make_td()
    g = torch.Generator().manual_seed(1)
    td["state_value"] = torch.randn(*td.shape, 1, generator=g)
    td["next", "state_value"] = torch.randn(*td.shape, 1, generator=g)
    out = E.GAE(gamma=0.9, lmbda=0.8, value_network=None)(td.clone())
    for i in range(td.shape[0]):
        x = [td[k][i, :, 0].double().numpy() for k in
             (("next", "reward"), "state_value", ("next", "state_value"),
              ("next", "terminated"), ("next", "truncated"))]  # fmt: skip
        adv, _ = gae_ref(*x, gamma=torch.full((td.shape[1],), 0.9).numpy(), lmbda=0.8,
                         truncation="bootstrap")  # fmt: skip
        torch.testing.assert_close(out["advantage"][i, :, 0].double(), torch.tensor(adv))


# --- TorchRL interop ----------------------------------------------------------------------------
def torchrl_estimator(kind, net, actor=None, vectorized=True):
    from torchrl.objectives import value as V

    if kind == "gae":
        return V.GAE(gamma=0.95, lmbda=0.9, value_network=net, vectorized=vectorized)
    if kind == "td0":
        return V.TD0Estimator(gamma=0.95, value_network=net)
    if kind == "td1":
        return V.TD1Estimator(gamma=0.95, value_network=net)
    if kind == "tdl":
        return V.TDLambdaEstimator(gamma=0.95, lmbda=0.9, value_network=net, vectorized=vectorized)
    est = V.VTrace(gamma=0.95, value_network=net, actor_network=actor)
    est.set_keys(sample_log_prob="action_log_prob")
    return est


@pytest.mark.parametrize("vectorized", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_agrees_with_torchrl(kind, vectorized):
    """Same batch (terminated and truncated steps, restarts inside rows), bootstrap policy."""
    td = make_td()
    net = value_net()
    actor = one_action_actor() if kind == "vtrace" else None
    theirs = torchrl_estimator(kind, net, actor, vectorized)(td.clone())
    ours = build(kind, net=net, actor_network=actor) if kind == "vtrace" else build(kind, net=net)
    ours = ours(td.clone())
    for key in ("advantage", "value_target"):
        torch.testing.assert_close(ours[key], theirs[key], rtol=1e-5, atol=1e-5)


def test_torchrl_terminate_semantics_without_truncated_info():
    """TorchRL treats every done as terminal when "terminated" is absent; so does "terminate"."""
    from torchrl.objectives.value import GAE as TorchRLGAE

    td = make_td()
    td_no_term = td.clone()
    td_no_term["next"].del_("terminated")
    net = value_net()
    theirs = TorchRLGAE(gamma=0.95, lmbda=0.9, value_network=net)(td_no_term)
    ours = E.GAE(gamma=0.95, lmbda=0.9, value_network=net, truncation="terminate")(td.clone())
    torch.testing.assert_close(ours["advantage"], theirs["advantage"], rtol=1e-5, atol=1e-5)


def _mujoco_ppo_setup():
    from tensordict.nn import NormalParamExtractor
    from torchrl.envs import DoubleToFloat, GymEnv, StepCounter, TransformedEnv
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator

    env = TransformedEnv(GymEnv("InvertedPendulum-v5"), DoubleToFloat())
    env.append_transform(StepCounter(max_steps=10))  # truncation every 10 steps
    env.set_seed(0)
    torch.manual_seed(0)
    obs_dim = env.observation_spec["observation"].shape[-1]
    body = nn.Sequential(
        nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, 2), NormalParamExtractor()
    )
    actor = ProbabilisticActor(
        TensorDictModule(body, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=True,
        spec=env.action_spec,
    )  # fmt: skip
    critic = ValueOperator(nn.Linear(obs_dim, 1), in_keys=["observation"])
    with torch.no_grad():
        batch = env.rollout(48, actor, break_when_any_done=False)
    env.close()
    return actor, critic, batch.unsqueeze(0)


def test_tdrl_gae_in_torchrl_ppo_training_step():
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE as TorchRLGAE

    actor, critic, batch = _mujoco_ppo_setup()
    assert batch["next", "terminated"].any() and batch["next", "truncated"].any()
    loss = ClipPPOLoss(actor, critic)
    loss.value_estimator = E.GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    params = [p.clone() for p in loss.parameters()]
    opt = torch.optim.Adam(loss.parameters(), lr=1e-3)
    out = loss(batch.clone())
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    total.backward()
    opt.step()
    assert torch.isfinite(total)
    assert any(not torch.equal(a, b) for a, b in zip(params, loss.parameters(), strict=True))
    # tdrl's and TorchRL's advantages on this real batch agree
    ours = E.GAE(gamma=0.99, lmbda=0.95, value_network=critic)(batch.clone())
    theirs = TorchRLGAE(gamma=0.99, lmbda=0.95, value_network=critic)(batch.clone())
    torch.testing.assert_close(ours["advantage"], theirs["advantage"], rtol=1e-5, atol=1e-5)


# --- keys, gradients, errors --------------------------------------------------------------------
def test_set_keys_and_constructor_checks():
    td = make_td()
    td.rename_key_(("next", "reward"), ("next", "rew"))
    est = E.GAE(gamma=0.9, lmbda=0.9, value_network=value_net())
    est.set_keys(reward="rew", advantage="adv", value_target=("out", "vt"))
    out = est(td)
    assert "adv" in out.keys() and ("out", "vt") in out.keys(True)
    with pytest.raises(ValueError, match="'rewards' is not a key name"):  # as every set_keys
        est.set_keys(rewards="r")
    with pytest.raises(RuntimeError, match="use set_keys"):
        E.GAE(gamma=0.9, lmbda=0.9, value_network=None, advantage_key="a")
    with pytest.raises(NotImplementedError, match="auto_reset_env"):
        E.GAE(gamma=0.9, lmbda=0.9, value_network=None, auto_reset_env=True)
    with pytest.raises(TypeError, match="unexpected argument 'lambda_'"):
        E.GAE(gamma=0.9, lmbda=0.9, value_network=None, lambda_=0.9)
    for rho, c in ((0.0, 1.0), (1.0, -1.0), (float("nan"), 1.0)):
        with pytest.raises(ValueError, match=f"rho_thresh={rho}, c_thresh={c}"):
            E.VTrace(gamma=0.9, value_network=None, rho_thresh=rho, c_thresh=c)
    # TorchRL arguments that only tune its value-network calls are accepted
    E.GAE(gamma=0.9, lmbda=0.9, value_network=None, vectorized=False, shifted=True,
          deactivate_vmap=True, device="cpu")  # fmt: skip


def test_gradients_only_when_differentiable():
    td = make_td()
    net = value_net()
    out = E.GAE(gamma=0.9, lmbda=0.9, value_network=net)(td.clone())
    assert not out["advantage"].requires_grad
    out = E.GAE(gamma=0.9, lmbda=0.9, value_network=net, differentiable=True)(td.clone())
    out["advantage"].sum().backward()
    assert net.module.weight.grad is not None and net.module.weight.grad.abs().sum() > 0
    assert not out["next", "state_value"].requires_grad  # bootstrap values are detached


def test_bad_batches_name_the_key():
    est = E.GAE(gamma=0.9, lmbda=0.9, value_network=value_net())
    td = make_td()
    td["next"].del_("terminated")
    with pytest.raises(KeyError, match=r"missing key \('next', 'terminated'\)"):
        est(td)
    td = make_td()
    td["next", "done"] = td["next", "done"].to(torch.uint8)
    with pytest.raises(ValueError, match=r"key \('next', 'done'\): episode-end flags must be"):
        est(td)
    td = make_td()
    td["next", "done"][0, 0] = True  # done without terminated or truncated
    with pytest.raises(ValueError, match=r"key \('next', 'done'\): must be terminated"):
        est(td)
    td = make_td()
    td["next", "reward"][1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"key \('next', 'reward'\): contains NaN"):
        est(td)
    td = make_td()
    td["state_value"] = torch.zeros(*td.shape)  # no trailing dim
    td["next", "state_value"] = torch.zeros(*td.shape, 1)
    with pytest.raises(ValueError, match=r"key 'state_value': shape \(4, 15\)"):
        E.GAE(gamma=0.9, lmbda=0.9, value_network=None)(td)
    with pytest.raises(KeyError, match="missing key 'target_log_prob'"):
        E.VTrace(gamma=0.9, value_network=value_net())(make_td())


def test_a_bad_steps_to_next_obs_shape_or_a_flag_on_another_device_names_the_key():
    est = E.GAE(gamma=0.9, lmbda=0.9, value_network=value_net())
    td = make_td()
    td["steps_to_next_obs"] = torch.ones(*td.shape, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"key 'steps_to_next_obs': shape \(4, 15, 2\) does not"):
        est(td)
    # the meta device stands in for a GPU: a device mismatch is named before any kernel runs
    for key in (("next", "terminated"), ("next", "truncated")):
        td = make_td()
        td[key] = td[key].to("meta")
        with pytest.raises(ValueError, match=rf"key {re.escape(repr(key))}: device meta differs"):
            est(td)


def one_episode(T: int, dtype: torch.dtype = torch.float32, done: bool = True) -> TensorDict:
    """A [1, T] batch of reward 1 and value 0, terminated at its last step (with a done flag)."""
    end = torch.arange(T).eq(T - 1).view(1, T, 1)
    nxt = {
        "reward": torch.ones(1, T, 1, dtype=dtype),
        "state_value": torch.zeros(1, T, 1, dtype=dtype),
        "terminated": end,
    }
    if done:
        nxt["done"] = end.clone()
    return TensorDict(
        {"state_value": torch.zeros(1, T, 1, dtype=dtype), "next": nxt}, batch_size=[1, T]
    )


def test_float64_rollouts_get_gamma_at_float64_precision():
    # A 400-step episode of reward 1 and value 0 (it ends at the batch cut, terminated): the
    # discounted sum, written out, in float64. A float32 gamma would be off by ~1e-4.
    T, gamma = 400, 0.99
    td = one_episode(T, torch.float64)
    want = torch.tensor(
        [sum(gamma**k for k in range(T - t)) for t in range(T)], dtype=torch.float64
    )
    for est in (E.TD1Estimator(gamma=gamma), E.GAE(gamma=gamma, lmbda=1.0)):
        got = est(td.clone())["value_target"].view(T)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_gamma_is_taken_at_the_working_dtype():
    # float32 batches discount with gamma rounded to float32 (as TorchRL's estimators); a
    # bfloat16 batch computes in float32, so 0.999 does not round to 1.0 (bfloat16's nearest).
    T, gamma = 300, 0.999
    for dtype, g in ((torch.float32, float(torch.tensor(gamma))), (torch.bfloat16, None)):
        got = E.TD1Estimator(gamma=gamma)(one_episode(T, dtype, done=False))
        got = got["value_target"].view(T)
        if g is not None:  # the float64 sum of g^k, rounded once
            want = torch.tensor([sum(g**k for k in range(T - t)) for t in range(T)])
            torch.testing.assert_close(got, want, rtol=2e-7, atol=0)
        else:  # 0.999: 259.6 at t=0; a gamma of 1.0 would give 300
            assert got.dtype == torch.bfloat16
            assert abs(float(got[0]) - sum(gamma**k for k in range(T))) < 2.0


def test_a_gamma_that_needs_a_gradient_gets_one():
    # G_0 = 1 + gamma + gamma^2 over three steps of reward 1 (terminated at the last):
    # dG_0/dgamma = 1 + 2 gamma, through the differentiable estimator
    gamma = torch.tensor(0.99, dtype=torch.float64, requires_grad=True)
    td = one_episode(3, torch.float64, done=False)
    target = E.TD1Estimator(gamma=gamma, differentiable=True)(td)["value_target"]
    target[0, 0, 0].backward()
    assert gamma.grad is not None
    torch.testing.assert_close(gamma.grad, torch.tensor(1 + 2 * 0.99, dtype=torch.float64))


def test_a_gamma_changed_between_calls_is_the_one_used():
    # Every way of changing the scalar gamma between calls is seen: in place, through .data
    # or numpy (no version bump: a value kept by version would go stale), load_state_dict, a
    # parameter in the buffer's place, a new buffer, and a batch of another dtype.
    # Three steps of reward 1, terminated at the last: G_0 = 1 + g + g^2.
    def first_target(est, dtype=torch.float64):
        return float(est(one_episode(3, dtype, done=False))["value_target"][0, 0, 0])

    est = E.TD1Estimator(gamma=0.5)
    assert first_target(est) == 1 + 0.5 + 0.25
    est.gamma.fill_(0.9)
    assert first_target(est) == pytest.approx(1 + 0.9 + 0.81, abs=1e-12)
    est.gamma.data.fill_(0.6)
    assert first_target(est) == pytest.approx(1 + 0.6 + 0.36, abs=1e-12)
    est.gamma.numpy()[...] = 0.4
    assert first_target(est) == pytest.approx(1 + 0.4 + 0.16, abs=1e-12)
    est.load_state_dict({"gamma": torch.tensor(0.8, dtype=torch.float64)})
    assert first_target(est) == pytest.approx(1 + 0.8 + 0.64, abs=1e-12)
    est.gamma = nn.Parameter(torch.tensor(0.3, dtype=torch.float64), requires_grad=False)
    assert first_target(est) == pytest.approx(1 + 0.3 + 0.09, abs=1e-12)  # a parameter now
    del est.gamma
    est.register_buffer("gamma", torch.tensor(0.7, dtype=torch.float64))
    assert first_target(est) == pytest.approx(1 + 0.7 + 0.49, abs=1e-12)
    g32 = float(torch.tensor(0.7, dtype=torch.float32))  # a float32 batch: gamma rounded
    assert first_target(est, torch.float32) == pytest.approx(1 + g32 + g32 * g32, rel=1e-6)
    assert first_target(est) == pytest.approx(1 + 0.7 + 0.49, abs=1e-12)  # float64 again


def test_skip_existing_reads_stored_values_and_calls_the_network_only_without_them():
    # TorchRL's skip_existing: values already in the batch are used as they are (the network
    # is not called); a batch without them (or with only one of the two) gets the network's.
    calls = []

    class Counted(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 1)

        def forward(self, x):
            calls.append(x.shape)
            return self.linear(x)

    net = TensorDictModule(Counted(), in_keys=["observation"], out_keys=["state_value"])
    est = E.GAE(gamma=0.9, lmbda=0.8, value_network=net, skip_existing=True)
    td = make_td()
    stored = torch.randn(td.shape[0], td.shape[1], 1)
    td["state_value"], td["next", "state_value"] = stored, stored + 1
    want = gae(
        td["next", "reward"],
        stored,
        stored + 1,
        td["next", "terminated"],
        td["next", "done"],
        truncated=td["next", "truncated"],
        gamma=0.9,
        lmbda=0.8,
    )
    out = est(td)
    assert calls == []
    torch.testing.assert_close(out["advantage"], want.advantage)
    del td["next", "state_value"]  # only one of the two: the network computes both
    est(td)
    assert len(calls) == 1
    with torch.no_grad():
        torch.testing.assert_close(td["state_value"], net(td.select("observation"))["state_value"])
