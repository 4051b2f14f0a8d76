"""Q-value networks: discrete-action Q actors (with a dueling head) and state-action critics.

``QValueActor`` follows TorchRL's ``QValueActor`` keys: it writes ``"action_value"`` (all
actions), ``"action"`` (the greedy action, an int64 index) and ``"chosen_action_value"``.
``StateActionCritic`` is TorchRL's ``ValueOperator(in_keys=["observation", "action"])``:
``Q(s, a)`` written to ``"state_action_value"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl.keyed import check_counts, require
from tdrl.keys import ACTION, ACTION_VALUE, CHOSEN_ACTION_VALUE, OBSERVATION
from tdrl.modules.actors import _apply, input_key, masked_logits, observation_input
from tdrl.modules.ensembles import ConcatCritic, check_value_dim
from tdrl.modules.mlp import mlp


class Dueling(nn.Module):
    """Dueling head ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)`` (Wang et al. 2016, 1511.06581).

    Subtracting the mean advantage (their eq. 9) makes ``V`` and ``A`` identifiable. With
    ``atoms > 1`` the same holds per atom, as Rainbow's distributional dueling network (Hessel et
    al. 2017, arXiv 1710.02298, eq. in sec. 3): ``logits_j(s, a) = V_j(s) + A_j(s, a) -
    mean_a A_j(s, a)`` for each of ``atoms`` outputs (C51's atoms, QR-DQN's quantiles).

    Args:
        trunk: shared features ``[*B, obs] -> [*B, F]``.
        value_head: ``[*B, F] -> [*B, atoms]``.
        advantage_head: ``[*B, F] -> [*B, n * atoms]`` (action-major: action ``a``'s atoms are
            outputs ``a * atoms ... a * atoms + atoms - 1``).
        atoms: outputs per action (1: plain Q values).

    Shapes:
        ``[*B, obs] -> [*B, n * atoms]``.
    """

    def __init__(
        self,
        trunk: nn.Module,
        value_head: nn.Module,
        advantage_head: nn.Module,
        *,
        atoms: int = 1,
    ) -> None:
        super().__init__()
        check_counts(type(self).__name__, atoms=atoms)
        self.trunk = trunk
        self.value_head = value_head
        self.advantage_head = advantage_head
        self.atoms = atoms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.trunk(x)
        advantage = self.advantage_head(features)
        value = self.value_head(features)
        if self.atoms == 1:
            return value + advantage - advantage.mean(dim=-1, keepdim=True)
        per_action = advantage.unflatten(-1, (-1, self.atoms))  # [*B, n, atoms]
        out = value.unsqueeze(-2) + per_action - per_action.mean(dim=-2, keepdim=True)
        return out.flatten(-2)


def q_mlp(
    in_features: int,
    num_actions: int,
    hidden_sizes: Sequence[int] = (128, 128),
    *,
    dueling: bool = False,
    atoms: int = 1,
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Module:
    """A Q network over ``num_actions`` discrete actions, plain or dueling, with ``atoms``
    outputs per action (1: Q values; C51's atoms or QR-DQN's quantiles otherwise).

    The dueling variant shares all hidden layers but the last; the value and advantage streams
    each get their own last hidden layer of the same width (as in Wang et al., Fig. 1).

    Shapes:
        ``[*B, in_features] -> [*B, num_actions * atoms]``.
    """
    if not dueling:
        return mlp(in_features, num_actions * atoms, hidden_sizes, activation=activation)
    if not hidden_sizes:
        raise ValueError("a dueling Q network needs at least one hidden layer")
    *shared, last = hidden_sizes
    if shared:
        trunk: nn.Module = nn.Sequential(
            mlp(in_features, shared[-1], shared[:-1], activation=activation), activation()
        )
        width = shared[-1]
    else:
        trunk, width = nn.Identity(), in_features

    def stream(out: int) -> nn.Module:
        return mlp(width, out, (last,), activation=activation)

    return Dueling(trunk, stream(atoms), stream(num_actions * atoms), atoms=atoms)


class QValueActor(TensorDictModuleBase):
    """Greedy actor over a discrete Q network (DQN's policy before exploration).

    Args:
        net: maps observations to ``[*B, n]`` action values (e.g. :func:`q_mlp`).
        in_key: observation key.
        mask_key: an action-mask key (``"action_mask"``) to honour: the greedy action is the
            best valid one.

    Shapes:
        reads ``[*B, obs]``; writes ``action_value`` ``[*B, n]``, ``action`` (int64) ``[*B]``,
        ``chosen_action_value`` ``[*B, 1]``.
    """

    def __init__(
        self, net: nn.Module, *, in_key: NestedKey = OBSERVATION, mask_key: NestedKey | None = None
    ) -> None:
        super().__init__()
        self.net = net
        self.mask_key = mask_key
        self.in_keys = [in_key] if mask_key is None else [in_key, mask_key]
        self.out_keys = [ACTION_VALUE, ACTION, CHOSEN_ACTION_VALUE]

    def action_values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """``Q(s, .)`` ``[*B, n]``; nothing is written."""
        observation = observation_input(self, tensordict, "QValueActor")
        return _apply(self.net, observation, input_key(self), "QValueActor")

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        action_value = self.action_values(tensordict)
        if self.mask_key is None:
            chosen, action = action_value.max(dim=-1, keepdim=True)
        else:
            mask = require(tensordict, self.mask_key, "QValueActor")
            masked = masked_logits(action_value, mask, self.mask_key)
            action = masked.argmax(dim=-1, keepdim=True)
            chosen = action_value.gather(-1, action)
        tensordict.set(ACTION_VALUE, action_value)
        tensordict.set(ACTION, action.squeeze(-1))
        tensordict.set(CHOSEN_ACTION_VALUE, chosen)
        return tensordict


class StateActionCritic(ConcatCritic):
    """``Q(s, a)`` from the concatenation of ``in_keys`` (TorchRL's ``ValueOperator`` keys).

    For twin or larger critics pass :class:`~tdrl.modules.ensembles.EnsembleCritic` to the loss
    instead (one batched call); a single ``StateActionCritic`` is what TorchRL's losses expect.

    Args:
        net: maps ``[*B, obs + act]`` to ``[*B, 1]``.
        in_keys: keys concatenated on the last dim.
        out_key: value key.

    Shapes:
        reads ``[*B, obs]``, ``[*B, act]``; writes ``state_action_value`` ``[*B, 1]``.
    """

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        value = check_value_dim(self._net_output(tensordict), self.out_keys[0], "StateActionCritic")
        tensordict.set(self.out_keys[0], value)
        return tensordict
