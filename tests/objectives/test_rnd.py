"""RND against its definition (Burda et al. 2018), with explicit loops: the distillation error
on normalized, clipped next observations; the intrinsic return carried per env across episode
ends and the reward divided by its running std; the episodic first-visit rule; the intrinsic
advantage that runs across an episode end while the extrinsic one stops there; a target network
that never changes; the intrinsic critic's loss; and the inputs refused."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl import keys as K
from tdrl.estimators import GAE
from tdrl.modules import ValueCritic
from tdrl.objectives import IntrinsicValueLoss, MixedAdvantage, RNDLoss, total_loss

N, T, OBS, FEAT = 2, 5, 3, 4


def make_rnd(**kwargs) -> RNDLoss:
    torch.manual_seed(0)
    return RNDLoss(nn.Linear(OBS, FEAT), nn.Linear(OBS, FEAT), (OBS,), **kwargs)


def rollout(seed=1, done_at=((0, 2),)) -> TensorDict:
    gen = torch.Generator().manual_seed(seed)
    done = torch.zeros(N, T, 1, dtype=torch.bool)
    for i, t in done_at:
        done[i, t] = True
    return TensorDict(
        {
            "observation": torch.randn(N, T, OBS, generator=gen),
            "next": {
                "observation": torch.randn(N, T, OBS, generator=gen) * 3,
                "reward": torch.randn(N, T, 1, generator=gen),
                "terminated": done.clone(),
                "truncated": torch.zeros(N, T, 1, dtype=torch.bool),
                "done": done.clone(),
            },
        },
        batch_size=[N, T],
    )


def errors(rnd: RNDLoss, obs: torch.Tensor, mean, var, clip=5.0) -> list[list[float]]:
    """e(s') per [i][t]: mean over features of (f^(x) - f(x))^2, x normalized and clipped."""
    wt, bt = rnd.target.weight.detach(), rnd.target.bias.detach()
    wp, bp = rnd.predictor.weight.detach(), rnd.predictor.bias.detach()
    out = []
    for i in range(N):
        row = []
        for t in range(T):
            x = [
                min(max((float(obs[i, t, j]) - mean[j]) / math.sqrt(var[j] + 1e-8), -clip), clip)
                for j in range(OBS)
            ]
            ft = [
                sum(float(wt[k, j]) * x[j] for j in range(OBS)) + float(bt[k]) for k in range(FEAT)
            ]
            fp = [
                sum(float(wp[k, j]) * x[j] for j in range(OBS)) + float(bp[k]) for k in range(FEAT)
            ]
            row.append(sum((a - b) ** 2 for a, b in zip(fp, ft, strict=True)) / FEAT)
        out.append(row)
    return out


def test_the_intrinsic_reward_is_the_error_over_the_std_of_returns_that_run_across_episodes():
    rnd, batch = make_rnd(gamma=0.9), rollout()
    obs = batch["next", "observation"]
    flat = obs.reshape(-1, OBS).double()
    # the first rollout is scored with its own statistics (population variance)
    e = errors(rnd, obs, flat.mean(0).tolist(), flat.var(0, unbiased=False).tolist())
    returns = []
    for i in range(N):
        r = 0.0
        for t in range(T):  # no reset at (0, 2), where the episode ended
            r = 0.9 * r + e[i][t]
            returns.append(r)
    mean = sum(returns) / len(returns)
    var = sum((x - mean) ** 2 for x in returns) / len(returns)  # count epsilon: negligible
    rnd.intrinsic_reward(batch)
    got = batch["next", "intrinsic_reward"]
    assert got.shape == (N, T, 1)
    for i in range(N):
        for t in range(T):
            assert float(got[i, t]) == pytest.approx(e[i][t] / math.sqrt(var + 1e-8), rel=1e-4)
    for key in ("intrinsic_done", "intrinsic_terminated", "intrinsic_truncated"):
        assert not batch["next", key].any()
    # after scoring, the observation statistics hold this rollout's next observations once
    torch.testing.assert_close(rnd.obs_norm.mean, flat.mean(0), rtol=1e-6, atol=1e-6)
    # the next rollout is scored with them, and the per-env returns carry on from this one
    carry = rnd.reward_scaling.discounted_return.clone()
    assert carry.shape == (N,) and carry[0] == pytest.approx(returns[T - 1], rel=1e-5)
    second = rollout()
    second["next", "observation"] = second["next", "observation"] * 2 + 1
    obs2 = second["next", "observation"]
    e2 = errors(rnd, obs2, flat.mean(0).tolist(), flat.var(0, unbiased=False).tolist())
    rnd.intrinsic_reward(second)
    std = rnd.reward_scaling.std
    for i in range(N):
        for t in range(T):
            got2 = float(second["next", "intrinsic_reward"][i, t])
            assert got2 == pytest.approx(e2[i][t] / std, rel=1e-4)
    both = torch.cat([flat, obs2.reshape(-1, OBS).double()])
    torch.testing.assert_close(rnd.obs_norm.mean, both.mean(0), rtol=1e-6, atol=1e-6)


def test_first_visit_keeps_the_error_only_where_the_episode_meets_an_observation_first():
    rnd = make_rnd(first_visit=True)
    a, b, c = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, 0.5, 2.0]), torch.zeros(3)
    # env 0: a b a | (episode ends at t = 2) a b; env 1: c c c c c, no episode end
    batch = rollout(done_at=((0, 2),))
    batch["next", "observation"] = torch.stack(
        [torch.stack([a, b, a, a, b]), torch.stack([c, c, c, c, c])]
    )
    first = [[True, True, False, True, True], [True, False, False, False, False]]
    obs = batch["next", "observation"].clone()
    plain = make_rnd()  # the same networks and first-rollout statistics, no episodic rule
    plain.intrinsic_reward(batch.clone())
    rnd.intrinsic_reward(batch)
    assert rnd.obs_norm.mean.equal(plain.obs_norm.mean)
    e = plain.error(obs).detach()  # e(s') on the same statistics, before any rule
    got = batch["next", "intrinsic_reward"]
    kept = [[float(e[i, t]) if first[i][t] else 0.0 for t in range(T)] for i in range(N)]
    # R_t = gamma R_{t-1} + kept_t per env (gamma 0.99), r_int = kept / std(R)
    flat_returns = []
    for i in range(N):
        r = 0.0
        for t in range(T):
            r = 0.99 * r + kept[i][t]
            flat_returns.append(r)
    mean = sum(flat_returns) / len(flat_returns)
    std = math.sqrt(sum((x - mean) ** 2 for x in flat_returns) / len(flat_returns) + 1e-8)
    for i in range(N):
        for t in range(T):
            assert float(got[i, t]) == pytest.approx(kept[i][t] / std, rel=1e-4, abs=1e-7)
    # a batch cut keeps env 1's episode (c was seen) and env 0's new one (a, b were seen)
    nxt = rollout(done_at=())
    nxt["next", "observation"] = torch.stack(
        [torch.stack([a, c, b, c, a]), torch.stack([c, a, c, b, b])]
    )
    rnd.intrinsic_reward(nxt)
    zero = nxt["next", "intrinsic_reward"].squeeze(-1) == 0
    assert zero.tolist() == [[True, False, True, True, True], [True, False, True, False, True]]
    # the visited sets travel in the state dict
    again = make_rnd(first_visit=True)
    again.load_state_dict(rnd.state_dict())
    assert again._visited == rnd._visited and len(again._visited) == N


