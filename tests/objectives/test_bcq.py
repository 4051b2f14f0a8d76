"""BCQ, continuous (Fujimoto, Meger & Precup 2019) and discrete (Fujimoto et al. 2019), checked
against the papers' equations written out by hand, with the losses' random draws replayed."""

from __future__ import annotations

import copy
import importlib
import math
from pathlib import Path

import pytest
import torch
from offpolicy_data import all_params_have_grad, linear, no_param_has_grad, transitions
from tensordict.nn import TensorDictModule
from test_td3 import OBS, critic
from torch import nn

from tdrl.keyed import MissingKeyError
from tdrl.modules import (
    BCQVAE,
    BCQPerturbation,
    CategoricalActor,
    EnsembleCritic,
    EnsembleMLP,
    QValueActor,
    mlp,
)
from tdrl.objectives import (
    BCQActor,
    BCQLoss,
    DiscreteBCQActor,
    DiscreteBCQLoss,
    SoftUpdate,
    imitation_mask,
    total_loss,
)

GAMMA = 0.9


def hand_vae() -> BCQVAE:
    """mean = s_0 + a, log_std = 0.5 s_1; a~ = 2 tanh(s_2 + 2 z): one action in [-2, 2]."""
    encoder = linear([[1.0, 0.0, 0.0, 1.0], [0.0, 0.5, 0.0, 0.0]])
    decoder = linear([[0.0, 0.0, 1.0, 2.0]])
    return BCQVAE(encoder, decoder, 1, 1, action_low=-2.0, action_high=2.0)


def hand_perturbation() -> BCQPerturbation:
    """a' = clip(a + 0.5 * 2 * tanh(a), -2, 2) = clip(a + tanh(a), -2, 2)."""
    net = linear([[0.0, 0.0, 0.0, 1.0]])
    return BCQPerturbation(net, 1, phi=0.5, action_low=-2.0, action_high=2.0)


def hand_loss(**kwargs) -> BCQLoss:
    q = critic((1.5, 0.5), (-1.0, 0.2))  # Q_0 = 1.5 a + 0.5, Q_1 = -a + 0.2
    return BCQLoss(hand_perturbation(), q, hand_vae(), gamma=GAMMA, **kwargs)


def batch(**flags):
    return transitions(5, OBS, 1, **flags)


def q_pair(a):
    return 1.5 * a + 0.5, -a + 0.2


def test_vae_elbo_by_hand_for_a_fixed_noise_draw():
    loss = hand_loss()
    td = batch()
    td["priority_weight"] = torch.tensor([1.0, 0.5, 2.0, 0.0, 1.0])
    torch.manual_seed(5)
    got = loss.vae_loss(td)
    torch.manual_seed(5)
    eps = torch.randn(5, 1)[:, 0]  # the loss's one draw: the reparameterisation noise
    s, a = td["observation"], td["action"][:, 0]
    mean, std = s[:, 0] + a, torch.exp(0.5 * s[:, 1])
    reconstruction = 2 * torch.tanh(s[:, 2] + 2 * (mean + std * eps))
    kl = 0.5 * (mean**2 + std**2 - 1) - torch.log(std)  # KL(N(mean, std^2) || N(0, 1))
    expected = ((reconstruction - a) ** 2 + 0.5 * kl) * td["priority_weight"]
    torch.testing.assert_close(got, expected.mean())
    # one golden number: s = 0, a = 1 -> mean 1, std 1, KL = 0.5 (1 + 1 - 1) = 0.5; a decoder
    # that ignores z gives a~ = 0, so (a~ - a)^2 = 1 whatever the noise: 1 + 0.5 * 0.5 = 1.25
    one = batch()[:1].apply(torch.zeros_like)
    one["action"] = torch.ones(1, 1)
    with torch.no_grad():
        loss.vae_network.decoder.weight.zero_()
    assert float(loss.vae_loss(one).detach()) == pytest.approx(1.25)


