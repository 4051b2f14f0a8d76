"""Random network distillation (Burda et al. 2018, arXiv 1810.12894): an exploration bonus from
how badly a trained network predicts a fixed random one on the states reached."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl import keys as K
from tdrl.keyed import require
from tdrl.modules.normalization import RewardScaling, RunningObservationNorm
from tdrl.objectives.bonus import IntrinsicBonus, write_intrinsic_reward
from tdrl.ops.standardize import distance


class RNDLoss(IntrinsicBonus):
    """RND's intrinsic reward and its predictor's loss.

    With ``f`` a fixed, randomly initialised target network, ``f^`` the predictor, and ``x`` a
    next observation normalized by running statistics and clipped::

        x      = clip((s' - mu) / sigma, -c, c)
        e(s')  = mean_j (f^(x)_j - f(x)_j)^2               the distillation error
        R_t    = gamma R_{t-1} + e_t                        per env, across episode ends
        r_int  = e(s') / std(R)                             written to ("next", "intrinsic_reward")
        loss_rnd = mean of e(s') over a random update_proportion of the minibatch

    as CleanRL's ``ppo_rnd_envpool.py`` (its error is a sum over features / 2; the mean here only
    rescales ``e``, which the division by ``std(R)`` undoes). :meth:`intrinsic_reward` runs on
    each whole ``[num_envs, T]`` rollout, before the estimators: it scores the rollout with the
    statistics so far, folds the rollout's intrinsic returns into ``std(R)`` and divides by it,
    then folds the rollout's observations into ``mu``, ``sigma`` (CleanRL's order). The first
    rollout sets ``mu``, ``sigma`` before it is scored (CleanRL warms them up on random-policy
    steps before training). It also
    writes ``("next", "intrinsic_done" | "intrinsic_terminated" | "intrinsic_truncated")``, all
    False: an estimator with its keys renamed to these (``tdrl.keys.INTRINSIC_*``) computes the
    non-episodic intrinsic return, while the extrinsic one is cut at episode ends as always.
    ``forward`` is the loss (``loss_rnd``), on minibatches. The target's parameters never
    change: they do not require gradients, and no loss term reaches them.

    ``first_visit=True`` keeps ``e(s')`` only where ``s'`` is new to its episode, 0 where the
    episode has already reached that observation (:class:`~tdrl.objectives.bonus.IntrinsicBonus`).

    Args:
        target: the fixed random network, observations to ``[*B, k]``.
        predictor: the trained network, observations to ``[*B, k]``.
        observation_shape: the observation's shape (its statistics' shape).
        observation_key: the observation entry (read under ``"next"``).
        gamma: the intrinsic return's discount (the paper: 0.99).
        observation_clip: ``c`` (the paper: 5).
        update_proportion: the fraction of a minibatch the predictor learns from (CleanRL: 0.25,
            for 32 envs; 1 with few envs).
        first_visit: reward only an episode's first visit of each observation (see above).

    Shapes:
        rollouts ``[N, T]``, minibatches ``[B]``; the intrinsic reward ``[*, 1]``.
    """

    def __init__(
        self,
        target: nn.Module,
        predictor: nn.Module,
        observation_shape: Sequence[int],
        *,
        observation_key: NestedKey = K.OBSERVATION,
        gamma: float = 0.99,
        observation_clip: float = 5.0,
        update_proportion: float = 0.25,
        first_visit: bool = False,
    ) -> None:
        super().__init__(first_visit)
        if not 0.0 < update_proportion <= 1.0:
            raise ValueError(
                f"RNDLoss: update_proportion must be in (0, 1], got {update_proportion}"
            )
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"RNDLoss: gamma must be in [0, 1], got {gamma}")
        self.target = target.requires_grad_(False)
        self.predictor = predictor
        self.observation_shape = tuple(observation_shape)
        self.observation_key = observation_key
        self.update_proportion = update_proportion
        self.obs_norm = RunningObservationNorm(self.observation_shape, clip=observation_clip)
        self.reward_scaling = RewardScaling(
            gamma, in_key=K.NEXT_INTRINSIC_REWARD, done_key=(K.NEXT, K.INTRINSIC_DONE), clip=None
        )
        self.in_keys = [(K.NEXT, observation_key)]
        self.out_keys = [K.LOSS_RND]
        self._check_networks()

    @torch.no_grad()
    def _check_networks(self) -> None:
        """Both networks take a batch of observations of the given shape to outputs of one
        shape; else an error naming the network and the shapes."""
        probe = self.obs_norm.normalize(torch.zeros(2, *self.observation_shape))
        outputs = {}
        for name in ("target", "predictor"):
            try:
                outputs[name] = getattr(self, name)(probe)
            except (RuntimeError, ValueError) as error:
                raise ValueError(
                    f"RNDLoss: the {name} network fails on observations of shape "
                    f"{self.observation_shape} (key {(K.NEXT, self.observation_key)!r}): {error}"
                ) from error
        if outputs["target"].shape != outputs["predictor"].shape:
            raise ValueError(
                f"RNDLoss: the predictor outputs {tuple(outputs['predictor'].shape[1:])} features, "
                f"the target {tuple(outputs['target'].shape[1:])}"
            )

    def _next_observation(self, td: TensorDictBase) -> torch.Tensor:
        obs = require(td, (K.NEXT, self.observation_key), "RNDLoss")
        n = len(self.observation_shape)
        if tuple(obs.shape[obs.dim() - n :]) != self.observation_shape:
            raise ValueError(
                f"RNDLoss: key {(K.NEXT, self.observation_key)!r} has shape {tuple(obs.shape)}, "
                f"whose trailing dims differ from the predictor's observation shape "
                f"{self.observation_shape}"
            )
        return obs

    def error(self, observation: torch.Tensor) -> torch.Tensor:
        """``e(s')`` ``[*B, 1]`` of raw observations ``[*B, *obs]`` (no statistics move)."""
        x = self.obs_norm.normalize(observation)
        with torch.no_grad():
            target = self.target(x)
        return distance(self.predictor(x), target, "l2").mean(-1, keepdim=True)

    @torch.no_grad()
    def intrinsic_reward(self, rollout: TensorDictBase) -> TensorDictBase:
        """Write the intrinsic reward and the all-False intrinsic episode flags into a whole
        ``[num_envs, T]`` rollout; returns it."""
        if rollout.batch_dims != 2:
            raise ValueError(
                f"RNDLoss.intrinsic_reward: expects a [num_envs, T] rollout, got batch size "
                f"{tuple(rollout.batch_size)}"
            )
        obs = self._next_observation(rollout)
        flat = obs.reshape(-1, *self.observation_shape)
        # the first rollout sets the statistics before it is scored: scored on the initial
        # (0, 1) ones, its inflated errors would hold std(R) high for much of the run
        first = float(self.obs_norm.count) < 1
        if first:
            self.obs_norm.update(flat)
        error = self.error(obs)
        if self.first_visit:
            error = error * self.first_visits(rollout, obs).to(error.dtype)
        write_intrinsic_reward(rollout, error, self.reward_scaling)
        if not first:
            self.obs_norm.update(flat)
        return rollout

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        e = self.error(self._next_observation(tensordict)).reshape(-1)
        keep = torch.rand(e.shape, device=e.device) < self.update_proportion
        loss = (e * keep).sum() / keep.sum().clamp(min=1)
        return TensorDict({K.LOSS_RND: loss}, batch_size=[])


class IntrinsicValueLoss(TensorDictModuleBase):
    """The intrinsic critic's regression, ``coeff * mean (V_int(s) - target_int)^2``, reading
    ``"intrinsic_value_target"``; the critic writes ``"intrinsic_state_value"``
    (``ValueCritic(net, out_key=tdrl.keys.INTRINSIC_VALUE)``).

    Args:
        critic: the intrinsic critic.
        coeff: the weight of the term (CleanRL's RND: 0.5, as its extrinsic value loss).
    """

    def __init__(self, critic: TensorDictModuleBase, *, coeff: float = 0.5) -> None:
        super().__init__()
        if not (math.isfinite(coeff) and coeff >= 0):
            raise ValueError(f"IntrinsicValueLoss: coeff must be a finite number >= 0, got {coeff}")
        self.critic = critic
        self.coeff = coeff
        self.in_keys = [*critic.in_keys, K.INTRINSIC_VALUE_TARGET]
        self.out_keys = [K.LOSS_INTRINSIC_VALUE]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        target = require(tensordict, K.INTRINSIC_VALUE_TARGET, "IntrinsicValueLoss")
        value = self.critic(tensordict.select(*self.critic.in_keys)).get(self.critic.out_keys[0])
        loss = self.coeff * distance(value, target.reshape(value.shape), "l2").mean()
        return TensorDict({K.LOSS_INTRINSIC_VALUE: loss}, batch_size=[])
