"""Running observation normalization and reward scaling, with statistics saved in ``state_dict``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.keyed import next_key
from tdrl.keys import NEXT_DONE, NEXT_REWARD, OBSERVATION


class RunningObservationNorm(TensorDictModuleBase):
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` with running mean and variance.

    The statistics are buffers (float64, saved with ``state_dict`` and checkpoints) and change only
    while ``update_stats`` is True: every ``forward`` then first folds the batch of the first
    in-key into them with the parallel-variance update of Chan et al. (1979), which equals
    Welford's for one sample and is exact for any split of the data. The count starts at
    ``epsilon`` as in SB3's ``RunningMeanStd``. Every in-key must be present. Typical use: put
    it before the actor in the collection policy with ``update_stats = True`` (a TorchRL
    collector then stores the normalized observations the policy saw, as SB3's
    ``VecNormalize`` does, and the env's raw ``("next", "observation")``; tdrl's ``Collector``
    stores the env's raw observation and gives the policy each step's new one), give the
    bootstrapped values the same transform by applying :meth:`normalize` to the stored batch's
    raw next observations (a policy step has no ``("next", ...)`` entry, so it is no in-key of
    the policy's module), and set ``update_stats = False`` for evaluation. tdrl's recipes put it
    inside the networks instead (``NormalizedInput``), so stored data stays raw.

    Args:
        shape: observation shape (without batch dims).
        in_keys: keys to normalize; statistics are updated from ``in_keys[0]`` only.
        out_keys: where to write the results; default ``in_keys`` (overwrite).
        clip: bound of the normalized values (SB3 and Tianshou use 10); ``None`` for no clip.
        epsilon: added to the variance, and the initial count.

    Shapes:
        each in-key ``[*B, *shape]`` -> same shape.
    """

    def __init__(
        self,
        shape: int | Sequence[int],
        *,
        in_keys: Sequence[NestedKey] = (OBSERVATION,),
        out_keys: Sequence[NestedKey] | None = None,
        clip: float | None = 10.0,
        epsilon: float = 1e-8,
    ) -> None:
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.in_keys = list(in_keys)
        self.out_keys = list(in_keys if out_keys is None else out_keys)
        if len(self.out_keys) != len(self.in_keys):
            raise ValueError(f"got {len(self.in_keys)} in_keys but {len(self.out_keys)} out_keys")
        self.clip = clip
        self.epsilon = epsilon
        self.update_stats = False
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``[*B, *shape]`` into the running mean and (population) variance."""
        if x.shape[x.dim() - self.mean.dim() :] != self.mean.shape:
            raise ValueError(
                f"RunningObservationNorm: expected trailing shape {tuple(self.mean.shape)}, "
                f"got {tuple(x.shape)}"
            )
        flat = x.reshape(-1, *self.mean.shape).to(torch.float64)
        batch_count = flat.shape[0]
        if batch_count == 0:
            return
        if not bool(torch.isfinite(flat).all()):
            # One NaN would make the statistics NaN for the rest of the run: refuse it.
            bad = int((~torch.isfinite(flat)).reshape(batch_count, -1).any(-1).sum())
            raise ValueError(
                f"RunningObservationNorm.update: {bad} of {batch_count} observations have "
                "NaN or infinite entries; the statistics were left unchanged"
            )
        batch_mean = flat.mean(0)
        batch_var = flat.var(0, unbiased=False)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count
        m2 += delta.pow(2) * self.count * batch_count / total
        self.mean += delta * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    @property
    def std(self) -> torch.Tensor:
        """The current divisor ``sqrt(var + eps)`` (float64, the statistics' shape)."""
        return (self.var + self.epsilon).sqrt()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize with the current statistics (no update); keeps ``x``'s dtype when it is
        floating (integer observations, e.g. uint8, come out in the default float dtype)."""
        if not x.is_floating_point():  # the statistics would be truncated to integers
            x = x.to(torch.get_default_dtype())
        mean = self.mean.to(x.dtype)
        std = self.std.to(x.dtype)
        out = (x - mean) / std
        return out if self.clip is None else out.clamp(-self.clip, self.clip)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        values = []
        for key in self.in_keys:
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(f"RunningObservationNorm: the input has no {key!r} entry")
            values.append(value)
        if self.update_stats:
            self.update(values[0])
        for key, value in zip(self.out_keys, values, strict=True):
            tensordict.set(key, self.normalize(value))
        return tensordict


class RewardScaling(TensorDictModuleBase):
    """Divide rewards by the running standard deviation of the discounted return.

    The reward scaling of PPO implementations (Engstrom et al. 2020, arXiv 2005.12729, sec. 3;
    SB3's ``VecNormalize(norm_reward=True)``, CleanRL's ``NormalizeReward``; not Tianshou's
    ``return_scaling``, which scales the critic's targets and leaves the advantages in reward
    units): each env carries ``R <- gamma * R + r`` (reset to 0 after every episode
    end, terminated or truncated, and carried across batch cuts), the variance of ``R`` is
    tracked with :class:`RunningObservationNorm`'s exact parallel update, and the reward becomes
    ``clip(r / sqrt(var + eps), -clip, clip)`` (the mean is not subtracted, so the sign of every
    reward and the optimal policy are kept). Call it on each whole ``[num_envs, T]`` rollout
    after collection and before the estimator; it folds the rollout's returns into the statistics
    first, then scales the rollout with them. The statistics and the per-env carry are buffers,
    saved with ``state_dict`` and checkpoints. Episode returns reported by the collector stay raw.

    Args:
        gamma: discount of the tracked return (use the estimator's).
        in_key: the reward entry; ``done_key`` marks episode ends.
        out_key: where to write the scaled reward; default ``in_key`` (overwrite).
        clip: bound of the scaled reward (SB3: 10); ``None`` for no clip.
        epsilon: added to the variance.

    Shapes:
        reward ``[num_envs, T]`` or ``[num_envs, T, 1]``, done the same -> reward's shape.
    """

    def __init__(
        self,
        gamma: float = 0.99,
        *,
        in_key: NestedKey = NEXT_REWARD,
        done_key: NestedKey = NEXT_DONE,
        out_key: NestedKey | None = None,
        clip: float | None = 10.0,
        epsilon: float = 1e-8,
    ) -> None:
        super().__init__()
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"RewardScaling: gamma must lie in [0, 1], got {gamma}")
        self.gamma = gamma
        self.in_keys = [in_key, done_key]
        self.out_keys = [in_key if out_key is None else out_key]
        self.clip = clip
        self.epsilon = epsilon
        self.return_stats = RunningObservationNorm((), clip=None, epsilon=epsilon)
        # per-env discounted return, sized at the first call (or by load_state_dict)
        self.register_buffer("discounted_return", torch.zeros(0, dtype=torch.float64))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        carry = state_dict.get(prefix + "discounted_return")
        if carry is not None:
            # where this module lives, whatever device the checkpoint was mapped to
            self.discounted_return = torch.zeros_like(carry, device=self.return_stats.mean.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def std(self) -> float:
        """The current divisor ``sqrt(var + eps)``."""
        return float(self.return_stats.std)

    @torch.no_grad()
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        reward_key, done_key = self.in_keys
        reward = tensordict.get(reward_key, None)
        done = tensordict.get(done_key, None)
        if reward is None or done is None:
            missing = reward_key if reward is None else done_key
            raise KeyError(f"RewardScaling: the input has no {missing!r} entry")
        if tensordict.batch_dims != 2 or reward.dim() < 2 or reward.shape != done.shape:
            raise ValueError(
                f"RewardScaling: expects a [num_envs, T] rollout with {reward_key!r} and "
                f"{done_key!r} of one shape, got batch size {tuple(tensordict.batch_size)}, "
                f"{tuple(reward.shape)} and {tuple(done.shape)}"
            )
        num_envs, steps = reward.shape[:2]
        if self.discounted_return.numel() == 0:
            self.discounted_return = reward.new_zeros(num_envs, dtype=torch.float64)
        if self.discounted_return.shape[0] != num_envs:
            raise ValueError(
                f"RewardScaling: carries returns of {self.discounted_return.shape[0]} envs, "
                f"got a rollout of {num_envs}"
            )
        r = reward.reshape(num_envs, steps).to(torch.float64)
        keep = (~done.reshape(num_envs, steps).bool()).to(torch.float64)
        returns = torch.empty_like(r)
        carry = self.discounted_return.clone()
        for t in range(steps):  # T small vector ops per rollout; negligible next to the update
            carry = carry * self.gamma + r[:, t]
            returns[:, t] = carry
            carry = carry * keep[:, t]
        self.discounted_return.copy_(carry)
        self.return_stats.update(returns)
        scaled = reward / self.std
        if self.clip is not None:
            scaled = scaled.clamp(-self.clip, self.clip)
        tensordict.set(self.out_keys[0], scaled)
        return tensordict


class ValueTargetScaling(TensorDictModuleBase):
    """An estimator whose critic learns its targets divided by the running std of the returns.

    Tianshou's ``return_scaling`` (``ActorCriticOnPolicyAlgorithm`` in tianshou 2.0; its MuJoCo
    A2C, PPO, NPG and TRPO examples turn it on), the value normalization of OpenAI Baselines
    without the mean: the critic's outputs are read in units of ``std``, the running standard
    deviation of the estimated returns. Unlike :class:`RewardScaling`, the advantages stay in
    reward units. Each call, on a whole ``[*B, T]`` rollout:

    1. runs ``estimator`` with the critic's outputs multiplied by ``std``, so the values, the
       advantages and the value targets it computes are in reward units;
    2. divides the value target and the written values (``"state_value"`` and its ``"next"``
       twin) by that ``std``: the critic regresses on ``target / std``, and a clipped value loss
       compares it with values in the same units;
    3. folds the unscaled value targets into the statistics (the ``std`` of the next call).

    With ``preserve_outputs`` (the default), step 3 comes before step 2, as in PopArt's
    "preserving outputs precisely" (van Hasselt et al. 2016, arXiv 1602.07714): the critic's
    value head (its one ``nn.Linear`` with a single output, which must produce the value with
    nothing after it) is multiplied by ``std_old / std_new``, so the values it predicts in
    reward units do not move when the scale does, and the targets are divided by ``std_new``.
    Without it (Tianshou's exact procedure) nothing anchors the scale: a value target is mostly
    its bootstrapped ``V' * std``, so a larger ``std`` makes larger targets, whose drifting mean
    widens the running variance again, and the advantages grow with it (the A2C page has a
    measured case).

    Wrapping sets ``estimator.value_network`` to the critic with its output scaled (the critic
    itself is unchanged but for that rescaling: the loss calls it directly). The statistics are
    buffers, saved with ``state_dict`` and checkpoints.

    Args:
        estimator: one of tdrl's value estimators (GAE, TD(λ), ...) with a ``value_network``.
        epsilon: added to the variance (Tianshou: 1e-8).
        preserve_outputs: rescale the critic's value head with each change of scale; ``False``
            is Tianshou's ``return_scaling``.

    Shapes:
        as ``estimator``.
    """

    def __init__(
        self,
        estimator: TensorDictModuleBase,
        *,
        epsilon: float = 1e-8,
        preserve_outputs: bool = True,
    ) -> None:
        super().__init__()
        if type(estimator).__module__.split(".")[0] != "tdrl":
            raise TypeError(
                "ValueTargetScaling wraps tdrl's estimators (GAE, TD(lambda), ...); got "
                f"{type(estimator).__module__}.{type(estimator).__name__}, which calls its "
                "value network through its parameters"
            )
        critic = getattr(estimator, "value_network", None)
        if isinstance(critic, _ScaledOutput):
            raise ValueError("ValueTargetScaling: the estimator is already wrapped by one")
        if critic is None:
            raise ValueError(
                "ValueTargetScaling: the estimator has no value_network; the scale applies to "
                "the critic the estimator calls"
            )
        self.estimator = estimator
        self.epsilon = epsilon
        self.return_stats = RunningObservationNorm((), clip=None, epsilon=epsilon)
        # Not a submodule (as the estimators hold their value network): the critic owns it.
        self.__dict__["_value_head"] = _value_head(critic) if preserve_outputs else None
        keys = estimator.tensor_keys  # type: ignore[attr-defined]
        self._value_key: NestedKey = keys.value
        self._target_key: NestedKey = keys.value_target
        estimator.value_network = _ScaledOutput(critic, self._value_key, self)

    @property
    def in_keys(self) -> list[NestedKey]:  # type: ignore[override]
        return list(self.estimator.in_keys)

    @property
    def out_keys(self) -> list[NestedKey]:  # type: ignore[override]
        return list(self.estimator.out_keys)

    @property
    def std(self) -> torch.Tensor:
        """The current scale ``sqrt(var + eps)`` (a float64 scalar tensor)."""
        return self.return_stats.std

    @torch.no_grad()
    def forward(self, tensordict: TensorDictBase, **kwargs: object) -> TensorDictBase:
        std = self.std  # the scale the estimator reads the critic with
        self.estimator(tensordict, **kwargs)
        target = tensordict.get(self._target_key)
        # first: a non-finite target raises here, before the batch is rewritten
        self.return_stats.update(target.reshape(-1))
        head: torch.nn.Linear | None = self._value_head
        if head is not None:  # the new scale, the critic's outputs kept
            std_new = self.std
            ratio = std / std_new
            for param in (head.weight, head.bias):
                if param is not None:
                    param.mul_(ratio.to(device=param.device, dtype=param.dtype))
            std = std_new
        scale = std.to(device=target.device, dtype=target.dtype)
        tensordict.set(self._target_key, target / scale)
        for key in (self._value_key, next_key(self._value_key)):
            value = tensordict.get(key, None)
            if value is not None:
                tensordict.set(key, value / scale)
        return tensordict


def _value_head(critic: TensorDictModuleBase) -> torch.nn.Linear:
    """The critic's value head: its one ``nn.Linear`` with a single output and plain parameters
    (an image encoder's layers have wider outputs)."""
    heads = [m for m in critic.modules() if isinstance(m, torch.nn.Linear) and m.out_features == 1]
    if len(heads) != 1 or torch.nn.utils.parametrize.is_parametrized(heads[0]):
        found = (
            f"{len(heads)} nn.Linear layers with one output"
            if len(heads) != 1
            else "a value head whose weight is parametrized"
        )
        raise ValueError(
            "ValueTargetScaling(preserve_outputs=True) rescales the critic's value head, its one "
            f"nn.Linear with a single output and plain parameters; found {found}. Pass "
            "preserve_outputs=False (a recipe's --no-preserve-value-outputs) to scale the "
            "targets only"
        )
    return heads[0]


class _ScaledOutput:
    """A critic whose ``value_key`` output is multiplied by its owner's current ``std``."""

    def __init__(
        self, critic: TensorDictModuleBase, value_key: NestedKey, owner: ValueTargetScaling
    ) -> None:
        self.critic = critic
        self.value_key = value_key
        self.owner = owner
        self.in_keys = list(critic.in_keys)
        self.out_keys = list(critic.out_keys)

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.critic(tensordict)
        value = out.get(self.value_key)
        scale = self.owner.std.to(device=value.device, dtype=value.dtype)
        out.set(self.value_key, value * scale)
        return out