def test_vae_samples_clip_the_latent():
    vae = BCQVAE(linear([[0.0] * 4] * 2), linear([[0.0, 0.0, 0.0, 1.0]]), 1, 1)  # a~ = tanh(z)
    torch.manual_seed(0)
    action = vae.decode(torch.zeros(2000, OBS))
    assert float(action.abs().max()) == pytest.approx(math.tanh(0.5))  # |z| <= 0.5, reached
    assert float((action.abs() >= math.tanh(0.5) - 1e-6).float().mean()) > 0.5  # ~62% clipped


def hand_target(td, loss, seed):
    """Eq. 13 with the loss's draws replayed: n latents per next state, sample-major."""
    n, B = loss.num_samples, td.shape[0]
    torch.manual_seed(seed)
    z = torch.randn(n * B, 1)[:, 0].clamp(-0.5, 0.5).view(n, B)
    sampled = 2 * torch.tanh(td["next", "observation"][:, 2] + 2 * z)  # [n, B]
    perturbed = (sampled + torch.tanh(sampled)).clamp(-2.0, 2.0)
    q0, q1 = q_pair(perturbed)
    soft = loss.lmbda * torch.minimum(q0, q1) + (1 - loss.lmbda) * torch.maximum(q0, q1)
    keep = (~td["next", "terminated"][:, 0]).float()
    return td["next", "reward"][:, 0] + GAMMA * keep * soft.max(0).values


@pytest.mark.parametrize("lmbda", [0.75, 0.3])
def test_soft_clipped_double_q_target_by_hand_over_sampled_actions(lmbda):
    loss = hand_loss(num_samples=4, lmbda=lmbda)
    td = batch(terminated=[False, True, False, False, False],
               truncated=[False, False, True, False, False])  # fmt: skip
    expected = hand_target(td, loss, seed=7)
    torch.manual_seed(7)
    torch.testing.assert_close(loss.value_target(td), expected)
    # the target reads the target networks: changing the online ones does not move it
    with torch.no_grad():
        for p in [*loss.actor_network.parameters(), *loss.qvalue_network.parameters()]:
            p.mul_(-3.0)
    torch.manual_seed(7)
    torch.testing.assert_close(loss.value_target(td), expected)
    # and the critic loss regresses both critics on it
    torch.manual_seed(7)
    a = td["action"][:, 0]
    q0, q1 = q_pair(a)
    expected_q = ((-3 * q0 - expected) ** 2 + (-3 * q1 - expected) ** 2).mean()  # online: * -3
    torch.testing.assert_close(loss.qvalue_loss(td)[0], expected_q)


def test_terminated_and_truncated_rows_differ_exactly_where_they_should():
    loss = hand_loss(num_samples=3)
    flags = [False] * 5
    cut = batch(truncated=[False, False, True, False, False], terminated=flags)
    end = batch(terminated=[False, False, True, False, False], truncated=flags)
    torch.manual_seed(2)
    y_cut = loss.value_target(cut)
    torch.manual_seed(2)
    y_end = loss.value_target(end)
    same = torch.tensor([True, True, False, True, True])
    torch.testing.assert_close(y_cut[same], y_end[same])
    torch.testing.assert_close(y_end[2], end["next", "reward"][2, 0])  # no bootstrap
    assert float((y_cut[2] - y_end[2]).abs()) > 1e-3  # the cut bootstraps from s'


def test_actor_loss_by_hand_is_q0_of_the_perturbed_decoder_sample():
    loss = hand_loss()
    td = batch()
    torch.manual_seed(11)
    got = loss.actor_loss(td)
    torch.manual_seed(11)
    z = torch.randn(5, 1)[:, 0].clamp(-0.5, 0.5)
    sampled = 2 * torch.tanh(td["observation"][:, 2] + 2 * z)
    torch.testing.assert_close(got, -q_pair((sampled + torch.tanh(sampled)).clamp(-2, 2))[0].mean())


def mlp_loss() -> BCQLoss:
    torch.manual_seed(0)
    vae = BCQVAE(mlp(OBS + 1, 4, (8,)), mlp(OBS + 2, 1, (8,)), 2, 1)
    perturbation = BCQPerturbation(mlp(OBS + 1, 1, (8,)), 1, phi=0.5)
    q = EnsembleCritic(EnsembleMLP(OBS + 1, 1, (8,), num_members=2))
    return BCQLoss(perturbation, q, vae, num_samples=3, gamma=GAMMA)


