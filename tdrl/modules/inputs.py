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

Image entries (uint8 ``[C, H, W]``) need a learned encoder, so theirs lives inside each network:
``dict_inputs(spec, images=True)`` gives a :class:`DictEncoder` (a CNN per image entry, the
vector entries flattened, one concatenation: SB3's ``CombinedExtractor``), and
:func:`with_encoder` puts it in front of a Q network, a value network or a policy, whose
parameters, target copies and checkpoints then hold it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.data import Composite, TensorSpec, Unbounded

from tdrl import keys
from tdrl.keyed import require
from tdrl.modules.actors import CategoricalActor, GaussianActor, TanhGaussianActor, encoder_of
from tdrl.modules.cnn import frame_cnn
from tdrl.modules.critics import ValueCritic
from tdrl.modules.deterministic import DeterministicActor
from tdrl.modules.ensembles import EnsembleCritic
from tdrl.modules.qvalue import QValueActor, StateActionCritic

__all__ = [
    "CatKeys",
    "DictEncoder",
    "NetworkInputs",
    "dict_inputs",
    "network_inputs",
    "with_encoder",
]

Module = TypeVar("Module", bound=TensorDictModuleBase)

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

    def features(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The concatenation ``[*B, width]`` of ``tensordict``'s entries; nothing is written."""
        owner, dims = type(self).__name__, tensordict.batch_dims
        parts = [
            self._part(index, key, require(tensordict, key, owner), dims)
            for index, key in enumerate(self.in_keys)
        ]
        return torch.cat(parts, dim=-1)

    def _part(self, index: int, key: NestedKey, x: torch.Tensor, dims: int) -> torch.Tensor:
        """Entry ``index`` (``key``) flattened past the ``dims`` batch dims, as float32."""
        flat = x.reshape(*x.shape[:dims], -1)
        width = self.widths[index]
        if flat.shape[-1] != width:
            raise ValueError(
                f"{type(self).__name__}: entry {key!r} has {flat.shape[-1]} features per item "
                f"({tuple(x.shape[dims:])}), the network was built for {width}"
            )
        return flat.to(torch.float32)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.out_key, self.features(tensordict))
        return tensordict

    def transitions(self, tensordict: TensorDictBase) -> TensorDictBase:
        """:meth:`forward` at the root and under ``"next"`` (where the batch has it): a replay
        sample's transform, after any relabelling, so that losses read both."""
        self(tensordict)
        following = tensordict.get(keys.NEXT, None)
        if following is not None:
            self(following)
        return tensordict


class DictEncoder(CatKeys):
    """A learned :class:`CatKeys`: each image entry through a CNN of its own (its hidden
    features: :class:`~tdrl.modules.MinAtarCNN` under 36 pixels, else
    :class:`~tdrl.modules.NatureCNN`), each vector entry flattened, concatenated in order.

    It runs inside the networks (:func:`with_encoder`), not as a buffer transform: its CNNs are
    trained with them. :meth:`features` returns the concatenation without writing anything.

    Args:
        in_keys: the entries.
        encoders: per entry, its CNN, or None for a vector entry.
        widths: per entry, its width in the concatenation (the CNN's hidden width for an image).
        out_key: where :meth:`forward` writes the concatenation.

    Shapes:
        reads uint8 ``[*B, C, H, W]`` images and ``[*B, *F_i]`` vectors; writes
        ``[*B, sum_i width_i]``.
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        encoders: Sequence[nn.Module | None],
        widths: Sequence[int],
        out_key: NestedKey = keys.FLAT_OBSERVATION,
    ) -> None:
        super().__init__(in_keys, widths, out_key)
        if len(encoders) != len(self.in_keys):
            raise ValueError(f"{len(self.in_keys)} in_keys but {len(encoders)} encoders")
        self.encoders = nn.ModuleList([nn.Identity() if e is None else e for e in encoders])
        self.images = [e is not None for e in encoders]

    def _part(self, index: int, key: NestedKey, x: torch.Tensor, dims: int) -> torch.Tensor:
        if not self.images[index]:
            return super()._part(index, key, x, dims)
        try:
            return self.encoders[index](x)
        except (TypeError, ValueError) as error:
            raise type(error)(f"DictEncoder: entry {key!r}: {error}") from None


_ENCODABLE = (
    QValueActor,
    ValueCritic,
    GaussianActor,
    TanhGaussianActor,
    CategoricalActor,
    DeterministicActor,
    EnsembleCritic,
    StateActionCritic,
)


def with_encoder(module: Module, encoder: DictEncoder) -> Module:
    """``module`` reading ``encoder``'s features of the env's entries instead of its own
    observation entry; returns ``module``. The encoder becomes its submodule (shared where the
    same encoder goes into two networks: an on-policy actor and critic), its first in_key is
    replaced by the encoder's entries (an action mask, a critic's action stay). A critic of the
    state and the action (an ensemble too) reads the encoder's features concatenated with the
    action; one encoder serves all its members (SB3's critics).

    Refused, named: a module other than a feed-forward Q network, value network, state-action
    critic (or ensemble), deterministic, Gaussian or categorical policy; a module with an
    encoder already; a module whose first in_key is not the encoder's ``out_key`` (it was
    built for another input)."""
    if type(module) not in _ENCODABLE:
        names = ", ".join(cls.__name__ for cls in _ENCODABLE)
        raise TypeError(
            f"with_encoder: image entries are read by {names}; got {type(module).__name__}"
        )
    if encoder_of(module) is not None:
        raise ValueError(f"with_encoder: {type(module).__name__} has an encoder already")
    if module.in_keys[0] != encoder.out_key:
        raise ValueError(
            f"with_encoder: {type(module).__name__} reads {module.in_keys[0]!r}, the encoder "
            f"writes {encoder.out_key!r}: build the network on NetworkInputs.key"
        )
    module.encoder = encoder
    module.in_keys = [*encoder.in_keys, *module.in_keys[1:]]
    return module


def dict_inputs(
    observation_spec: Composite, selected: Sequence[NestedKey] = (), *, images: bool = False
) -> CatKeys | None:
    """The :class:`CatKeys` a dict observation needs, or None for one flat ``"observation"``.

    ``selected``: the entries the networks read, in this order; empty: every entry of the spec
    but ``"action_mask"``, in the spec's order (``MultiInputPolicy``'s default). A spec whose
    only entry is ``"observation"`` needs no concatenation (None). ``images``: uint8 frames
    ``[C, H, W]`` entries are taken, each through a CNN, and the result is a
    :class:`DictEncoder` (for :func:`with_encoder`); without it they are refused. Refused, each
    named: a selected key the spec lacks, a key selected twice, and integer entries (a Discrete
    observation would need a one-hot encoder).
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
    widths: list[int] = []
    encoders: list[nn.Module | None] = []
    for key in chosen:
        leaf: TensorSpec = observation_spec[key]
        features = tuple(leaf.shape[len(observation_spec.shape) :])
        if leaf.dtype == torch.uint8 and len(features) == 3:
            if not images:
                raise ValueError(
                    f"observation entry {key!r} holds uint8 frames {features}: it needs a CNN "
                    "encoder, which this recipe does not build; select the vector entries only"
                )
            cnn = frame_cnn(leaf)(None)
            encoders.append(cnn)
            widths.append(int(cnn.hidden))
            continue
        encoders.append(None)
        if not leaf.dtype.is_floating_point:
            raise ValueError(
                f"observation entry {key!r} is {leaf.dtype} {features}: only float entries are "
                "concatenated (a Discrete entry would need a one-hot encoder)"
            )
        width = 1
        for d in features:
            width *= int(d)
        widths.append(width)
    if any(e is not None for e in encoders):
        return DictEncoder(chosen, encoders, widths)
    return CatKeys(chosen, widths)


