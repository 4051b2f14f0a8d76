"""GSDEActor (gSDE) against its definition: the scale formula written as sums, the held noise
and its redraws, the law of the actions over the noise, gradients, checkpoints, and the
networks and recipe that use it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type
from torch import nn

from recipes import ppo
from tdrl.envs import make_vec_env
from tdrl.modules import GSDEActor, actor_critic
from tdrl.modules.recurrent import RecurrentActor
from tdrl.trainers import configure, read_csv

OBS, F, A = 3, 5, 2


def actor(sample_freq: int = 3, seed: int = 0) -> GSDEActor:
    torch.manual_seed(seed)
    out = GSDEActor(
        nn.Sequential(nn.Linear(OBS, F), nn.Tanh()), F, A, init_log_std=-0.5,
        sample_freq=sample_freq, action_low=[-2.0, 0.0], action_high=[2.0, 1.0],
    )  # fmt: skip
    with torch.no_grad():
        out.log_std.add_(torch.randn(F, A) * 0.3)  # a different sigma per (feature, action)
        out.head.weight.normal_()
    return out


def td(n: int = 4, seed: int = 1) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(observation=torch.randn(n, OBS, generator=g), batch_size=[n])


def test_loc_and_scale_follow_the_definition():
    a, batch = actor(), td()
    dist = a.get_dist(batch)
    mid, half = torch.tensor([0.0, 0.5]), torch.tensor([2.0, 0.5])
    sigma = a.log_std.exp()
    for b in range(4):
        z = a.body(batch["observation"][b])
        for k in range(A):
            var = sum(z[j].item() ** 2 * sigma[j, k].item() ** 2 for j in range(F))
            assert dist.scale[b, k].item() == pytest.approx(half[k] * math.sqrt(var + 1e-6))
            loc = a.head.bias[k] + sum(a.head.weight[k, j] * z[j] for j in range(F))
            assert dist.loc[b, k].item() == pytest.approx((mid[k] + half[k] * loc).item())
    with set_interaction_type(InteractionType.DETERMINISTIC):
        torch.testing.assert_close(a(batch.clone())["action"], dist.loc)


def test_noise_is_held_for_sample_freq_calls_and_actions_are_loc_plus_phi_e():
    a, batch = actor(sample_freq=3), td()
    held = []
    with set_interaction_type(InteractionType.RANDOM):
        for _ in range(7):
            out = a(batch.clone())
            held.append(a.noise.clone())
            z = a.body(batch["observation"]).detach()
            expected = out["loc"] + torch.tensor([2.0, 0.5]) * torch.einsum(
                "bf,bfa->ba", z, a.noise
            )
            torch.testing.assert_close(out["action"], expected)
            torch.testing.assert_close(
                out["action_log_prob"], a.get_dist(batch).log_prob(out["action"])
            )
    assert held[0].shape == (4, F, A)
    same = [torch.equal(held[i], held[i + 1]) for i in range(6)]
    assert same == [True, True, False, True, True, False]  # new draws at calls 3 and 6
    assert not torch.equal(held[0][0], held[0][1])  # one matrix per env


def test_one_unbatched_env_and_image_observations_explore_with_the_held_noise():
    # one env without a batch dim (a plain TorchRL env) is a batch of 1; an image observation
    # has [B, F] features like any other: both act loc + phi E with E held (they drew i.i.d.
    # Gaussian noise every call before)
    a = actor(sample_freq=100)
    obs = td(1)["observation"][0]
    with set_interaction_type(InteractionType.RANDOM):
        first = a(TensorDict(observation=obs))
        second = a(TensorDict(observation=obs))
    assert first["action"].shape == (A,) and first["action_log_prob"].shape == ()
    torch.testing.assert_close(first["action"], second["action"])
    z = a.body(obs).detach()
    expected = first["loc"] + torch.tensor([2.0, 0.5]) * (z @ a.noise[0])
    torch.testing.assert_close(first["action"], expected)
    assert a.noise.shape == (1, F, A)
    torch.manual_seed(0)
    pixels = GSDEActor(
        nn.Sequential(nn.Flatten(), nn.Linear(6, F), nn.Tanh()), F, A, sample_freq=100
    )
    images = TensorDict(observation=torch.randn(4, 2, 3), batch_size=[4])
    with set_interaction_type(InteractionType.RANDOM):
        actions = [pixels(images.clone())["action"] for _ in range(2)]
    torch.testing.assert_close(actions[0], actions[1])
    assert pixels.noise.shape == (4, F, A)


def test_actions_over_the_noise_have_the_scale_as_their_std():
    a, batch = actor(), td(n=1)
    draws = []
    with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
        for _ in range(6000):
            a.reset_noise(1)
            a.calls.fill_(1)  # keep the draw just made
            draws.append(a(batch.clone())["action"][0])
    draws_t = torch.stack(draws)
    dist = a.get_dist(batch)
    torch.testing.assert_close(draws_t.mean(0), dist.loc[0], atol=0.05, rtol=0.0)
    torch.testing.assert_close(draws_t.std(0), dist.scale[0], rtol=0.05, atol=0.0)


def test_gradients_reach_the_mean_through_the_body_and_the_scale_only_through_log_std():
    a, batch = actor(), td()
    dist = a.get_dist(batch)
    dist.scale.sum().backward()
    assert a.log_std.grad.abs().sum() > 0
    assert all(p.grad is None for p in a.body.parameters())  # features are detached
    a.zero_grad()
    dist = a.get_dist(batch)
    dist.loc.sum().backward()
    assert all(p.grad.abs().sum() > 0 for p in a.body.parameters())


def test_checkpoint_restores_the_held_noise_into_a_fresh_actor():
    a, batch = actor(sample_freq=5), td()
    with set_interaction_type(InteractionType.RANDOM):
        a(batch.clone())
        a(batch.clone())
        state = {k: v.clone() for k, v in a.state_dict().items()}  # a copy: a goes on
        torch.manual_seed(7)  # the redraw at the 5th call reads torch's generator (checkpointed)
        expected = [a(batch.clone())["action"] for _ in range(4)]
        fresh = actor(sample_freq=5, seed=9)
        fresh.load_state_dict(state)
        torch.manual_seed(7)
        got = [fresh(batch.clone())["action"] for _ in range(4)]
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(e, g)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="sample_freq must be >= 1, got 0"):
        GSDEActor(nn.Identity(), 1, 2, sample_freq=0)
    a = GSDEActor(nn.Linear(OBS, 4), 5, A)
    with pytest.raises(ValueError, match="the body gives 4 features, latent_dim is 5"):
        a.get_dist(td())


def test_actor_critic_builds_gsde_heads_for_mlp_and_recurrent_policies():
    with make_vec_env("Pendulum-v1", 2, seed=0) as env:
        plain, _, _ = actor_critic(env.observation_spec, env.action_spec)
        sde, _, _ = actor_critic(env.observation_spec, env.action_spec, sde_sample_freq=4)
        rec, _, _ = actor_critic(
            env.observation_spec, env.action_spec, recurrent="lstm", sde_sample_freq=4
        )
    assert not isinstance(plain, GSDEActor)
    assert isinstance(sde, GSDEActor) and sde.latent_dim == 64 and sde.sample_freq == 4
    assert isinstance(rec, RecurrentActor) and isinstance(rec.head, GSDEActor)


def test_ppo_recipe_with_gsde_learns_signal_and_resumes_exactly(tmp_path: Path):
    common = dict(
        env_id="Pendulum-v1", total_frames=640, num_envs=2, frames_per_batch=64, epochs=2,
        minibatch_size=32, eval_every=320, eval_episodes=1, eval_envs=1, hidden_sizes=(16, 16),
        sde_sample_freq=4, init_log_std=-1.0, progress=False, tensorboard=False,
    )  # fmt: skip
    straight = configure(ppo.Config, **common, log_dir=str(tmp_path / "straight"))
    result = ppo.main(straight)
    assert result["frames"] == 640 and math.isfinite(result["loss_objective"])
    first = configure(straight, log_dir=str(tmp_path / "resumed"), stop_after_frames=192)
    ppo.main(first)
    torch.manual_seed(99)
    ppo.main(configure(first, stop_after_frames=0, resume=True))
    rows = [
        [{k: v for k, v in r.items() if k != "time"} for r in read_csv(tmp_path / d / "train.csv")]
        for d in ("straight", "resumed")
    ]
    assert rows[0] == rows[1]
