"""ICM against its definition (Pathak et al. 2017), written out for known transitions: the
inverse loss (cross-entropy of the action from two states' features, and its continuous
twin), the forward error and the intrinsic reward; the forward loss leaves the features alone;
and the inputs refused."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.objectives import ICMLoss

OBS, FEAT, A = 3, 2, 3


def linear(w, b=None) -> nn.Linear:
    w = torch.tensor(w, dtype=torch.float32)
    layer = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
    with torch.no_grad():
        layer.weight.copy_(w)
        if b is not None:
            layer.bias.copy_(torch.tensor(b, dtype=torch.float32))
    return layer


# phi(s) = W_phi s; f([phi, a]) = W_f [phi, a]; g([phi, phi']) = W_g [phi, phi'] (logits)
W_PHI = [[1.0, 0.0, -1.0], [0.5, 2.0, 0.0]]
W_F = [[1.0, 0.0, 0.5, -0.5, 0.0], [0.0, 1.0, 0.0, 1.0, -1.0]]
W_G = [[1.0, 0.0, -1.0, 0.0], [0.0, 1.0, 0.0, -1.0], [0.5, 0.5, 0.5, 0.5]]


def make(discrete=True, **kwargs) -> ICMLoss:
    w_f = W_F if discrete else [row[: FEAT + 1] for row in W_F]
    w_g = W_G if discrete else [W_G[0]]
    return ICMLoss(linear(W_PHI), linear(w_f), linear(w_g), num_actions=A if discrete else 1,
                   discrete=discrete, **kwargs)  # fmt: skip


def batch(actions) -> TensorDict:
    s = torch.tensor([[1.0, 2.0, 0.5], [-1.0, 0.0, 3.0]])
    s2 = torch.tensor([[0.0, 1.0, 1.0], [2.0, -1.0, 0.5]])
    return TensorDict({"observation": s, "action": actions, "next": {"observation": s2}}, [2])


def matvec(w, x) -> list[float]:
    return [sum(a * b for a, b in zip(row, x, strict=True)) for row in w]


def test_the_inverse_loss_is_the_cross_entropy_of_the_action_from_both_features():
    loss, td = make(beta=0.2), batch(torch.tensor([2, 0]))
    want = 0.0
    for n, a in enumerate([2, 0]):
        phi = matvec(W_PHI, td["observation"][n].tolist())
        phi2 = matvec(W_PHI, td["next", "observation"][n].tolist())
        logits = matvec(W_G, phi + phi2)
        want += -(logits[a] - math.log(sum(math.exp(z) for z in logits)))
    got = loss(td)["loss_icm_inverse"]
    assert float(got.detach()) == pytest.approx(0.8 * want / 2, rel=1e-5)


def test_the_forward_error_is_the_reward_and_the_forward_loss_leaves_the_features_alone():
    loss = make(beta=0.2, reward_scale=0.5, normalize_rewards=False)
    td = batch(torch.tensor([1, 2]))
    errors = []
    for n, a in enumerate([1, 2]):
        phi = matvec(W_PHI, td["observation"][n].tolist())
        phi2 = matvec(W_PHI, td["next", "observation"][n].tolist())
        onehot = [1.0 if j == a else 0.0 for j in range(A)]
        pred = matvec(W_F, phi + onehot)
        errors.append(0.5 * sum((p - q) ** 2 for p, q in zip(pred, phi2, strict=True)))
    rollout = td.reshape(1, 2)
    loss.intrinsic_reward(rollout)
    got = rollout["next", "intrinsic_reward"]
    assert got.shape == (1, 2, 1)
    assert got.reshape(-1).tolist() == pytest.approx([0.5 * e for e in errors], rel=1e-5)
    assert not rollout["next", "intrinsic_done"].any()
    # normalized (the default): divided by the std of the discounted sums R, across episodes
    normalized = make(reward_scale=0.5, gamma=0.9)
    rollout2 = td.reshape(1, 2)
    normalized.intrinsic_reward(rollout2)
    r = [0.5 * errors[0], 0.9 * 0.5 * errors[0] + 0.5 * errors[1]]
    std = math.sqrt(sum((x - sum(r) / 2) ** 2 for x in r) / 2 + 1e-8)
    got2 = rollout2["next", "intrinsic_reward"].reshape(-1).tolist()
    assert got2 == pytest.approx([0.5 * e / std for e in errors], rel=1e-4)
    out = loss(td)
    assert float(out["loss_icm_forward"].detach()) == pytest.approx(0.2 * sum(errors) / 2, rel=1e-5)
    # d loss / d W_phi with phi(s') held constant: sum_n (W_f[:, :k]^T (f - phi'_n)) s_n^T,
    # times beta / N; a gradient through phi(s') would add -(f - phi'_n) s'_n^T
    out["loss_icm_forward"].backward()
    want = [[0.0] * OBS for _ in range(FEAT)]
    for n, a in enumerate([1, 2]):
        s_n = td["observation"][n].tolist()
        phi = matvec(W_PHI, s_n)
        phi2 = matvec(W_PHI, td["next", "observation"][n].tolist())
        onehot = [1.0 if j == a else 0.0 for j in range(A)]
        resid = [p - q for p, q in zip(matvec(W_F, phi + onehot), phi2, strict=True)]
        d_phi = [sum(W_F[i][k] * resid[i] for i in range(FEAT)) for k in range(FEAT)]
        for k in range(FEAT):
            for j in range(OBS):
                want[k][j] += 0.2 / 2 * d_phi[k] * s_n[j]
    torch.testing.assert_close(loss.feature_net.weight.grad, torch.tensor(want))


def test_first_visit_pays_only_an_episodes_first_visit_of_each_observation():
    """The same rollout with and without first_visit: the forward errors of first visits kept,
    the revisits 0, per env; an episode end clears the env's set, a batch cut does not."""
    s, s2, s3 = (torch.tensor(v) for v in ([1.0, 2.0, 0.5], [0.0, 1.0, 1.0], [2.0, -1.0, 0.5]))
    # env 0 reaches s2 s2 s2 | s2 (its episode ends after t = 2); env 1 reaches s2 s3 s2 s3
    td = TensorDict(
        {
            "observation": s.expand(2, 4, OBS).clone(),
            "action": torch.tensor([[0, 1, 2, 0], [1, 1, 0, 2]]),
            "next": {
                "observation": torch.stack([torch.stack([s2] * 4), torch.stack([s2, s3] * 2)]),
                "done": torch.tensor([[False, False, True, False], [False] * 4]).unsqueeze(-1),
            },
        },
        [2, 4],
    )
    plain, first = make(normalize_rewards=False), make(normalize_rewards=False, first_visit=True)
    errors = plain.intrinsic_reward(td.clone())["next", "intrinsic_reward"].squeeze(-1).tolist()
    got = first.intrinsic_reward(td.clone())["next", "intrinsic_reward"].squeeze(-1).tolist()
    assert all(e > 0 for row in errors for e in row)
    assert got[0] == pytest.approx([errors[0][0], 0.0, 0.0, errors[0][3]])
    assert got[1] == pytest.approx([errors[1][0], errors[1][1], 0.0, 0.0])
    # a batch cut: env 0's episode that began at t = 3 has seen s2, env 1's has seen s2 and s3
    again = first.intrinsic_reward(td[:, 3:].clone())["next", "intrinsic_reward"]
    assert again.reshape(-1).tolist() == [0.0, 0.0]
    restored = make(normalize_rewards=False, first_visit=True)
    restored.load_state_dict(first.state_dict())
    assert restored._visited == first._visited
    assert first._visited == [{s2.numpy().tobytes()}, {s2.numpy().tobytes(), s3.numpy().tobytes()}]


