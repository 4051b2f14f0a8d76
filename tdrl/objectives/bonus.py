"""What the exploration bonuses (:class:`~tdrl.objectives.RNDLoss`,
:class:`~tdrl.objectives.ICMLoss`) share: the intrinsic reward written into a rollout with
non-episodic flags, and the episodic first-visit restriction with its checkpointed state."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl import keys as K
from tdrl.keyed import next_key, require
from tdrl.modules.normalization import RewardScaling


def write_intrinsic_reward(
    rollout: TensorDictBase, reward: torch.Tensor, scaling: RewardScaling | None
) -> None:
    """``reward`` as ``("next", "intrinsic_reward")`` ``[*B, 1]`` of a ``[num_envs, T]``
    rollout, with the intrinsic episode flags all False (a non-episodic return), then divided
    by the running std of that return (``scaling`` folds the rollout's returns in first)."""
    rollout.set(K.NEXT_INTRINSIC_REWARD, reward.reshape(*rollout.batch_size, 1))
    never = torch.zeros(*rollout.batch_size, 1, dtype=torch.bool, device=reward.device)
    for key in (K.INTRINSIC_DONE, K.INTRINSIC_TERMINATED, K.INTRINSIC_TRUNCATED):
        rollout.set((K.NEXT, key), never)
    if scaling is not None:
        scaling(rollout)


class IntrinsicBonus(TensorDictModuleBase):
    """The base of the exploration bonuses: with ``first_visit`` the bonus is paid only where the
    next observation is new to its episode (:meth:`first_visits`).

    A lifelong bonus alone pays an agent for revisiting what stays novel, which leaves it
    circling in procedurally generated MiniGrid (Wang et al. 2023, "Revisiting intrinsic reward
    for exploration in procedurally generated environments", ICLR); NovelD's episodic
    restriction (Zhang et al. 2021, arXiv 2012.08621) and NGU's episodic novelty (Badia et al.
    2020) in their simplest form keep it for an episode's first visit of each observation. Each
    env's visited observations are kept across batch cuts, cleared when its episode ends, and
    checkpointed (the module's extra state).
    """

    def __init__(self, first_visit: bool = False) -> None:
        super().__init__()
        self.first_visit = first_visit
        self._visited: list[set[bytes]] = []  # per env: its episode's observations so far

    def get_extra_state(self) -> dict[str, list[list[bytes]]]:
        return {"visited": [sorted(seen) for seen in self._visited]}

    def set_extra_state(self, state: dict[str, list[list[bytes]]]) -> None:
        self._visited = [set(seen) for seen in state.get("visited", [])]

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object) -> None:
        # a checkpoint written before the visited sets were kept loads with none
        state_dict.setdefault(prefix + "_extra_state", {"visited": []})
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]

    def first_visits(self, rollout: TensorDictBase, obs: torch.Tensor) -> torch.Tensor:
        """``[N, T, 1]`` bool: True where ``obs`` (``[N, T, *obs]``, the next observations) is the
        first visit of that observation in its env's episode; each env's set is cleared after
        its episode's last step."""
        owner = type(self).__name__
        done = require(rollout, K.NEXT_DONE, owner).reshape(*rollout.batch_size)
        n, steps = rollout.batch_size
        if len(self._visited) != n:
            if self._visited:
                raise ValueError(
                    f"{owner}(first_visit=True): the rollout has {n} envs, earlier ones had "
                    f"{len(self._visited)}"
                )
            self._visited = [set() for _ in range(n)]
        rows = obs.detach().cpu().contiguous().numpy().reshape(n, steps, -1)
        ends = done.cpu().numpy()
        new = [[False] * steps for _ in range(n)]
        for i, seen in enumerate(self._visited):
            for t in range(steps):
                key = rows[i, t].tobytes()
                if key not in seen:
                    seen.add(key)
                    new[i][t] = True
                if ends[i, t]:
                    seen.clear()
        return torch.tensor(new, device=obs.device).unsqueeze(-1)


