"""Values checked once, at the door: gamma and lambda finite in [0, 1] in every estimator, op,
buffer and loss; an empty time dimension is an error, not a silent empty result."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from tdrl.data import ReplayBuffer
from tdrl.estimators import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator, VTrace
from tdrl.ops import InputError, gae, td0_return, td_lambda_return, vtrace
from tdrl.trainers import configure

BAD = [1.5, -0.5, math.nan, math.inf]


@pytest.mark.parametrize("gamma", BAD)
def test_estimators_refuse_a_bad_gamma(gamma):
    for cls in (GAE, TDLambdaEstimator):
        with pytest.raises(ValueError, match="gamma"):
            cls(gamma=gamma, lmbda=0.9, value_network=None)
    for cls in (TD0Estimator, TD1Estimator, VTrace):
        with pytest.raises(ValueError, match="gamma"):
            cls(gamma=gamma, value_network=None)


@pytest.mark.parametrize("lmbda", [2.0, -0.1, math.nan])
def test_estimators_refuse_a_bad_lambda(lmbda):
    for cls in (GAE, TDLambdaEstimator):
        with pytest.raises(ValueError, match="lmbda"):
            cls(gamma=0.99, lmbda=lmbda, value_network=None)


def _inputs(T: int = 5):
    r = torch.randn(2, T, 1)
    flag = torch.zeros(2, T, 1, dtype=torch.bool)
    return r, torch.randn(2, T, 1), torch.randn(2, T, 1), flag


@pytest.mark.parametrize(
    "gamma", [*BAD, torch.tensor([0.9, math.nan]).view(1, 2, 1).expand(2, 2, 1)]
)
def test_ops_refuse_a_bad_gamma_naming_it(gamma):
    r, v, nv, flag = _inputs(2)
    with pytest.raises(InputError, match="gamma"):
        gae(r, v, nv, flag, flag, gamma=gamma, lmbda=0.9)
    with pytest.raises(InputError, match="gamma"):
        td0_return(r, nv, flag, flag, gamma=gamma)
    with pytest.raises(InputError, match="lmbda"):
        td_lambda_return(r, nv, flag, flag, gamma=0.9, lmbda=1.5)
    with pytest.raises(InputError, match="lmbda"):
        vtrace(r, v, nv, torch.zeros(2, 2, 1), flag, flag, gamma=0.9, lmbda=math.nan)


def test_an_empty_time_dimension_is_an_error():
    r, v, nv, flag = _inputs(0)
    with pytest.raises(InputError, match="time dimension .* is empty"):
        gae(r, v, nv, flag, flag, gamma=0.9, lmbda=0.9)


@pytest.mark.parametrize("gamma", BAD)
def test_buffers_refuse_a_bad_gamma(gamma):
    with pytest.raises(InputError, match="gamma"):
        ReplayBuffer(10, n_steps=3, gamma=gamma)


class NaNAt(gym.Env):
    """Emits a NaN observation (or an infinite reward) at its ``at``-th step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, at: int, what: str) -> None:
        self.at, self.what, self.t = at, what, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs, reward = np.zeros(2, np.float32), 0.0
        if self.t == self.at:
            if self.what == "observation":
                obs[1] = np.nan
            else:
                reward = math.inf
        return obs, reward, False, False, {}


@pytest.mark.parametrize(
    ("what", "key"), [("observation", "'observation'"), ("reward", "'reward'")]
)
def test_the_collector_names_a_non_finite_entry_by_env_and_step(what, key):
    from tdrl.collectors import Collector
    from tdrl.envs import make_vec_env

    with make_vec_env([lambda: NaNAt(10**9, what), lambda: NaNAt(7, what)], 2, seed=0) as env:
        with pytest.raises(ValueError, match=rf"non-finite .*{key}.* from env 1 at step 6"):
            next(iter(Collector(env, None, 20)))
    with make_vec_env([lambda: NaNAt(7, what)], 1, seed=0) as env:
        flagged = next(iter(Collector(env, None, 10, on_nonfinite="flag")))
        # a bad observation is next at step 6 and the root of step 7; a bad reward is step 6's
        bad_steps = {6, 7} if what == "observation" else {6}
        assert flagged["collector", "nonfinite"].tolist() == [[t in bad_steps for t in range(10)]]
    with make_vec_env([lambda: NaNAt(7, what)], 1, seed=0) as env:
        batch = next(iter(Collector(env, None, 10, on_nonfinite="ignore")))
        assert not torch.isfinite(
            batch[("next", "reward") if what == "reward" else ("next", "observation")]
        ).all()