def test_each_loss_reaches_exactly_its_network_and_the_targets_stay_frozen():
    loss = mlp_loss()
    td = batch(terminated=[True, False, False, False, False])
    nets = {"vae": loss.vae_network, "actor": loss.actor_network, "critic": loss.qvalue_network}
    owners = {"loss_vae": "vae", "loss_actor": "actor", "loss_qvalue": "critic"}
    for term, owner in owners.items():
        loss.zero_grad(set_to_none=True)
        loss(td)[term].backward()
        for name, net in nets.items():
            if name == owner:
                assert all_params_have_grad(net), (term, name)
            else:
                assert no_param_has_grad(net), (term, name)
        assert no_param_has_grad(loss.target_actor_network)
        assert no_param_has_grad(loss.target_qvalue_network)
    targets = [loss.target_actor_network, loss.target_qvalue_network]
    before = [copy.deepcopy(t.state_dict()) for t in targets]
    online = copy.deepcopy(loss.actor_network.state_dict())
    optimizer = torch.optim.Adam(loss.parameters(), lr=1e-2)
    optimizer.zero_grad()
    total_loss(loss(td)).backward()
    optimizer.step()
    for target, state in zip(targets, before, strict=True):
        for key, value in target.state_dict().items():
            torch.testing.assert_close(value, state[key])  # untouched by the optimizer
    assert not torch.equal(loss.actor_network.net[0].weight, online["net.0.weight"])
    # SoftUpdate moves the perturbation model's and the critics' targets, and no VAE copy
    assert [o for o, _ in loss.target_pairs()] == [loss.actor_network, loss.qvalue_network]
    SoftUpdate(loss, tau=0.5).step()
    expected = (online["net.0.weight"] + loss.actor_network.net[0].weight) / 2
    torch.testing.assert_close(loss.target_actor_network.net[0].weight, expected)


def test_keys_out_keys_missing_keys_and_bad_shapes():
    loss = mlp_loss()
    td = batch()
    snapshot = td.clone()
    out = loss(td)
    assert sorted(out.keys()) == sorted(loss.out_keys)
    assert loss.out_keys == ["loss_actor", "loss_qvalue", "loss_vae", "td_error"]
    assert (td == snapshot).all() and set(td.keys(True, True)) == set(snapshot.keys(True, True))
    for key in ["observation", ("next", "reward"), ("next", "terminated"), "action"]:
        with pytest.raises(MissingKeyError, match=str(key[-1] if isinstance(key, tuple) else key)):
            loss(td.exclude(key))
    with pytest.raises(MissingKeyError, match="'observation'"):
        loss(td.exclude(("next", "observation")))
    wide = td.clone()
    wide["action"] = torch.zeros(5, 2)
    with pytest.raises(ValueError, match="'action' has shape"):
        loss.vae_loss(wide)
    bad = td.clone()
    bad["next", "reward"] = torch.zeros(5, 2)
    with pytest.raises(ValueError, match="'reward'"):
        loss(bad)
    with pytest.raises(MissingKeyError, match="'rew'"):
        copy.deepcopy(loss).set_keys(reward="rew")(td)
    with pytest.raises(ValueError, match="not a key name"):
        loss.set_keys(bogus="x")
    with pytest.raises(ValueError, match="num_samples"):
        BCQLoss(loss.actor_network, critic((1, 0), (1, 0)), loss.vae_network, lmbda=1.5)


def test_bcq_actor_picks_the_best_perturbed_sample_under_q0():
    loss = hand_loss()
    policy = BCQActor(loss.vae_network, loss.actor_network, loss.qvalue_network, num_samples=6)
    td = batch().select("observation")
    torch.manual_seed(3)
    with torch.no_grad():
        action = policy(td.clone())["action"]
    torch.manual_seed(3)
    z = torch.randn(6 * 5, 1)[:, 0].clamp(-0.5, 0.5).view(6, 5)
    sampled = 2 * torch.tanh(td["observation"][:, 2] + 2 * z)
    candidates = (sampled + torch.tanh(sampled)).clamp(-2, 2)  # Q_0 = 1.5 a + 0.5: the largest
    torch.testing.assert_close(action[:, 0], candidates.max(0).values)
    assert action.shape == (5, 1) and policy.in_keys == ["observation"]


