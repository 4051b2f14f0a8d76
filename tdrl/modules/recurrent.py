"""Keyed LSTM and GRU modules with TorchRL's recurrent-state keys, in step and sequence mode.

Keys (as TorchRL 0.14's ``LSTMModule`` / ``GRUModule``, so either works where the other does):
the module reads ``in_key``, its state (``"recurrent_state_h"`` and ``"recurrent_state_c"`` for
the LSTM, ``"recurrent_state"`` for the GRU; each ``[*B, num_layers, hidden_size]``) and
``"is_init"``, and writes ``out_key`` and, in step mode, the state after the step under
``("next", ...)``. Where ``"is_init"`` is True the state is zero (an episode starts there).

* Step mode (collection): ``[*B, F]`` inputs, one step; the collector carries the next state
  into the following step (``tdrl.collectors.Collector`` finds the state keys through
  :meth:`make_tensordict_primer`, as TorchRL's primer transform does).
* Sequence mode (training): ``[*B, T, F]`` inputs; the state stored at ``t = 0`` starts each
  sequence, and at every ``t`` where ``"is_init"`` is True the state is reset to zero, so no
  output and no gradient crosses an episode start. The sequence is cut at the times where any row
  starts an episode and ``nn.LSTM``/``nn.GRU`` runs on each piece, so the numbers equal step mode
  run step by step. Only ``out_key`` is written (no per-step states).

The mode is ``set_recurrent_mode(True)`` (a copy sharing the parameters) or, when not fixed,
TorchRL's ``torchrl.modules.set_recurrent_mode`` context, which TorchRL's modules follow too.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey
from torch import Tensor, nn
from torch.distributions import Distribution
from torchrl.modules import recurrent_mode

from tdrl.keyed import next_key, require
from tdrl.keys import EMBED, IS_INIT, RECURRENT_STATE, RECURRENT_STATE_C, RECURRENT_STATE_H

__all__ = ["GRUModule", "LSTMModule", "RecurrentActor"]


class _RecurrentModule(TensorDictModuleBase):
    """What the LSTM and GRU modules share: keys, modes, resets and the segment runs."""

    rnn: nn.LSTM | nn.GRU
    _rnn: type[nn.LSTM] | type[nn.GRU]
    _state_names: tuple[str, ...]

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        in_key: NestedKey = EMBED,
        out_key: NestedKey = EMBED,
        state_keys: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        self.rnn = self._rnn(input_size, hidden_size, num_layers, batch_first=True)
        if state_keys is not None and len(state_keys) != len(self._state_names):
            raise ValueError(
                f"{type(self).__name__}: state_keys needs {len(self._state_names)} names (for "
                f"{list(self._state_names)}), got {list(state_keys)}"
            )
        # TorchRL's names by default; others where two recurrent modules meet (actor, critic).
        self.state_keys = list(self._state_names if state_keys is None else state_keys)
        self.in_keys = [in_key, *self.state_keys, IS_INIT]
        self.out_keys = [out_key, *[next_key(k) for k in self.state_keys]]
        self._mode: bool | None = None

    @property
    def state_shape(self) -> torch.Size:
        """Per-env shape of each state entry: ``[num_layers, hidden_size]``."""
        return torch.Size((self.rnn.num_layers, self.rnn.hidden_size))

    def set_recurrent_mode(self, mode: bool = True) -> _RecurrentModule:
        """A copy in sequence mode (``mode``) or step mode, sharing this module's parameters."""
        out = copy.copy(self)
        out._modules = dict(self._modules)  # the same rnn object: parameters shared
        out._mode = mode
        return out

    @property
    def recurrent_mode(self) -> bool:
        """True in sequence mode: fixed by :meth:`set_recurrent_mode`, else TorchRL's global."""
        return bool(recurrent_mode()) if self._mode is None else self._mode

    def make_tensordict_primer(self):  # type: ignore[no-untyped-def]
        """TorchRL's ``TensorDictPrimer`` for the state keys (zeros of :attr:`state_shape`): a
        TorchRL env with it feeds this module as it feeds TorchRL's; tdrl's collector reads the
        same specs."""
        from torchrl.data import Composite, Unbounded
        from torchrl.envs import TensorDictPrimer

        dtype = self.rnn.weight_ih_l0.dtype
        specs = {k: Unbounded(shape=self.state_shape, dtype=dtype) for k in self.state_keys}
        return TensorDictPrimer(Composite(specs), expand_specs=True)

    # --- the two modes --------------------------------------------------------------------
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        owner = type(self).__name__
        x = require(tensordict, self.in_keys[0], owner)
        is_init = require(tensordict, IS_INIT, owner)
        states = [self._state(tensordict, k, owner) for k in self.state_keys]
        if self.recurrent_mode:
            y = self._sequence(x, states, is_init)
            tensordict.set(self.out_keys[0], y)
            return tensordict
        y, after = self._step(x, states, is_init)
        tensordict.set(self.out_keys[0], y)
        for key, state in zip(self.out_keys[1:], after, strict=True):
            tensordict.set(key, state)
        return tensordict

    def _state(self, tensordict: TensorDictBase, key: str, owner: str) -> Tensor:
        state = require(
            tensordict, key, owner,
            f"the recurrent state: a tdrl Collector adds it; elsewhere set zeros of shape "
            f"[*batch, {self.rnn.num_layers}, {self.rnn.hidden_size}] "
            f"(make_tensordict_primer() does it for a TorchRL env)",
        )  # fmt: skip
        if state.shape[-2:] != self.state_shape:
            raise ValueError(
                f"{owner}: {key!r} has shape {tuple(state.shape)}, expected [*batch, "
                f"{self.rnn.num_layers}, {self.rnn.hidden_size}] (num_layers, hidden_size)"
            )
        return state

    def _check_inputs(self, x: Tensor, states: list[Tensor], is_init: Tensor) -> None:
        """Every input leads with ``x``'s dims but its features (step: ``[*B]``, sequence:
        ``[*B, T]``): not only the element count, since a ``[T, B, 1]`` ``is_init`` or a state of
        another batch would be reshaped across rows."""
        lead = x.shape[:-1]
        owner = type(self).__name__
        for key, state in zip(self.state_keys, states, strict=True):
            if state.shape[:-2] != lead:
                raise ValueError(
                    f"{owner}: {key!r} has shape {tuple(state.shape)}, expected "
                    f"{(*lead, *self.state_shape)} for input {tuple(x.shape)}"
                )
        if is_init.shape not in (lead, (*lead, 1)):
            raise ValueError(
                f"{owner}: {IS_INIT!r} has shape {tuple(is_init.shape)}, expected "
                f"{(*lead, 1)} for input {tuple(x.shape)}"
            )
        if is_init.dtype != torch.bool:
            raise TypeError(
                f"{owner}: {IS_INIT!r} must be bool (True where an episode starts), got "
                f"{is_init.dtype}"
            )

    def _step(
        self, x: Tensor, states: list[Tensor], is_init: Tensor
    ) -> tuple[Tensor, list[Tensor]]:
        """One step: ``x`` ``[*B, F]``, states ``[*B, L, H]``, ``is_init`` ``[*B, 1]``."""
        batch = x.shape[:-1]
        self._check_inputs(x, states, is_init)
        reset = is_init.reshape(1, -1, 1)
        hidden = [s.reshape(-1, *self.state_shape).transpose(0, 1).masked_fill(reset, 0.0)
                  for s in states]  # fmt: skip
        y, after = self._run(x.reshape(-1, 1, x.shape[-1]), hidden)
        back = [h.transpose(0, 1).reshape(*batch, *self.state_shape) for h in after]
        return y.reshape(*batch, y.shape[-1]), back

    def _sequence(self, x: Tensor, states: list[Tensor], is_init: Tensor) -> Tensor:
        """A sequence: ``x`` ``[*B, T, F]``, states ``[*B, T, L, H]`` (``t = 0`` used),
        ``is_init`` ``[*B, T, 1]``; cut where any row starts an episode."""
        if x.dim() < 3:
            raise ValueError(
                f"{type(self).__name__} in sequence mode needs [*batch, T, features] inputs, got "
                f"{tuple(x.shape)} (step mode takes one step)"
            )
        lead, steps = x.shape[:-2], x.shape[-2]
        self._check_inputs(x, states, is_init)
        starts = is_init.reshape(-1, steps)  # [B, T]
        flat = x.reshape(-1, steps, x.shape[-1])
        hidden = [s.reshape(-1, steps, *self.state_shape)[:, 0].transpose(0, 1) for s in states]
        cuts = [0, *(torch.nonzero(starts[:, 1:].any(0)).flatten() + 1).tolist(), steps]
        outputs = []
        for t0, t1 in zip(cuts[:-1], cuts[1:], strict=False):
            reset = starts[:, t0].reshape(1, -1, 1)
            hidden = [h.masked_fill(reset, 0.0) for h in hidden]  # no gradient across the start
            y, hidden = self._run(flat[:, t0:t1], hidden)
            outputs.append(y)
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
        return y.reshape(*lead, steps, y.shape[-1])

    def _run(self, x: Tensor, hidden: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        raise NotImplementedError


class LSTMModule(_RecurrentModule):
    """A keyed ``nn.LSTM`` (TorchRL's ``LSTMModule`` keys and state layout).

    Args:
        input_size: features of ``in_key``.
        hidden_size: LSTM width (and of ``out_key``).
        num_layers: stacked LSTM layers.
        in_key: input key.
        out_key: output key.
        state_keys: the two state keys (default TorchRL's ``"recurrent_state_h"``,
            ``"recurrent_state_c"``); a critic beside a recurrent actor needs its own.

    Shapes:
        step mode: ``in_key`` ``[*B, F]`` -> ``out_key`` ``[*B, H]``; states ``[*B, L, H]``.
        sequence mode: ``[*B, T, F]`` -> ``[*B, T, H]``; states ``[*B, T, L, H]``.
    """

    _rnn = nn.LSTM
    _state_names = (RECURRENT_STATE_H, RECURRENT_STATE_C)

    @property
    def lstm(self) -> nn.LSTM:
        """The network (TorchRL's ``LSTMModule.lstm``)."""
        return self.rnn  # type: ignore[return-value]

    def _run(self, x: Tensor, hidden: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        h, c = hidden
        y, (h, c) = self.rnn(x, (h.contiguous(), c.contiguous()))
        return y, [h, c]


class GRUModule(_RecurrentModule):
    """A keyed ``nn.GRU`` (TorchRL's ``GRUModule`` keys: one state, ``"recurrent_state"``).

    Args and shapes: as :class:`LSTMModule`.
    """

    _rnn = nn.GRU
    _state_names = (RECURRENT_STATE,)

    @property
    def gru(self) -> nn.GRU:
        """The network (TorchRL's ``GRUModule.gru``)."""
        return self.rnn  # type: ignore[return-value]

    def _run(self, x: Tensor, hidden: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        y, h = self.rnn(x, hidden[0].contiguous())
        return y, [h]


class RecurrentActor(TensorDictSequential):
    """``body`` modules (a recurrent module and what feeds it) then a ``head`` actor reading
    their output: one policy with the head's ``get_dist``, so the on-policy losses take it as
    they take any tdrl actor (run them under sequence mode on ``[B, T]`` chunks).

    Args:
        *modules: the body modules, then the head (a tdrl actor with ``get_dist``).

    Shapes:
        as the body's mode: ``[*B]`` steps or ``[*B, T]`` sequences.
    """

    def __init__(self, *modules: TensorDictModuleBase) -> None:
        super().__init__(*modules)
        self.head = modules[-1]

    def get_dist(self, tensordict: TensorDictBase) -> Distribution:
        """The head's action distribution after the body ran on a copy of ``tensordict``."""
        td = tensordict.copy()
        for module in self.module[:-1]:
            td = module(td)
        return self.head.get_dist(td)  # type: ignore[operator]

    def build_dist_from_params(self, tensordict: TensorDictBase) -> Distribution:
        """The head's distribution of the parameters stored in ``tensordict`` (no network runs;
        TorchRL's ``KLPENPPOLoss`` reads the behaviour policy this way)."""
        return self.head.build_dist_from_params(tensordict)  # type: ignore[operator]
