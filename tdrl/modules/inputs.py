"""Dict observations as one network input: the chosen vector entries, flattened and concatenated.

Stable-Baselines3's ``MultiInputPolicy`` reads a ``Dict`` observation through one extractor per
key and a concatenation; over vector entries that is each entry flattened, in a fixed order, then
one MLP. :class:`CatKeys` writes that concatenation to ``"observation_flat"``, and
:meth:`CatKeys.spec` gives the network builders (``q_network``, ``q_ensemble``, the actors) a spec
with one flat ``"observation"`` of the summed width, so they build as for a flat observation:

    cat = dict_inputs(env.observation_spec, ["observation", "desired_goal"])
    body = q_network(cat.spec(env.observation_spec), env.action_spec, (256, 256))
    qnet = TensorDictSequential(cat, QValueActor(body, in_key=cat.out_key))

The concatenation is recomputed wherever the network runs (at the root and under ``"next"`` in
a loss), so a relabelled goal (hindsight replay) reaches the network.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.data import Composite, TensorSpec, Unbounded

from tdrl import keys
from tdrl.keyed import require

__all__ = ["CatKeys", "NetworkInputs", "dict_inputs", "network_inputs"]

NestedKey = str | tuple[str, ...]


class CatKeys(TensorDictModuleBase):
    """Writes ``out_key``: the ``in_keys`` entries, each flattened past the batch dims, cast to
    float32 and concatenated in order.

    Args:
        in_keys: the entries (vectors, or any float arrays, which are flattened).
        widths: each entry's flattened width (checked on every call).
        out_key: where the concatenation goes.

    Shapes:
        reads ``[*B, *F_i]`` each; writes ``[*B, sum_i prod(F_i)]``.
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        widths: Sequence[int],
        out_key: NestedKey = keys.FLAT_OBSERVATION,
    ) -> None:
        super().__init__()
        self.in_keys = list(in_keys)
        self.widths = [int(w) for w in widths]
        if len(self.widths) != len(self.in_keys):
            raise ValueError(f"{len(self.in_keys)} in_keys but {len(self.widths)} widths")
        self.out_keys = [out_key]
        self.out_key = out_key

    @property
    def width(self) -> int:
        return sum(self.widths)

    def spec(self, observation_spec: Composite) -> Composite:
        """The spec a network builder reads: one float ``"observation"`` of :attr:`width`, with
        ``observation_spec``'s batch shape (and its ``"action_mask"``, which actors honour)."""
        shape = (*observation_spec.shape, self.width)
        entries: dict[NestedKey, TensorSpec] = {keys.OBSERVATION: Unbounded(shape=shape)}
        if keys.ACTION_MASK in observation_spec.keys():
            entries[keys.ACTION_MASK] = observation_spec[keys.ACTION_MASK]
        return Composite(entries, shape=observation_spec.shape)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        dims = tensordict.batch_dims
        parts = []
        for key, width in zip(self.in_keys, self.widths, strict=True):
            x = require(tensordict, key, "CatKeys")
            flat = x.reshape(*x.shape[:dims], -1)
            if flat.shape[-1] != width:
                raise ValueError(
                    f"CatKeys: entry {key!r} has {flat.shape[-1]} features per item "
                    f"({tuple(x.shape[dims:])}), the network was built for {width}"
                )
            parts.append(flat.to(torch.float32))
        tensordict.set(self.out_key, torch.cat(parts, dim=-1))
        return tensordict

    def transitions(self, tensordict: TensorDictBase) -> TensorDictBase:
        """:meth:`forward` at the root and under ``"next"`` (where the batch has it): a replay
        sample's transform, after any relabelling, so that losses read both."""
        self(tensordict)
        following = tensordict.get(keys.NEXT, None)
        if following is not None:
            self(following)
        return tensordict


def dict_inputs(observation_spec: Composite, selected: Sequence[NestedKey] = ()) -> CatKeys | None:
    """The :class:`CatKeys` a dict observation needs, or None for one flat ``"observation"``.

    ``selected``: the entries the networks read, in this order; empty: every entry of the spec
    but ``"action_mask"``, in the spec's order (``MultiInputPolicy``'s default). A spec whose
    only entry is ``"observation"`` needs no concatenation (None). Refused, each named: a
    selected key the spec lacks, a key selected twice, uint8 frames (an image entry needs a CNN
    encoder) and integer entries (a Discrete observation would need a one-hot encoder).
    """
    present = [k for k in observation_spec.keys(True, True) if k != keys.ACTION_MASK]
    chosen = list(selected) if selected else present
    seen: set[NestedKey] = set()
    for key in chosen:
        if key in seen:
            raise ValueError(f"observation key {key!r} is selected twice: {chosen}")
        seen.add(key)
        if key not in present:
            raise KeyError(
                f"observation key {key!r} is not in the observation spec; it has {present}"
            )
    if present == [keys.OBSERVATION]:  # a flat observation: nothing to concatenate
        return None
    widths = []
    for key in chosen:
        leaf: TensorSpec = observation_spec[key]
        features = tuple(leaf.shape[len(observation_spec.shape) :])
        if leaf.dtype == torch.uint8 and len(features) == 3:
            raise ValueError(
                f"observation entry {key!r} holds uint8 frames {features}: it needs a CNN "
                "encoder; select the vector entries only"
            )
        if not leaf.dtype.is_floating_point:
            raise ValueError(
                f"observation entry {key!r} is {leaf.dtype} {features}: only float entries are "
                "concatenated (a Discrete entry would need a one-hot encoder)"
            )
        width = 1
        for d in features:
            width *= int(d)
        widths.append(width)
    return CatKeys(chosen, widths)


class NetworkInputs:
    """What the networks of a recipe read, for a flat or a dict observation.

    Attributes:
        spec: the observation spec the builders take (one flat ``"observation"``).
        key: the entry the networks read (``"observation"``, or ``"observation_flat"``).
        cat: the :class:`CatKeys` in front, or None.
        transform: a replay buffer's sample transform writing ``key`` at the root and under
            ``"next"`` (None for a flat observation).
    """

    def __init__(self, spec: Composite, cat: CatKeys | None) -> None:
        self.cat = cat
        self.spec = spec if cat is None else cat.spec(spec)
        self.key: NestedKey = keys.OBSERVATION if cat is None else cat.out_key
        self.transform = None if cat is None else cat.transitions

    def policy(self, module: TensorDictModuleBase) -> TensorDictModuleBase:
        """``module`` acting on the env's own observation: the concatenation first, if any."""
        from tensordict.nn import TensorDictSequential

        return module if self.cat is None else TensorDictSequential(self.cat, module)


def network_inputs(
    observation_spec: Composite, selected: Sequence[NestedKey] = ()
) -> NetworkInputs:
    """:class:`NetworkInputs` of ``observation_spec`` with the entries ``selected`` (as
    :func:`dict_inputs`)."""
    return NetworkInputs(observation_spec, dict_inputs(observation_spec, selected))
