"""Networks built from an env's specs: the on-policy actor-critic pair, PyTorch's default init.

Observation normalization sits inside both networks (:class:`NormalizedInput` in front of each
MLP) rather than in the rollout: the batch keeps the raw observations, the actor, the critic and
the bootstrap values ``V(s_{t+1})`` all see the same transform, and the statistics are updated
between batches (``obs_norm.update(batch["observation"])`` after the updates), so within a batch
the policy that collected and the policy being trained normalize identically (the PPO ratio is
exactly 1 at the first minibatch). The statistics are buffers of both networks, so they travel
with their ``state_dict`` into checkpoints. Tianshou's MuJoCo examples and SB3's ``VecNormalize``
update per step instead; the difference is a one-batch lag of the statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.data import Categorical as CategoricalSpec
from torchrl.data import Composite, TensorSpec

from tdrl import keys
from tdrl.modules.actors import CategoricalActor, GaussianActor
from tdrl.modules.critics import ValueCritic
from tdrl.modules.mlp import POLICY_GAIN, VALUE_GAIN, mlp
from tdrl.modules.normalization import RunningObservationNorm

__all__ = ["NormalizedInput", "actor_critic", "torch_default_init_"]


def torch_default_init_(module: nn.Module) -> nn.Module:
    """Re-initialise every ``nn.Linear`` of ``module`` with PyTorch's default (Kaiming-uniform)
    init; returns ``module``.

    ``tdrl.modules.mlp`` initialises orthogonally (the on-policy convention of Andrychowicz et
    al. 2020, arXiv 2006.05990). The off-policy baselines (SB3, Tianshou, CleanRL) keep PyTorch's
    default, and their tuned settings assume it: DQN on CartPole-v1 with rl-baselines3-zoo's
    settings reached 500 at 50k steps with the default init and stayed near 100 with the
    orthogonal one (seed 0, measured here).
    """
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()
    return module


class NormalizedInput(nn.Module):
    """``obs_norm.normalize(x)`` as a layer (no statistics update: call ``obs_norm.update``).

    Shapes:
        ``[*B, *obs_shape] -> [*B, *obs_shape]``.
    """

    def __init__(self, obs_norm: RunningObservationNorm) -> None:
        super().__init__()
        self.obs_norm = obs_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.obs_norm.normalize(x)


def actor_critic(
    observation_spec: Composite,
    action_spec: TensorSpec,
    *,
    hidden_sizes: Sequence[int] = (64, 64),
    init_log_std: float = -0.5,
    normalize_observations: bool = True,
    activation: type[nn.Module] = nn.Tanh,
) -> tuple[TensorDictModuleBase, ValueCritic, RunningObservationNorm | None]:
    """A policy and a value network for an env's specs (the Tianshou/CleanRL MuJoCo setup):
    ``actor_critic(env.observation_spec, env.action_spec)``; TorchRL env specs work too.

    Continuous actions: ``GaussianActor`` (state-independent log-std, initial ``init_log_std``,
    Tianshou's -0.5) rescaled to the env's bounds; discrete actions: ``CategoricalActor``. Both
    networks are ``hidden_sizes`` MLPs with orthogonal init (policy head gain 0.01, value head 1).

    Returns:
        ``(actor, critic, obs_norm)``; ``obs_norm`` is ``None`` without normalization.

    Shapes:
        observation ``[*B, obs_dim]`` (one flat ``"observation"`` entry; the specs may carry
        leading batch dims, e.g. ``[num_envs]``).
    """
    entries = list(observation_spec.keys(True, True))
    leaf = observation_spec.get(keys.OBSERVATION, None) if entries == [keys.OBSERVATION] else None
    if leaf is None or len(leaf.shape) != len(observation_spec.shape) + 1:
        raise ValueError(
            f"actor_critic needs one flat {keys.OBSERVATION!r} entry, got {entries} "
            f"({observation_spec}); build the networks by hand for dict or image observations"
        )
    obs_dim = int(leaf.shape[-1])
    obs_norm = RunningObservationNorm(obs_dim) if normalize_observations else None

    def trunk(out_features: int, gain: float) -> nn.Module:
        net = mlp(obs_dim, out_features, hidden_sizes, activation=activation, output_gain=gain)
        return net if obs_norm is None else nn.Sequential(NormalizedInput(obs_norm), net)

    spec = action_spec
    actor: TensorDictModuleBase
    if isinstance(spec, CategoricalSpec):
        actor = CategoricalActor(trunk(int(spec.space.n), POLICY_GAIN))
    else:
        action_dim = int(spec.shape[-1])
        actor = GaussianActor(
            trunk(action_dim, POLICY_GAIN),
            action_dim,
            init_log_std=init_log_std,
            action_low=spec.space.low.reshape(-1, action_dim)[0],
            action_high=spec.space.high.reshape(-1, action_dim)[0],
        )
    critic = ValueCritic(trunk(1, VALUE_GAIN))
    return actor, critic, obs_norm