def test_bad_collector_settings_are_errors():
    from tdrl.collectors import Collector
    from tdrl.envs import make_vec_env

    with make_vec_env("Pendulum-v1", 1) as env:
        with pytest.raises(ValueError, match="total_frames must be >= 0, or -1"):
            Collector(env, None, 10, total_frames=-5)
        with pytest.raises(ValueError, match="init_random_frames must be >= 0"):
            Collector(env, None, 10, init_random_frames=-1)


def test_observation_statistics_never_absorb_nan():
    from tdrl.modules import RunningObservationNorm

    norm = RunningObservationNorm(2)
    norm.update(torch.randn(10, 2))
    before = (norm.mean.clone(), norm.var.clone(), norm.count.clone())
    bad = torch.randn(10, 2)
    bad[3, 1] = math.nan
    with pytest.raises(ValueError, match="1 of 10 observations have NaN"):
        norm.update(bad)
    assert all(
        torch.equal(a, b) for a, b in zip(before, (norm.mean, norm.var, norm.count), strict=True)
    )
    # the count is of observations, whatever their rank: 1 bad frame of 2, 2 bad scalars of 4
    frames = torch.zeros(2, 4, 5, 5)
    frames[1, :, 0, 0] = math.inf
    with pytest.raises(ValueError, match="1 of 2 observations have NaN"):
        RunningObservationNorm((4, 5, 5)).update(frames)
    with pytest.raises(ValueError, match="2 of 4 observations have NaN"):
        RunningObservationNorm(()).update(torch.tensor([0.0, math.nan, 1.0, math.nan]))


@pytest.mark.parametrize(
    ("recipe", "field", "value", "match"),
    [
        ("ppo", "total_frames", 0, "--total-frames must be >= 1"),
        ("ppo", "eval_episodes", 0, "--eval-episodes must be >= 1"),
        ("sac", "num_envs", 0, "--num-envs must be >= 1"),
        ("sac", "actor_lr", -1e-3, "--actor-lr .* must be finite and > 0"),
        ("ppo", "lr", math.nan, "--lr .* must be finite and > 0"),
        ("dqn", "gamma", 1.5, r"--gamma must lie in \[0, 1\]"),
        ("ppo", "lmbda", -0.1, r"--lmbda must lie in \[0, 1\]"),
        ("td3", "hidden_sizes", (0, 64), "--hidden-sizes: every width must be >= 1"),
        ("ppo", "step_timeout", 0.0, "--step-timeout must be finite and > 0"),
        ("ppo", "max_grad_norm", -1.0, r"--max-grad-norm must be > 0 \(inf"),  # ascent
        ("dqn", "max_grad_norm", math.nan, r"--max-grad-norm must be > 0 \(inf"),
        ("sac", "alpha_init", math.nan, "--alpha-init must be finite and > 0"),
        ("a2c", "entropy_coeff", -0.01, "--entropy-coeff .* must be finite and >= 0"),
        ("ppo", "critic_coeff", math.nan, "--critic-coeff .* must be finite and >= 0"),
        ("td3", "seed", -1, "--seed must be >= 0"),
    ],
)
def test_recipe_configs_check_every_field_before_anything_runs(recipe, field, value, match):
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "recipes"))
    module = importlib.import_module(recipe)
    with pytest.raises(ValueError, match=match):
        configure(module.Config, **{field: value})


@pytest.mark.parametrize(
    ("recipe", "env_id", "match"),
    [
        ("dqn", "Pendulum-v1", "needs a discrete action space; Pendulum-v1 has Bounded"),
        ("sac", "CartPole-v1", r"needs a continuous \(Box\) action space; CartPole-v1 has"),
    ],
)
def test_a_recipe_given_an_action_space_it_cannot_handle_says_which_it_needs(
    recipe, env_id, match, tmp_path
):
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "recipes"))
    module = importlib.import_module(recipe)
    cfg = configure(
        module.Config, env_id=env_id, log_dir=str(tmp_path), progress=False, tensorboard=False
    )
    with pytest.raises(ValueError, match=match):
        module.main(cfg)


