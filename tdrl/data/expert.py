"""An expert's (observation, action) pairs, as an adversarial-imitation discriminator sees them."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Composite, TensorSpec

from tdrl import keys
from tdrl.modules import RunningObservationNorm, action_bounds, flat_dims


class ExpertPairs(nn.Module):
    """Demonstrations ``[n, obs_dim]``, ``[n, action_dim]`` for a GAIL-style discriminator.

    Actions are clipped to the action box ``[low, high]``: a dataset may hold a policy's
    unclipped samples, and the env executed the clipped ones. :meth:`prepare` gives a policy's
    pairs the same treatment, so that "out of the box" alone cannot tell the two apart.

    With ``standardize`` (the default), pairs are standardized with the demonstrations' own mean
    and std, folded in once here and fixed after (``state_dict`` holds them): a running norm over
    the policy's pairs would move the discriminator's inputs as the policy moves. A gradient
    penalty on standardized pairs bounds the discriminator's slope in standardized units.
    """

    observation: torch.Tensor
    action: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        observation: torch.Tensor,
        action: torch.Tensor,
        low: torch.Tensor,
        high: torch.Tensor,
        *,
        standardize: bool = True,
    ) -> None:
        super().__init__()
        if observation.dim() != 2 or action.dim() != 2 or len(observation) != len(action):
            raise ValueError(
                f"expert pairs must be [n, obs_dim] and [n, action_dim], got "
                f"{tuple(observation.shape)} and {tuple(action.shape)}"
            )
        self.obs_dim, self.action_dim = observation.shape[1], action.shape[1]
        self.standardize = standardize
        self.register_buffer("low", low.clone(), persistent=False)
        self.register_buffer("high", high.clone(), persistent=False)
        self.norm = RunningObservationNorm(self.obs_dim + self.action_dim)
        action = self._clip(action)
        if standardize:
            self.norm.update(torch.cat([observation, action], dim=-1))
        observation, action = self.prepare(observation, action)
        self.register_buffer("observation", observation, persistent=False)
        self.register_buffer("action", action, persistent=False)

    @classmethod
    def from_minari(
        cls,
        dataset: str,
        episodes: int,
        observation_spec: Composite,
        action_spec: TensorSpec,
        *,
        env_id: str = "the env",
        standardize: bool = True,
    ) -> ExpertPairs:
        """The first ``episodes`` episodes of a Minari dataset, checked against the env's specs."""
        from tdrl.data.datasets import load_minari

        if episodes < 1:
            raise ValueError(f"expert_episodes must be >= 1, got {episodes}")
        data = load_minari(dataset).storage[:, 0]  # one stream, episode after episode
        ids = data[keys.COLLECTOR_TRAJ_IDS]
        first = torch.unique_consecutive(ids)[:episodes]
        if len(first) < episodes:
            raise ValueError(
                f"dataset {dataset!r} holds {len(first)} episodes, {episodes} asked for"
            )
        keep = torch.isin(ids, first)
        observation, action = data[keys.OBSERVATION][keep], data[keys.ACTION][keep]
        obs_dim, action_dim = flat_dims(observation_spec, action_spec)
        if observation.shape[1:] != (obs_dim,) or action.shape[1:] != (action_dim,):
            raise ValueError(
                f"dataset {dataset!r}: pairs of shape {tuple(observation.shape[1:])} and "
                f"{tuple(action.shape[1:])} do not fit {env_id}'s ({obs_dim},) and ({action_dim},)"
            )
        low, high = action_bounds(action_spec)
        return cls(observation, action, low, high, standardize=standardize)

    def _clip(self, action: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(action, self.high), self.low)

    def prepare(
        self, observation: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A policy's pairs ``[*B, obs_dim]``, ``[*B, action_dim]`` as the discriminator sees the
        expert's: actions clipped to the box, then standardized if configured."""
        action = self._clip(action)
        if not self.standardize:
            return observation, action
        pair = self.norm.normalize(torch.cat([observation, action], dim=-1))
        return pair[..., : self.obs_dim], pair[..., self.obs_dim :]

    def draw(self, observation: torch.Tensor, action: torch.Tensor, n: int) -> TensorDict:
        """A discriminator batch: ``n`` expert pairs (with replacement) under ``"observation"``
        and ``"action"``, and ``n`` of the given prepared policy pairs (without replacement, at
        most all of them) under ``("collector", "observation")`` and ``("collector", "action")``.
        torch's global generator draws: checkpoints hold its state, so a resume draws the same."""
        observation = observation.reshape(-1, self.obs_dim)
        action = action.reshape(-1, self.action_dim)
        n = min(n, observation.shape[0])
        e = torch.randint(self.observation.shape[0], (n,)).to(self.observation.device)
        p = torch.randperm(observation.shape[0])[:n].to(observation.device)
        return TensorDict(
            {
                keys.OBSERVATION: self.observation[e],
                keys.ACTION: self.action[e],
                keys.COLLECTOR_OBSERVATION: observation[p],
                keys.COLLECTOR_ACTION: action[p],
            },
            batch_size=[],
        )
