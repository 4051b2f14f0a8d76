"""Action masks in the categorical actor: invalid actions are never taken, have probability 0,
add nothing to the entropy; PPO on an env that punishes invalid actions never takes one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import Collector
from tdrl.data import minibatches
from tdrl.envs import make_vec_env
from tdrl.estimators import GAE
from tdrl.modules import CategoricalActor, actor_critic, mlp
from tdrl.objectives import ClipPPOLoss, total_loss
from tdrl.trainers import optimizer_step
from tests.tiny_envs import Masked


def test_masked_actions_are_never_sampled_and_carry_no_probability():
    torch.manual_seed(0)
    actor = CategoricalActor(mlp(3, 4), mask_key="action_mask")
    mask = torch.tensor([[True, False, True, False]] * 500 + [[False, False, False, True]] * 500)
    td = TensorDict({"observation": torch.randn(1000, 3), "action_mask": mask}, [1000])
    from tensordict.nn import InteractionType, set_interaction_type

    with set_interaction_type(InteractionType.RANDOM):
        out = actor(td.clone())
    assert mask.gather(1, out["action"].unsqueeze(1)).all()
    dist = actor.get_dist(td)
    probs = dist.logits.exp()
    assert torch.equal(probs[~mask], torch.zeros_like(probs[~mask]))
    assert torch.allclose(probs.sum(-1), torch.ones(1000))
    entropy = dist.entropy()
    assert torch.isfinite(entropy).all()
    assert torch.allclose(entropy[500:], torch.zeros(500), atol=1e-6)  # one valid action
    kl = torch.distributions.kl_divergence(dist, actor.get_dist(td))
    assert torch.isfinite(kl).all()
    deterministic = actor(td.clone())["action"]  # the default: arg-max among valid ones
    assert mask.gather(1, deterministic.unsqueeze(1)).all()


def test_bad_masks_name_the_key():
    actor = CategoricalActor(mlp(3, 4), mask_key="action_mask")
    obs = torch.randn(2, 3)
    for mask, error, match in (
        (torch.ones(2, 3, dtype=torch.bool), ValueError, r"'action_mask' has shape \(2, 3\)"),
        (torch.ones(2, 4), TypeError, "'action_mask' must be a bool mask"),
        (torch.tensor([[True] * 4, [False] * 4]), ValueError, "row with no valid action"),
    ):
        with pytest.raises(error, match=match):
            actor(TensorDict({"observation": obs, "action_mask": mask}, [2]))
    with pytest.raises(KeyError, match="action_mask"):
        actor(TensorDict({"observation": obs}, [2]))


def test_ppo_with_the_env_mask_never_takes_an_invalid_action():
    torch.manual_seed(0)
    with make_vec_env(lambda: Masked(length=16, one_hot=True), 4, seed=0) as env:
        actor, critic, _ = actor_critic(
            env.observation_spec, env.action_spec, normalize_observations=False
        )
        assert actor.mask_key == "action_mask"  # actor_critic found the env's mask
        loss = ClipPPOLoss(actor, critic, entropy_coeff=0.05)
        estimator = GAE(gamma=0.9, lmbda=0.9, value_network=critic)
        optimizer = torch.optim.Adam(loss.parameters(), lr=3e-3)
        for batch in Collector(env, actor, frames_per_batch=256, total_frames=2048):
            taken = batch["action_mask"].gather(-1, batch["action"].unsqueeze(-1))
            assert taken.all()  # every action taken was valid
            assert (batch["next", "reward"] == 1.0).all()
            with torch.no_grad():  # a recipe's update: the estimator on the whole rollout
                estimator(batch)
            for minibatch in minibatches(batch, 64, epochs=2, in_keys=loss.in_keys):
                out = loss(minibatch)
                optimizer_step(total_loss(out), optimizer)
                assert all(np.isfinite(float(v)) for v in out.detach().values())


def test_without_the_mask_the_same_policy_takes_invalid_actions():
    # The control: the mask, not luck or the env, keeps the masked runs valid.
    torch.manual_seed(0)
    with make_vec_env(lambda: Masked(length=16, one_hot=True), 4, seed=0) as env:
        actor = CategoricalActor(mlp(4, 4))
        batch = next(iter(Collector(env, actor, frames_per_batch=256, total_frames=256)))
    assert (batch["next", "reward"] == -1.0).any()


def test_dqn_greedy_and_epsilon_greedy_choices_respect_the_mask():
    from tensordict.nn import InteractionType, TensorDictSequential, set_interaction_type

    from tdrl.modules import EpsilonGreedy, QValueActor

    torch.manual_seed(0)
    qnet = QValueActor(mlp(3, 4), mask_key="action_mask")
    explore = EpsilonGreedy(4, eps_init=1.0, eps_end=1.0, mask_key="action_mask")
    policy = TensorDictSequential(qnet, explore)
    mask = torch.zeros(2000, 4, dtype=torch.bool)
    mask[torch.arange(2000), torch.randint(4, (2000,))] = True
    mask[torch.arange(2000), torch.randint(4, (2000,))] = True
    td = TensorDict({"observation": torch.randn(2000, 3), "action_mask": mask}, [2000])
    greedy = qnet(td.clone())
    assert mask.gather(1, greedy["action"].unsqueeze(1)).all()
    values = greedy["action_value"].masked_fill(~mask, -torch.inf)
    assert torch.equal(greedy["chosen_action_value"].squeeze(-1), values.max(-1).values)
    with set_interaction_type(InteractionType.RANDOM):
        random = policy(td.clone())["action"]  # epsilon 1: every action is a random one
    assert mask.gather(1, random.unsqueeze(1)).all()
    # uniform among the valid ones: rows with two valid actions pick each about half the time
    two = mask.sum(-1) == 2
    first_valid = mask.int().argmax(-1)
    share = (random[two] == first_valid[two]).float().mean()
    assert 0.45 < float(share) < 0.55