# --- discrete ---------------------------------------------------------------------------------

# Q(s, .) = s; the imitation head gives pi proportional to (1, 0.2, 0.5) in every state.
LOG_PI = [0.0, math.log(0.2), math.log(0.5)]


def q_net() -> QValueActor:
    return QValueActor(linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))


def imitation_net() -> CategoricalActor:
    return CategoricalActor(linear([[0.1, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], LOG_PI))


def discrete_batch(**flags):
    td = transitions(3, OBS, num_actions=3, **flags)
    # row 0: Q(s', .) = (0, 3, 2) - the best action, 1, is rare in the data (ratio 0.2)
    td["next", "observation"][0] = torch.tensor([0.0, 3.0, 2.0])
    return td


def test_imitation_mask_and_the_target_where_the_threshold_changes_the_action():
    logits = torch.tensor([LOG_PI, [0.0, 0.0, -5.0]])
    assert imitation_mask(logits, 0.3).tolist() == [[True, False, True], [True, True, False]]
    assert imitation_mask(logits, 0.1).tolist() == [[True, True, True], [True, True, False]]
    assert imitation_mask(logits, 0.0).all()
    td = discrete_batch()
    r = td["next", "reward"][0, 0]
    strict = DiscreteBCQLoss(q_net(), imitation_net(), threshold=0.3, gamma=GAMMA)
    loose = DiscreteBCQLoss(q_net(), imitation_net(), threshold=0.1, gamma=GAMMA)
    # tau = 0.3: action 1 (ratio 0.2) is masked, a* = 2 with Q = 2; tau = 0.1: a* = 1, Q = 3
    torch.testing.assert_close(strict.value_target(td)[0], r + GAMMA * 2.0)
    torch.testing.assert_close(loose.value_target(td)[0], r + GAMMA * 3.0)
    obs = td["next"].select("observation")[:1]
    assert DiscreteBCQActor(q_net(), imitation_net())(obs.clone())["action"].tolist() == [2]
    greedy = DiscreteBCQActor(q_net(), imitation_net(), threshold=0.1)(obs.clone())
    assert greedy["action"].tolist() == [1]
    assert greedy["chosen_action_value"].tolist() == [[3.0]]


def hand_discrete_loss(td, *, weights=None):
    s, s_next, a = td["observation"], td["next", "observation"], td["action"]
    logits_next = s_next[:, :1] * torch.tensor([0.1, 0.0, 0.0]) + torch.tensor(LOG_PI)
    allowed = logits_next - logits_next.max(-1, keepdim=True).values > math.log(0.3)
    best = torch.where(allowed, s_next, torch.tensor(-1e9)).argmax(-1)
    keep = (~td["next", "terminated"][:, 0]).float()
    y = td["next", "reward"][:, 0] + GAMMA * keep * s_next.gather(1, best[:, None])[:, 0]
    error = s.gather(1, a[:, None])[:, 0] - y
    huber = torch.where(error.abs() < 1, 0.5 * error**2, error.abs() - 0.5)
    logits = s[:, :1] * torch.tensor([0.1, 0.0, 0.0]) + torch.tensor(LOG_PI)
    cross_entropy = -torch.log_softmax(logits, -1).gather(1, a[:, None])[:, 0]
    w = torch.ones(len(a)) if weights is None else weights
    return (w * huber).mean() + (w * cross_entropy).mean() + 1e-2 * (logits**2).mean(), y


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.imitation = q_net().net, imitation_net().net

    def forward(self, x):
        return self.q(x), self.imitation(x)


def test_discrete_loss_by_hand_with_separate_and_shared_networks():
    td = discrete_batch(terminated=[False, True, False])
    td["priority_weight"] = torch.tensor([1.0, 2.0, 0.5])
    expected, y = hand_discrete_loss(td, weights=td["priority_weight"])
    separate = DiscreteBCQLoss(q_net(), imitation_net(), gamma=GAMMA)
    shared_net = TensorDictModule(TwoHeads(), ["observation"], ["action_value", "logits"])
    shared = DiscreteBCQLoss(shared_net, gamma=GAMMA)
    for loss in (separate, shared):
        out = loss(td)
        torch.testing.assert_close(out["loss"], expected)
        torch.testing.assert_close(out["value_target"], y.mean())
        assert sorted(out.keys()) == sorted(loss.out_keys)
    # gradients: the Q network and the imitation head, never the target
    separate(td)["loss"].backward()
    assert all_params_have_grad(separate.value_network)
    assert all_params_have_grad(separate.imitation_network)
    assert no_param_has_grad(separate.target_value_network)
    # a renamed logits key
    renamed = TensorDictModule(TwoHeads(), ["observation"], ["action_value", "imitation"])
    loss = DiscreteBCQLoss(renamed, gamma=GAMMA).set_keys(logits="imitation")
    torch.testing.assert_close(loss(td)["loss"], expected)


def test_discrete_terminated_and_truncated_and_key_errors():
    loss = DiscreteBCQLoss(q_net(), imitation_net(), gamma=GAMMA)
    cut = discrete_batch(truncated=[True, False, False])
    end = discrete_batch(terminated=[True, False, False])
    y_cut, y_end = loss.value_target(cut), loss.value_target(end)
    torch.testing.assert_close(y_cut[1:], y_end[1:])
    torch.testing.assert_close(y_end[0], end["next", "reward"][0, 0])
    torch.testing.assert_close(y_cut[0], cut["next", "reward"][0, 0] + GAMMA * 2.0)
    no_logits = DiscreteBCQLoss(q_net(), gamma=GAMMA)  # a value network without the head
    with pytest.raises(MissingKeyError, match="'logits'"):
        no_logits(cut)
    wrong = CategoricalActor(linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))  # 2 logits, 3 actions
    with pytest.raises(ValueError, match="'logits' has shape"):
        DiscreteBCQLoss(q_net(), wrong)(cut)
    with pytest.raises(MissingKeyError, match="'observation'"):
        loss(cut.exclude("observation"))
    with pytest.raises(ValueError, match="threshold"):
        DiscreteBCQLoss(q_net(), imitation_net(), threshold=1.0)