def test_the_intrinsic_advantage_runs_across_an_episode_end_and_the_extrinsic_stops():
    rnd, batch = make_rnd(), rollout()
    rnd.intrinsic_reward(batch)
    gamma, lam = 0.99, 0.95
    values = torch.randn(N, T + 1, 1, generator=torch.Generator().manual_seed(3))
    batch["state_value"] = values[:, :T]
    batch["next", "state_value"] = values[:, 1:]
    batch[K.INTRINSIC_VALUE] = values[:, :T] * 2
    batch["next", K.INTRINSIC_VALUE] = values[:, 1:] * 2
    extrinsic = GAE(gamma=gamma, lmbda=lam)
    intrinsic = GAE(gamma=gamma, lmbda=lam).set_keys(
        reward=K.INTRINSIC_REWARD, value=K.INTRINSIC_VALUE, done=K.INTRINSIC_DONE,
        terminated=K.INTRINSIC_TERMINATED, truncated=K.INTRINSIC_TRUNCATED,
        advantage=K.INTRINSIC_ADVANTAGE, value_target=K.INTRINSIC_VALUE_TARGET,
    )  # fmt: skip
    mixed = MixedAdvantage(extrinsic, intrinsic, extrinsic=2.0, intrinsic=0.5)(batch.clone())
    extrinsic(batch)
    intrinsic(batch)
    ext_r, int_r = batch["next", "reward"], batch["next", "intrinsic_reward"]
    i = 0  # env 0 ends an episode (terminated) at t = 2
    for t in range(T):
        ext = sum(
            (gamma * lam) ** (k - t)
            * (float(ext_r[i, k]) + (0.0 if k == 2 else gamma * float(values[i, k + 1]))
               - float(values[i, k]))
            for k in range(t, 3 if t <= 2 else T)
        )  # fmt: skip
        intr = sum(
            (gamma * lam) ** (k - t)
            * (float(int_r[i, k]) + gamma * 2 * float(values[i, k + 1]) - 2 * float(values[i, k]))
            for k in range(t, T)
        )  # every step to the batch end
        assert float(batch["advantage"][i, t]) == pytest.approx(ext, rel=1e-4, abs=1e-5)
        assert float(batch[K.INTRINSIC_ADVANTAGE][i, t]) == pytest.approx(intr, rel=1e-4, abs=1e-5)
        # the policy's advantage with the bonus's mixed in (CleanRL's RND: 2 and 1)
        got = float(mixed["advantage"][i, t])
        assert got == pytest.approx(2.0 * ext + 0.5 * intr, rel=1e-4, abs=1e-5)
    with pytest.raises(KeyError, match="intrinsic_reward.*the bonus writes it first"):
        MixedAdvantage(extrinsic, intrinsic, 1.0, 1.0)(rollout())  # not scored yet
    # an estimator's renamed advantage is the one mixed, and two estimators on one key refused
    renamed = GAE(gamma=gamma, lmbda=lam).set_keys(advantage="adv")
    again = MixedAdvantage(renamed, intrinsic, extrinsic=2.0, intrinsic=0.5)(batch.clone())
    torch.testing.assert_close(again["adv"], mixed["advantage"])
    with pytest.raises(ValueError, match="both estimators write the advantage to 'advantage'"):
        MixedAdvantage(extrinsic, GAE(gamma=gamma, lmbda=lam), 1.0, 1.0)
    with pytest.raises(TypeError, match="Linear has no tensor_keys"):
        MixedAdvantage(nn.Linear(1, 1), intrinsic, 1.0, 1.0)  # type: ignore[arg-type]


