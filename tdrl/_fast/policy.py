"""Fast twin of calling a policy on the collector's TensorDict: the module on its tensors.

A plain ``TensorDictModule`` reads its in-keys, calls its module and writes its out-keys. Calling
the module on the tensors directly gives the same outputs without the TensorDict reads and writes
per vector step (most of the collector's own per-step cost on CPU). Equal to
``policy(td)`` followed by reading the out-keys (tests/collectors/test_collector.py, over the
``fast_mode`` fixture). Anything but a plain module (subclasses, hooks, kwargs, a method, renamed
or dropped outputs) goes through ``policy(td)``.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase, unravel_key_list
from tensordict.nn import TensorDictModule

from tdrl import keys

__all__ = ["call_module", "checked_out_keys", "plain_module"]


def plain_module(policy: Any) -> TensorDictModule | None:
    """``policy`` if it is a TensorDictModule whose call is exactly read -> module -> write."""
    if not isinstance(policy, TensorDictModule) or type(policy) is not TensorDictModule:
        return None
    plain = (
        policy._kwargs is None
        and policy.method is None
        and not policy.method_kwargs
        and not policy._get_kwargs
        and policy.inplace is True
        and list(policy.out_keys) == list(policy.out_keys_source)
        and "_" not in policy.out_keys
        and not policy._forward_hooks
        and not policy._forward_pre_hooks
    )
    return policy if plain else None


def call_module(policy: TensorDictModule, td: TensorDictBase) -> list[torch.Tensor]:
    """The values ``policy(td)`` would write to its out-keys, in out-key order (``td`` is not
    written)."""
    values = policy.module(*[td.get(k) for k in policy.in_keys])
    # a dict (or TensorDict) holding every out-key: its entries, as TensorDictModule reads it
    if isinstance(values, (dict, TensorDictBase)) and all(k in values for k in policy.out_keys):
        if isinstance(values, dict):
            values = dict(zip(unravel_key_list(list(values)), values.values(), strict=True))
        values = tuple(values.get(k) for k in policy.out_keys)
    if not isinstance(values, tuple):
        values = (values,)
    if len(values) != len(policy.out_keys):
        raise RuntimeError(
            f"the policy returned {len(values)} tensors for out_keys {policy.out_keys}"
        )
    return list(values)


def checked_out_keys(policy: TensorDictModule) -> list[NestedKey]:
    """The policy's out-keys; an error naming them when ``"action"`` is not one."""
    if keys.ACTION not in policy.out_keys:
        raise KeyError(
            f"the policy did not write {keys.ACTION!r}; its out_keys are {policy.out_keys}"
        )
    return list(policy.out_keys)
