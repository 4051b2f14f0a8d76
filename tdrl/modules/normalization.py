"""Running observation normalization with statistics saved in ``state_dict``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.keys import OBSERVATION


class RunningObservationNorm(TensorDictModuleBase):
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` with running mean and variance.

    The statistics are buffers (float64, saved with ``state_dict`` and checkpoints) and change only
    while ``update_stats`` is True: every ``forward`` then first folds the batch of the first
    in-key into them with the parallel-variance update of Chan et al. (1979), which equals
    Welford's for one sample and is exact for any split of the data. The count starts at
    ``epsilon`` as in SB3's ``RunningMeanStd``. Typical use: put it before the actor in the
    collection policy with ``update_stats = True`` (the rollout then stores the normalized
    observations the policy saw, as SB3's ``VecNormalize`` does), list ``("next",
    "observation")`` as a second in-key so bootstrapped values see the same transform, and set
    ``update_stats = False`` for evaluation.

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
        batch_mean = flat.mean(0)
        batch_var = flat.var(0, unbiased=False)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count
        m2 += delta.pow(2) * self.count * batch_count / total
        self.mean += delta * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize with the current statistics (no update); keeps ``x``'s dtype."""
        mean = self.mean.to(x.dtype)
        std = (self.var + self.epsilon).sqrt().to(x.dtype)
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