def test_a_badly_shaped_gamma_tensor_is_reported_under_its_own_name():
    from tensordict import TensorDict

    B, T = 2, 5
    flag = torch.zeros(B, T, 1, dtype=torch.bool)
    td = TensorDict(
        {
            "state_value": torch.zeros(B, T, 1),
            ("next", "state_value"): torch.zeros(B, T, 1),
            ("next", "reward"): torch.zeros(B, T, 1),
            ("next", "done"): flag,
            ("next", "terminated"): flag.clone(),
            ("next", "truncated"): flag.clone(),
        },
        [B, T],
    )
    gae_module = GAE(gamma=torch.full((3, 7), 0.9), lmbda=0.9, value_network=None)
    with pytest.raises(ValueError, match=r"GAE: key 'gamma': shape \(3, 7\)"):
        gae_module(td)


def test_counts_that_are_not_whole_numbers_are_named():
    from tensordict import TensorDict

    from tdrl.collectors import Collector
    from tdrl.envs import make_vec_env

    with pytest.raises(ValueError, match=r"num_envs must be an int >= 1, got 2.5"):
        make_vec_env("CartPole-v1", 2.5)
    for seed in ("0", 1.5, -1, True):  # gymnasium took "0" and failed at the first reset
        with pytest.raises(ValueError, match=rf"seed must be an int >= 0 or None, got {seed!r}"):
            make_vec_env("CartPole-v1", 2, seed=seed)
    with make_vec_env("CartPole-v1", 2, seed=0) as env:
        for seed in ("0", -1):
            with pytest.raises(ValueError, match=r"seed must be an int >= 0 or None"):
                env.reset(seed=seed)
            with pytest.raises(ValueError, match=r"seed must be an int >= 0 or None"):
                env.reseed(seed)
        assert env.reset(seed=np.int64(3))["observation"].shape == (2, 4)  # numpy ints pass
        with pytest.raises(TypeError, match=r"frames_per_batch must be an int, got 2.0"):
            Collector(env, None, 2.0)
        with pytest.raises(TypeError, match=r"total_frames must be an int, got 64.5"):
            Collector(env, None, 8, 64.5)
        assert Collector(env, None, np.int64(8)).frames_per_batch == 8  # numpy ints are whole
    with pytest.raises(TypeError, match=r"env must be a vector env .* got NoneType"):
        Collector(None, None, 8)
    buffer = ReplayBuffer(10)
    buffer.extend(TensorDict({"observation": torch.zeros(4, 3)}, batch_size=[4]))
    with pytest.raises(ValueError, match=r"batch_size must be an int >= 1, got 2.5"):
        buffer.sample(2.5)


@pytest.mark.parametrize("bad", ["foo", "nan", float("inf"), None])
def test_the_sac_losses_refuse_a_target_entropy_that_is_not_a_number(bad):
    # A loss built in the user's own loop: before, "foo" passed the constructor and failed
    # inside the first alpha update with float()'s message.
    from torchrl.data import Bounded, Composite, Unbounded

    from tdrl.modules import (
        CategoricalActor,
        EnsembleCritic,
        EnsembleMLP,
        mlp,
        q_ensemble,
        tanh_gaussian_actor,
    )
    from tdrl.objectives import DiscreteSACLoss, SACLoss

    obs, box = Composite(observation=Unbounded(3)), Bounded(-1.0, 1.0, (1,))
    actor, critic = tanh_gaussian_actor(obs, box, [8]), q_ensemble(obs, box, [8])
    discrete_actor = CategoricalActor(mlp(3, 2, (8,)))
    discrete_critic = EnsembleCritic(
        EnsembleMLP(3, 2, (8,), num_members=2), in_keys=("observation",), out_key="action_value"
    )
    match = rf"target_entropy must be 'auto' or a finite number, got {bad!r}"
    with pytest.raises(ValueError, match=match):
        SACLoss(actor, critic, target_entropy=bad)
    with pytest.raises(ValueError, match=match):
        DiscreteSACLoss(discrete_actor, discrete_critic, num_actions=2, target_entropy=bad)
    assert SACLoss(actor, critic, target_entropy="-2.5").target_entropy() == -2.5
    loss = DiscreteSACLoss(discrete_actor, discrete_critic, num_actions=2, target_entropy="0.5")
    assert loss.target_entropy(2) == 0.5