# --- the recipe -------------------------------------------------------------------------------


def test_offline_recipe_runs_bcq_on_a_minari_dataset_and_resumes_exactly(tmp_path, monkeypatch):
    pytest.importorskip("minari")
    from tdrl.collectors import Collector
    from tdrl.data import save_minari
    from tdrl.envs import make_vec_env
    from tdrl.trainers import configure, read_csv

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "recipes"))
    env = make_vec_env("Hopper-v5", 2, seed=0)
    save_minari(Collector(env, None, 200).rollout(), "tdrl/hopper-tiny-v0", "Hopper-v5")
    env.close()
    offline = importlib.import_module("offline")
    cfg = configure(
        offline.Config, dataset="tdrl/hopper-tiny-v0", algo="bcq", total_frames=40, eval_every=20,
        checkpoint_every=20, batch_size=16, hidden_sizes=(16,), eval_episodes=1,
        progress=False, tensorboard=False, log_dir=str(tmp_path / "straight"),
    )  # fmt: skip
    straight = offline.main(cfg)
    assert straight["frames"] == 40 and straight["updates"] == 40
    assert math.isfinite(straight["eval_return_mean"]) and math.isfinite(straight["loss_vae"])
    first = configure(cfg, log_dir=str(tmp_path / "resumed"), stop_after_frames=20)
    offline.main(first)
    offline.main(configure(first, stop_after_frames=0, resume=True))
    rows = [read_csv(tmp_path / d / "eval.csv") for d in ("straight", "resumed")]
    drop = ("time", "eval_time")
    assert [{k: v for k, v in r.items() if k not in drop} for r in rows[0]] == [
        {k: v for k, v in r.items() if k not in drop} for r in rows[1]
    ]  # the same returns: the VAE is in the checkpoint too
