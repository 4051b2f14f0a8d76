"""One policy call per vector step, with one reused TensorDict (the collector's hot path)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from tensordict import NestedKey, TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule

from tdrl import _fast, keys
from tdrl._fast import policy as fast_policy
from tdrl.envs import VecEnv
from tdrl.keyed import next_key

Policy = Callable[[TensorDictBase], TensorDictBase]


class PolicyStep:
    """Holds the current observation in persistent tensors and calls the policy on them.

    The policy sees a ``[num_envs]`` TensorDict with the observation keys, the root flags and
    ``"is_init"`` (True where the observation is the first of an episode: TorchRL's
    ``InitTracker`` entry, which stateful exploration such as ``OrnsteinUhlenbeckNoise`` reads to
    reset its state per env); it must write ``"action"``. The keys it adds on its first call
    (``"action"``, and e.g. ``"loc"``, ``"scale"``, ``"action_log_prob"``) are the keys the
    collector stores every step.

    Shapes:
        observation leaves [num_envs, *obs_shape]; action [num_envs, *action_shape].
    """

    def __init__(
        self, env: VecEnv, policy: Policy | None, device: torch.device | None = None
    ) -> None:
        self.env = env
        self.policy = policy
        # The policy's device (given, or that of its parameters) when it is not the CPU: the
        # observations go there (from pinned memory, without blocking, when that is CUDA) and
        # the action comes back to the envs.
        device = device if device is not None else module_device(policy)
        self.device = None if device is None or device.type == "cpu" else device
        pin = self.device is not None and self.device.type == "cuda"
        n = env.num_envs
        self.observation = [
            torch.zeros(n, *leaf.shape, dtype=leaf.dtype, pin_memory=pin) for leaf in env.obs_leaves
        ]
        # numpy views on the same memory: numpy's assignment copies and casts (float64 -> float32)
        # in one call, cheaper than building tensors.
        self.observation_np = [t.numpy() for t in self.observation]
        self.td = TensorDict(
            {leaf.key: t for leaf, t in zip(env.obs_leaves, self.observation, strict=True)},
            batch_size=(n,),
        )
        for key in (keys.DONE, keys.TERMINATED, keys.TRUNCATED):
            self.td.set(key, torch.zeros(n, 1, dtype=torch.bool))
        # Every env starts an episode at the first reset.
        self.is_init = torch.ones(n, 1, dtype=torch.bool)
        self.is_init_np = self.is_init.numpy()[:, 0]
        self.td.set(keys.IS_INIT, self.is_init)
        self.out_keys: list[NestedKey] | None = None
        # Outputs the policy writes into a buffer it reuses every step (an input it passes
        # through, such as the observation, or a module's own state tensor): the collector
        # stacks the values of every step, so these are copied each step. Found over the
        # first two calls (_find_reused; the first call's tensors are held until the second,
        # so no new tensor can take their memory).
        self._calls = 0
        self._first_values: list[tuple[torch.Tensor, torch.Tensor]] = []  # (tensor, its copy)
        self._reused: list[int] = []
        # With the fast paths on, a plain TensorDictModule is called on its tensors directly
        # (tdrl._fast.policy); found on the first fast call.
        self._direct: TensorDictModule | None | bool = False
        # Recurrent state of the LSTM/GRU modules inside the policy (tdrl's or TorchRL's, found
        # by their make_tensordict_primer): zeros at first, zero again wherever "is_init" is set,
        # carried from the policy's ("next", key) output to key for the next step.
        self.state_keys: list[NestedKey] = []
        for key, (shape, dtype) in recurrent_state_specs(policy).items():
            self.td.set(key, torch.zeros(n, *shape, dtype=dtype))
            self.state_keys.append(key)

    def set_observation(self, observation: list[np.ndarray], *, reset: bool = False) -> None:
        """Copies per-leaf numpy observations into the persistent tensors; ``reset``: they are
        reset observations (every env's ``"is_init"`` is set)."""
        for dst, src in zip(self.observation_np, observation, strict=True):
            dst[...] = src
        if reset:
            self.is_init_np[:] = True

    def set_episode_starts(self, started: Iterable[int]) -> None:
        """``"is_init"`` is True for the envs in ``started`` (autoreset after an episode end in
        the last step), False for the others."""
        self.is_init_np[:] = False
        if started:  # most steps start no episode: skip the fancy index
            self.is_init_np[list(started)] = True

    @property
    def stored_keys(self) -> list[NestedKey]:
        """What the collector stores each step: the policy's out-keys, then the recurrent state
        the policy acted from (under the state keys themselves)."""
        assert self.out_keys is not None, "call the policy first"
        return [*self.out_keys, *self.state_keys]

    def __call__(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Runs the policy; returns the action (on the CPU, for the envs) and the values of
        :attr:`stored_keys` (on the policy's device)."""
        states = self._states_in() if self.state_keys else []
        td = self.td if self.device is None else self.td.to(self.device, non_blocking=True)
        action, values = self._call(td)
        if self._calls < 2:
            values = self._find_reused(values)
        elif self._reused:
            for j in self._reused:
                values[j] = values[j].clone()
        if states:
            self._carry(values)
        return action, values + states

    def _find_reused(self, values: list[torch.Tensor]) -> list[torch.Tensor]:
        """The first two calls find the outputs held in a buffer the policy reuses (see
        ``_reused``): a second-call output that is the first call's tensor (``is_set_to``), or
        one whose first-call tensor changed since (written over: a view of such a buffer, or
        an input the collector refills). The first call's values are all copied."""
        self._calls += 1
        if self._calls == 1:
            self._first_values = [(v, v.clone()) for v in values]
            return [copy for _, copy in self._first_values]
        first, self._first_values = self._first_values, []
        self._reused = [
            j
            for j, (v, (orig, copy)) in enumerate(zip(values, first, strict=True))
            if v.is_set_to(orig) or not torch.equal(orig, copy)
        ]
        return [v.clone() if j in self._reused else v for j, v in enumerate(values)]

    def _states_in(self) -> list[torch.Tensor]:
        """The recurrent state for this step (zero where an episode starts), copied for the
        batch."""
        n = self.is_init.shape[0]
        out = []
        for key in self.state_keys:
            state = self.td.get(key)
            state.masked_fill_(self.is_init.view(n, *[1] * (state.dim() - 1)), 0.0)
            out.append(state.clone())
        return out

    def _carry(self, values: list[torch.Tensor]) -> None:
        """The policy's ``("next", key)`` outputs become the next step's state."""
        assert self.out_keys is not None
        for key in self.state_keys:
            nxt = next_key(key)
            if nxt not in self.out_keys:
                raise KeyError(
                    f"the policy reads the recurrent state {key!r} but did not write {nxt!r}: "
                    f"its outputs are {self.out_keys}"
                )
            self.td.get(key).copy_(values[self.out_keys.index(nxt)])

    def _rebind_inputs(self) -> None:
        """A policy may overwrite its inputs (an observation normalizer in front of the actor
        writes the normalized ``"observation"`` over the raw one): the next step's values go
        into the persistent tensors, so those go back into the TensorDict."""
        for leaf, tensor in zip(self.env.obs_leaves, self.observation, strict=True):
            if self.td.get(leaf.key) is not tensor:
                self.td.set(leaf.key, tensor)
        if self.td.get(keys.IS_INIT) is not self.is_init:
            self.td.set(keys.IS_INIT, self.is_init)

    def _call(self, td: TensorDictBase) -> tuple[torch.Tensor, list[torch.Tensor]]:
        assert self.policy is not None
        if _fast.enabled():
            if self._direct is False:
                self._direct = fast_policy.plain_module(self.policy)
            if isinstance(self._direct, TensorDictModule):
                if self.out_keys is None:
                    self.out_keys = fast_policy.checked_out_keys(self._direct)
                values = fast_policy.call_module(self._direct, td)
                # the plain path may have fixed another order of the same keys
                ordered = dict(zip(self._direct.out_keys, values, strict=True))
                return self._for_env(ordered[keys.ACTION]), [ordered[k] for k in self.out_keys]
        if self.out_keys is None:
            before = set(td.keys(True, True))
            result = self.policy(td)
            if result is not None and result is not td:
                raise TypeError("the policy must write its outputs into the TensorDict it gets")
            if keys.ACTION not in td.keys():
                wrote = sorted(map(str, set(td.keys(True, True)) - before))
                raise KeyError(f"the policy did not write {keys.ACTION!r}; it wrote {wrote}")
            added = [k for k in td.keys(True, True) if k not in before]
            self.out_keys = [keys.ACTION] + [k for k in added if k != keys.ACTION]
        else:
            self.policy(td)
        if td is self.td:
            self._rebind_inputs()
        return self._for_env(td.get(keys.ACTION)), [td.get(k) for k in self.out_keys]

    def _for_env(self, action: torch.Tensor) -> torch.Tensor:
        """The action on the CPU for the envs (one copy off a GPU), checked against the space."""
        if self.device is not None:
            action = action.cpu()
        self.env.check_action(action)
        return action


def recurrent_state_specs(policy: Any) -> dict[NestedKey, tuple[torch.Size, torch.dtype]]:
    """State key -> per-env (shape, dtype) of every recurrent module inside ``policy``: the
    modules with ``make_tensordict_primer`` (tdrl's and TorchRL's ``LSTMModule``/``GRUModule``)."""
    specs: dict[NestedKey, tuple[torch.Size, torch.dtype]] = {}
    if not isinstance(policy, torch.nn.Module):
        return specs
    for module in policy.modules():
        make = getattr(module, "make_tensordict_primer", None)
        if make is None:
            continue
        primers = make().primers
        for key in primers.keys(True, True):
            specs[key] = (primers[key].shape, primers[key].dtype)
    return specs


def module_device(policy: Any) -> torch.device | None:
    """The device of a module's first parameter (None: not a module, or no parameters)."""
    if isinstance(policy, torch.nn.Module):
        for p in policy.parameters():
            return p.device
    return None