class WithBonus(TensorDictModuleBase):
    """A policy loss and an exploration bonus's losses as one objective: the policy's
    ``loss_*`` entries, then the bonus's model losses (``bonus``: an :class:`IntrinsicBonus`) and
    its intrinsic critic's ``loss_intrinsic_value`` (``critic_loss``), read from the same
    minibatch. Its parameters are all three modules' (shared ones once), for one optimizer."""

    def __init__(
        self, loss: TensorDictModuleBase, bonus: IntrinsicBonus, critic_loss: TensorDictModuleBase
    ) -> None:
        super().__init__()
        self.loss, self.bonus, self.critic_loss = loss, bonus, critic_loss
        self.in_keys = list(dict.fromkeys([*loss.in_keys, *bonus.in_keys, *critic_loss.in_keys]))
        self.out_keys = list(
            dict.fromkeys([*loss.out_keys, *bonus.out_keys, *critic_loss.out_keys])
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.loss(tensordict)
        out.update(self.bonus(tensordict))
        return out.update(self.critic_loss(tensordict))


class MixedAdvantage(TensorDictModuleBase):
    """An advantage estimator with an exploration bonus's mixed in (RND's two value heads, one
    policy; Burda et al. 2018): ``advantage = extrinsic * A + intrinsic * A_int``, where
    ``estimator`` writes ``A`` and ``intrinsic_estimator`` writes ``A_int``, each under its own
    ``tensor_keys.advantage`` (tdrl's and TorchRL's estimators have them; a wrapper such as
    :class:`~tdrl.modules.ValueTargetScaling` lends its estimator's), from the rollout's
    intrinsic reward (``("next", intrinsic_estimator.tensor_keys.reward)``), which the bonus must
    have written first. The result replaces ``A``."""

    def __init__(
        self,
        estimator: TensorDictModuleBase,
        intrinsic_estimator: TensorDictModuleBase,
        extrinsic: float,
        intrinsic: float,
    ) -> None:
        super().__init__()
        self.estimator, self.intrinsic_estimator = estimator, intrinsic_estimator
        self.extrinsic, self.intrinsic = float(extrinsic), float(intrinsic)
        outer, inner = _tensor_keys(estimator), _tensor_keys(intrinsic_estimator)
        self.advantage_key: NestedKey = outer.advantage
        self.intrinsic_advantage_key: NestedKey = inner.advantage
        self.intrinsic_reward_key = next_key(inner.reward)
        if self.advantage_key == self.intrinsic_advantage_key:
            raise ValueError(
                f"MixedAdvantage: both estimators write the advantage to "
                f"{self.advantage_key!r}; give the intrinsic one its own key (set_keys)"
            )
        self.in_keys = list(dict.fromkeys([*estimator.in_keys, *intrinsic_estimator.in_keys]))
        self.out_keys = list(dict.fromkeys([*estimator.out_keys, *intrinsic_estimator.out_keys]))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        require(tensordict, self.intrinsic_reward_key, type(self).__name__,
                "the bonus writes it first (its intrinsic_reward(rollout))")  # fmt: skip
        self.estimator(tensordict)
        self.intrinsic_estimator(tensordict)
        mixed = self.extrinsic * tensordict.get(self.advantage_key) + self.intrinsic * (
            tensordict.get(self.intrinsic_advantage_key)
        )
        tensordict.set(self.advantage_key, mixed)
        return tensordict


def _tensor_keys(estimator: TensorDictModuleBase) -> Any:
    """An estimator's ``tensor_keys``, or its wrapped estimator's (``.estimator``)."""
    keys = getattr(estimator, "tensor_keys", None)
    if keys is None:
        keys = getattr(getattr(estimator, "estimator", None), "tensor_keys", None)
    if keys is None:
        raise TypeError(
            f"MixedAdvantage: {type(estimator).__name__} has no tensor_keys (advantage and "
            "reward keys): pass a tdrl or TorchRL value estimator"
        )
    return keys
