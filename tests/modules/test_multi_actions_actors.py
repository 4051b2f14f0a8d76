"""MultiDiscrete and MultiBinary policies (factorized categorical, independent Bernoulli): their
log-probs equal the definitions, and PPO / A2C / REINFORCE learn with them on small real envs."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from tdrl.collectors import Collector
from tdrl.data import minibatches
from tdrl.envs import make_vec_env
from tdrl.estimators import GAE
from tdrl.modules import BernoulliActor, MultiCategoricalActor, actor_critic, mlp
from tdrl.objectives import A2CLoss, ClipPPOLoss, ReinforceLoss, total_loss
from tdrl.trainers import optimizer_step
from tests.tiny_envs import Episodic


def test_factorized_categorical_log_prob_and_entropy_are_the_sums():
    torch.manual_seed(0)
    actor = MultiCategoricalActor(mlp(3, 7), [3, 4])
    td = TensorDict({"observation": torch.randn(50, 3)}, [50])
    with set_interaction_type(InteractionType.RANDOM):
        out = actor(td.clone())
    action = out["action"]
    assert action.shape == (50, 2) and action[:, 0].max() < 3 and action[:, 1].max() < 4
    logits = out["logits"]
    a, b = logits[:, :3].log_softmax(-1), logits[:, 3:].log_softmax(-1)
    expected = a.gather(1, action[:, :1]).squeeze(1) + b.gather(1, action[:, 1:]).squeeze(1)
    torch.testing.assert_close(out["action_log_prob"], expected)
    entropy = -(a.exp() * a).sum(-1) - (b.exp() * b).sum(-1)
    torch.testing.assert_close(actor.get_dist(td).entropy(), entropy)


def test_bernoulli_log_prob_entropy_and_kl_by_hand():
    torch.manual_seed(1)
    actor = BernoulliActor(mlp(3, 4))
    td = TensorDict({"observation": torch.randn(20, 3)}, [20])
    dist = actor.get_dist(td)
    with set_interaction_type(InteractionType.RANDOM):
        out = actor(td.clone())
    x, p = out["action"].float(), torch.sigmoid(out["logits"])
    expected = (x * p.log() + (1 - x) * (1 - p).log()).sum(-1)
    torch.testing.assert_close(out["action_log_prob"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        dist.entropy(), -(p * p.log() + (1 - p) * (1 - p).log()).sum(-1), rtol=1e-5, atol=1e-5
    )
    assert torch.allclose(torch.distributions.kl_divergence(dist, dist), torch.zeros(20))


def _train(space, target, loss_cls, **loss_kwargs) -> tuple[float, float]:
    torch.manual_seed(0)
    with make_vec_env(
        lambda: Episodic(
            8,
            truncate=True,
            fill=1.0,
            action_space=space,
            reward=lambda action: (np.asarray(action) == np.asarray(target)).sum(),
        ),
        4,
        seed=0,
    ) as env:
        actor, critic, _ = actor_critic(env.observation_spec, env.action_spec)
        loss = loss_cls(actor, critic, **loss_kwargs)
        estimator = GAE(gamma=0.9, lmbda=0.9, value_network=critic)
        optimizer = torch.optim.Adam(loss.parameters(), lr=1e-2)
        rewards = []
        for batch in Collector(env, actor, frames_per_batch=128, total_frames=128 * 30):
            rewards.append(float(batch["next", "reward"].mean()))
            epochs = 4 if loss_cls is ClipPPOLoss else 1
            with torch.no_grad():  # a recipe's update: the estimator on the whole rollout
                estimator(batch)
            for minibatch in minibatches(batch, 64, epochs=epochs, in_keys=loss.in_keys):
                optimizer_step(total_loss(loss(minibatch)), optimizer)
    return rewards[0], float(np.mean(rewards[-3:]))


@pytest.mark.slow  # a learning run: about a minute on 2 cores
def test_ppo_a2c_and_reinforce_learn_multidiscrete_and_multibinary_targets():
    k = 3
    for space, target in (
        (gym.spaces.MultiDiscrete([3, 4, 5]), [2, 0, 4]),
        (gym.spaces.MultiBinary(k), [1, 0, 1]),
    ):
        for loss_cls in (ClipPPOLoss, A2CLoss, ReinforceLoss):
            first, last = _train(space, target, loss_cls)
            # random play matches sum(1/n) (or k/2) components; learning gets close to all k
            assert last > first + 0.5 and last > 0.75 * k, (space, loss_cls.__name__, first, last)
            assert not math.isnan(last)


def test_multibinary_specs_are_not_taken_for_a_two_way_categorical():
    # TorchRL's Binary subclasses its Categorical (space.n == 2)
    from torchrl.data import Binary, Composite, MultiCategorical, Unbounded

    from tdrl.modules.networks import actor_critic, flat_dims

    obs = Composite(observation=Unbounded(shape=(4,)))
    assert flat_dims(obs, Binary(n=3, shape=(3,))) == (4, 3)
    assert type(actor_critic(obs, Binary(n=3, shape=(3,)))[0]).__name__ == "BernoulliActor"
    for spec in (Binary(n=3, shape=(3,)), MultiCategorical(nvec=[2, 3])):
        with pytest.raises(ValueError, match="recurrent actors are Categorical or Gaussian"):
            actor_critic(obs, spec, recurrent="gru")
