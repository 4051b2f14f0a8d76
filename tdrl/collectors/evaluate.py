"""Policy evaluation: exactly n episodes on a vector env."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from tensordict.nn import InteractionType, set_interaction_type

from tdrl import keys
from tdrl.collectors._policy import Policy, PolicyStep
from tdrl.envs import VecEnv
from tdrl.envs.multiagent import GROUP, MultiAgentVecEnv
from tdrl.keyed import check_counts


def evaluate(
    env: VecEnv,
    policy: Policy | None,
    n_episodes: int,
    deterministic: bool = True,
    *,
    seed: int | None = None,
) -> dict[str, float]:
    """Runs ``policy`` until exactly ``n_episodes`` episodes have ended; returns their statistics.

    The env is reset first (with ``seed``, or continuing its random streams), so give evaluation
    its own env rather than the one a collector is using. The policy's random draws (a sampled
    evaluation, ``deterministic=False``) come from torch's global generators (CPU, and CUDA's
    once in use) seeded with ``seed`` inside a fork of them: the same seed gives the same
    actions to the same policy, and torch's streams are where they were before (a run trains
    the same whichever way it evaluates; without ``seed`` the draws continue the global streams
    in the fork). Env i
    contributes its first ``n_episodes // num_envs`` episodes, plus one for
    ``i < n_episodes % num_envs``; extra episodes are ignored, so short episodes are not
    over-represented (Stable-Baselines3's ``evaluate_policy`` does the same).

    Args:
        env: a ``VecEnv``.
        policy: a TensorDictModule that writes ``"action"``; ``None`` for uniform random actions.
        n_episodes: number of episodes to average over (>= 1).
        deterministic: run the policy under ``InteractionType.DETERMINISTIC`` (else ``RANDOM``).
        seed: seed of the reset (and of the random actions when ``policy`` is None).

    Returns:
        ``{"return_mean", "return_std", "length_mean", "length_std", "n_episodes"}``; std is the
        population standard deviation (ddof=0).

    Shapes:
        scalars.
    """
    if isinstance(env, MultiAgentVecEnv):  # the agents' mean return
        return evaluate_multiagent(env, policy, n_episodes, deterministic, seed=seed)
    check_counts("evaluate", n_episodes=n_episodes)
    n = env.num_envs
    quota = np.full(n, n_episodes // n, dtype=np.int64)
    quota[: n_episodes % n] += 1
    returns: list[float] = []
    lengths: list[int] = []
    runner = PolicyStep(env, policy)
    generator = torch.Generator()
    if seed is not None:
        generator.manual_seed(seed)
    else:
        generator.seed()
    episode_return = np.zeros(n)
    episode_length = np.zeros(n, dtype=np.int64)
    mode = InteractionType.DETERMINISTIC if deterministic else InteractionType.RANDOM
    with torch.no_grad(), set_interaction_type(mode), _own_random_stream(seed):
        runner.set_observation(env.reset_arrays(seed), reset=True)
        while quota.any():
            if policy is not None:
                action = runner()[0]
            else:  # uniform over the allowed actions where the env masks them
                leaf = env.action_mask_leaf
                mask = None if leaf is None else runner.observation_np[leaf]
                action = env.rand_action(generator, mask=mask)
            out = env.step_arrays(action.numpy())
            runner.set_observation(out.observation)
            runner.set_episode_starts(out.final_observation)
            episode_return += out.reward
            episode_length += 1
            for i in out.final_observation:
                if quota[i] > 0:
                    quota[i] -= 1
                    returns.append(float(episode_return[i]))
                    lengths.append(int(episode_length[i]))
                episode_return[i] = 0.0
                episode_length[i] = 0
    return _summary(returns, lengths)


@contextlib.contextmanager
def _own_random_stream(seed: int | None) -> Iterator[None]:
    """torch's global CPU generator (and every CUDA device's, once CUDA is in use) forked for
    the block, and seeded with ``seed`` when one is given: draws inside leave the caller's
    streams where they were. (NumPy's and Python's generators are not forked: tdrl's policies
    do not draw from them.)"""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.random.default_generator.manual_seed(seed)
            if devices:
                torch.cuda.manual_seed_all(seed)
        yield


def evaluate_multiagent(
    env: MultiAgentVecEnv,
    policy: Any,
    n_episodes: int,
    deterministic: bool = True,
    *,
    seed: int | None = None,
) -> dict[str, float]:
    """Exactly ``n_episodes`` episodes (env i plays its share, and the policy draws from its own
    random stream, as ``tdrl.collectors.evaluate``); returns the mean over agents of each agent's
    return, averaged over the episodes."""
    check_counts("evaluate", n_episodes=n_episodes)
    n = env.num_envs
    quota = np.full(n, n_episodes // n, dtype=np.int64)
    quota[: n_episodes % n] += 1
    generator = torch.Generator()
    generator.manual_seed(seed if seed is not None else 0)
    returns: list[float] = []
    lengths: list[int] = []
    episode_return = torch.zeros(n, dtype=torch.float64)
    episode_length = torch.zeros(n, dtype=torch.int64)
    mode = InteractionType.DETERMINISTIC if deterministic else InteractionType.RANDOM
    device = _device(policy)
    with torch.no_grad(), set_interaction_type(mode), _own_random_stream(seed):
        current = env.reset(seed)
        while quota.any():
            if policy is None:
                action = env.rand_action(generator)
            else:
                action = policy(current.to(device)).get((GROUP, keys.ACTION)).cpu()
            nxt, current = env.step(action)
            episode_return += nxt.get((GROUP, keys.REWARD)).squeeze(-1).double().mean(-1)
            episode_length += 1
            for i in nxt.get(keys.DONE).squeeze(-1).nonzero().flatten().tolist():
                if quota[i] > 0:
                    quota[i] -= 1
                    returns.append(float(episode_return[i]))
                    lengths.append(int(episode_length[i]))
                episode_return[i], episode_length[i] = 0.0, 0
    return _summary(returns, lengths)


def _device(policy: Any) -> torch.device:
    params = next(iter(policy.parameters()), None) if hasattr(policy, "parameters") else None
    return params.device if params is not None else torch.device("cpu")


def _summary(returns: list[float], lengths: list[int]) -> dict[str, float]:
    return {
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "length_std": float(np.std(lengths)),
        "n_episodes": float(len(returns)),
    }