def test_with_bonus_adds_the_bonus_and_its_critic_to_the_loss_and_shares_parameters_once():
    from torchrl.data import Bounded, Composite, Unbounded

    from tdrl.modules import actor_critic
    from tdrl.objectives import A2CLoss, WithBonus

    torch.manual_seed(0)
    obs_spec = Composite(observation=Unbounded((OBS,)))
    actor, critic, _ = actor_critic(obs_spec, Bounded(-1.0, 1.0, (2,)), hidden_sizes=(8,))
    loss, rnd = A2CLoss(actor, critic), make_rnd()
    own = ValueCritic(critic.net, out_key=K.INTRINSIC_VALUE)  # the critic's body, shared
    objective = WithBonus(loss, rnd, IntrinsicValueLoss(own, coeff=0.5))
    batch = rollout()
    batch["action"] = torch.rand(N, T, 2) * 2 - 1
    batch["action_log_prob"] = torch.zeros(N, T)
    batch["advantage"] = torch.randn(N, T, 1)
    batch["value_target"] = torch.randn(N, T, 1)
    batch[K.INTRINSIC_VALUE_TARGET] = torch.randn(N, T, 1)
    flat = batch.reshape(-1)
    out = objective(flat)
    want = {**loss(flat).to_dict(), **rnd(flat).to_dict(), **objective.critic_loss(flat).to_dict()}
    assert set(out.keys()) == set(want) and "loss_intrinsic_value" in want
    for key in ("loss_objective", "loss_critic", "loss_intrinsic_value"):
        assert float(out[key].detach()) == pytest.approx(float(want[key].detach()), rel=1e-6)
    assert set(objective.in_keys) >= {*loss.in_keys, *rnd.in_keys, K.INTRINSIC_VALUE_TARGET}
    params = list(objective.parameters())
    assert len(params) == len({id(p) for p in params})  # the shared critic body once
    assert {id(p) for p in params} == {
        id(p) for m in (loss, rnd, objective.critic_loss) for p in m.parameters()
    }


