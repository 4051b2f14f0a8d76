"""The multi-agent collector: a policy and a multi-agent vector env -> ``[num_envs, T]`` rollouts
in TorchRL's multi-agent layout (``tdrl.envs.multiagent``); ``tdrl.collectors.evaluate`` evaluates
on the same envs."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl import keys
from tdrl.collectors.device import DeviceCollector
from tdrl.envs.multiagent import GROUP, MultiAgentVecEnv

ACTION = (GROUP, keys.ACTION)
REWARD = (GROUP, keys.REWARD)  # under "next"


class MultiAgentCollector(DeviceCollector):
    """Iterates over ``[num_envs, T]`` rollouts of ``policy`` in a multi-agent ``env``.

    Each step holds the env's observation entries (``("agents", "observation")``,
    ``("agents", "mask")``, ``"state"``), what the policy wrote (``("agents", "action")``,
    ``("agents", "action_log_prob")``, ``("agents", "logits")``...), ``"next"`` as the env returned
    it (real final observations, per-agent rewards and flags, the episode's flags), the episode's
    root flags (all False) and ``("collector", "traj_ids")``. ``frames`` counts env steps
    (``num_envs`` a step, whatever the number of agents), as TorchRL's collectors do.

    After each batch, ``episodes`` holds the episodes that ended in it: ``"episode_return"`` (the
    mean over the agents of each agent's undiscounted return, as BenchMARL reports it),
    ``"episode_length"``, ``"traj_ids"``.

    ``state_dict`` keeps the counters, the running episodes' statistics and the random-action
    generator, not the simulators: ``load_state_dict`` returns False and the next batch starts
    fresh episodes from a seed derived from the frame count (reproducible, not identical).

    Args:
        env: a :class:`tdrl.envs.multiagent.MultiAgentVecEnv`.
        policy: a TensorDictModule that writes ``("agents", "action")``; ``None``: uniform random.
        frames_per_batch: env steps per batch, a multiple of ``env.num_envs``.
        total_frames: stop after this many frames; -1: never.
        init_random_frames: whole batches of random actions first.
        deterministic: run the policy under ``InteractionType.DETERMINISTIC``.
        seed: seed of the random actions; default: the env's seed.
        device: where the policy runs (observations are moved there; actions back to the env).
        on_nonfinite: ``"raise"`` (default): a NaN or infinite per-agent observation or reward
            in a batch raises an error naming the key, env and step; ``"ignore"``: no check.
    """

    action_key = ACTION
    finite_keys = (
        (GROUP, keys.OBSERVATION),
        (keys.NEXT, GROUP, keys.OBSERVATION),
        (keys.NEXT, *REWARD),
    )

    def _check_env(self, env: Any) -> None:
        if not isinstance(env, MultiAgentVecEnv):
            raise TypeError(
                f"MultiAgentCollector: env must be a MultiAgentVecEnv (tdrl.envs.make_vec_env with "
                f"a vmas/, mpe2/ or pettingzoo/ id), got {type(env).__name__}"
            )

    def _reward(self, nxt: TensorDictBase) -> torch.Tensor:
        """The mean over the agents of their rewards (BenchMARL's episode return)."""
        return nxt.get(REWARD).squeeze(-1).mean(-1)