class NetworkInputs:
    """What the networks of a recipe read, for a flat or a dict observation.

    Attributes:
        spec: the observation spec the builders take (one flat ``"observation"``).
        key: the entry the networks read (``"observation"``, or ``"observation_flat"``).
        cat: the :class:`CatKeys` in front of the networks (vector entries), or None.
        encoder: the :class:`DictEncoder` inside them (image entries: :meth:`attach`), or None.
        transform: a replay buffer's sample transform writing ``key`` at the root and under
            ``"next"`` (None for a flat observation, and with an encoder inside the networks).
    """

    def __init__(self, spec: Composite, cat: CatKeys | None) -> None:
        self.encoder = cat if isinstance(cat, DictEncoder) else None
        self.cat = None if self.encoder is not None else cat
        self.spec = spec if cat is None else cat.spec(spec)
        self.key: NestedKey = keys.OBSERVATION if cat is None else cat.out_key
        self.transform = None if self.cat is None else self.cat.transitions
        self._observation_spec = spec

    def policy(self, module: TensorDictModuleBase) -> TensorDictModuleBase:
        """``module`` acting on the env's own observation: the concatenation first, if any."""
        from tensordict.nn import TensorDictSequential

        return module if self.cat is None else TensorDictSequential(self.cat, module)

    def attach(self, module: Module, *, own: bool = False) -> Module:
        """``module`` with the image encoder inside (:func:`with_encoder`), where the inputs
        have one: :attr:`encoder` itself, shared by every network it goes into, or with
        ``own`` a new one (its own parameters, freshly initialised). Otherwise ``module``."""
        if self.encoder is None:
            return module
        encoder = self.encoder
        if own:  # the same entries, new parameters
            fresh = dict_inputs(self._observation_spec, encoder.in_keys, images=True)
            assert isinstance(fresh, DictEncoder)
            encoder = fresh
        return with_encoder(module, encoder)


def network_inputs(
    observation_spec: Composite, selected: Sequence[NestedKey] = (), *, images: bool = False
) -> NetworkInputs:
    """:class:`NetworkInputs` of ``observation_spec`` with the entries ``selected`` (as
    :func:`dict_inputs`; ``images``: image entries through a :class:`DictEncoder`)."""
    cat = dict_inputs(observation_spec, selected, images=images)
    return NetworkInputs(observation_spec, cat)