def test_training_moves_the_predictor_and_never_the_target():
    rnd, batch = make_rnd(update_proportion=1.0), rollout()
    target = {k: v.clone() for k, v in rnd.target.state_dict().items()}
    predictor = rnd.predictor.weight.detach().clone()
    rnd.intrinsic_reward(batch)
    optimizer = torch.optim.Adam(rnd.parameters(), lr=1e-2)
    before = float(rnd(batch.reshape(-1))["loss_rnd"].detach())
    for _ in range(50):
        optimizer.zero_grad()
        total_loss(rnd(batch.reshape(-1))).backward()
        optimizer.step()
    assert float(rnd(batch.reshape(-1))["loss_rnd"].detach()) < before / 2
    assert not torch.equal(rnd.predictor.weight, predictor)
    for key, value in rnd.target.state_dict().items():
        assert torch.equal(value, target[key]), key
    assert not any(p.requires_grad for p in rnd.target.parameters())


def test_the_loss_learns_from_the_update_proportion_of_the_minibatch():
    rnd, batch = make_rnd(update_proportion=0.5), rollout()
    flat = batch.reshape(-1)
    e = rnd.error(flat["next", "observation"]).reshape(-1).detach()
    torch.manual_seed(11)
    got = float(rnd(flat)["loss_rnd"].detach())
    torch.manual_seed(11)
    keep = torch.rand(e.shape) < 0.5
    assert got == pytest.approx(float(e[keep].mean()), rel=1e-5)


def test_the_intrinsic_critic_regresses_on_its_target():
    torch.manual_seed(0)
    critic = ValueCritic(nn.Linear(OBS, 1), out_key=K.INTRINSIC_VALUE)
    batch = rollout().reshape(-1)
    batch[K.INTRINSIC_VALUE_TARGET] = torch.randn(N * T, 1)
    got = float(IntrinsicValueLoss(critic, coeff=0.5)(batch)["loss_intrinsic_value"].detach())
    w, b = critic.net.weight.detach()[0], float(critic.net.bias.detach()[0])
    want = 0.0
    for n in range(N * T):
        v = sum(float(w[j]) * float(batch["observation"][n, j]) for j in range(OBS)) + b
        want += (v - float(batch[K.INTRINSIC_VALUE_TARGET][n, 0])) ** 2
    assert got == pytest.approx(0.5 * want / (N * T), rel=1e-5)


def test_bad_settings_and_inputs_are_named():
    with pytest.raises(ValueError, match=r"update_proportion must be in \(0, 1\], got 0"):
        make_rnd(update_proportion=0.0)
    with pytest.raises(ValueError, match=r"the predictor network fails on observations of shape"):
        RNDLoss(nn.Linear(OBS, FEAT), nn.Linear(OBS + 1, FEAT), (OBS,))
    with pytest.raises(ValueError, match=r"predictor outputs \(5,\) features, the target \(4,\)"):
        RNDLoss(nn.Linear(OBS, FEAT), nn.Linear(OBS, FEAT + 1), (OBS,))
    rnd = make_rnd()
    bad = rollout()
    bad["next", "observation"] = torch.zeros(N, T, OBS + 1)
    with pytest.raises(ValueError, match=r"key \('next', 'observation'\) has shape \(2, 5, 4\)"):
        rnd.intrinsic_reward(bad)
    with pytest.raises(ValueError, match="expects a \\[num_envs, T\\] rollout"):
        rnd.intrinsic_reward(rollout().reshape(-1))
    critic = ValueCritic(nn.Linear(OBS, 1), out_key=K.INTRINSIC_VALUE)
    for coeff in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="coeff must be a finite number >= 0"):
            IntrinsicValueLoss(critic, coeff=coeff)