def test_continuous_actions_regress_the_action():
    loss, td = make(discrete=False, beta=0.0), batch(torch.tensor([[0.3], [-0.7]]))
    want = 0.0
    for n, a in enumerate([0.3, -0.7]):
        phi = matvec(W_PHI, td["observation"][n].tolist())
        phi2 = matvec(W_PHI, td["next", "observation"][n].tolist())
        want += 0.5 * (matvec([W_G[0]], phi + phi2)[0] - a) ** 2
    assert float(loss(td)["loss_icm_inverse"].detach()) == pytest.approx(want / 2, rel=1e-5)
    assert float(loss(td)["loss_icm_forward"].detach()) == 0.0  # beta 0


def test_bad_settings_and_inputs_are_named():
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\], got 1.5"):
        make(beta=1.5)
    with pytest.raises(ValueError, match="reward_scale must be >= 0, got nan"):
        make(reward_scale=float("nan"))
    with pytest.raises(ValueError, match=r"key 'action': action indices outside \[0, 3\)"):
        make()(batch(torch.tensor([0, 3])))
    with pytest.raises(TypeError, match="discrete=True takes integer action indices"):
        make()(batch(torch.tensor([0.0, 1.0])))
    with pytest.raises(ValueError, match=r"key 'action' has shape \(2, 2\), not \[..., 1\]"):
        make(discrete=False)(batch(torch.zeros(2, 2)))
