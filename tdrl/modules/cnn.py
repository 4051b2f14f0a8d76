"""Convolutional networks over uint8 frames: DQN's Nature CNN and MinAtar's small CNN.

Both take the env's frames as they come, uint8 channels first ``[*B, C, H, W]``, and scale them
inside (``x * scale``, 1/255 for Atari's 0..255 pixels, 1 for MinAtar's 0/1 channels), so a
replay buffer stores 1 byte a pixel. A float input or a channels-last frame is an error that
names the shape and dtype. They are the ``net`` of any actor that maps observations to a flat
output: ``QValueActor(NatureCNN(4, n))``, ``CategoricalQValueActor(NatureCNN(4, n * atoms), n)``,
``CategoricalActor(MinAtarCNN(4, n))``.
"""

from __future__ import annotations

import numbers
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
from torch import nn

from tdrl.modules.qvalue import Dueling

__all__ = [
    "FlatFrames", "ImpalaCNN", "MinAtarCNN", "NatureCNN", "PixelInput", "frame_cnn",
    "one_pass_per_input",
]  # fmt: skip

_passes = threading.local()  # .seen: (network, input, version, grad mode) -> (input, output)


@contextmanager
def one_pass_per_input() -> Iterator[None]:
    """While open (in this thread), a pixel network called again on the very input tensor it has
    seen, not modified in place since and in the same grad mode, returns its first output
    instead of computing it again. An actor and a critic that share their CNN (SB3's shared
    features extractor) then run it once per loss call, and the backward pass sums both heads'
    gradients through that one output, as two passes would. The on-policy losses open it around
    each call; the parameters must not change while it is open. Nested uses share the outer."""
    if getattr(_passes, "seen", None) is not None:
        yield
        return
    _passes.seen = {}
    try:
        yield
    finally:
        _passes.seen = None


class PixelInput(nn.Module):
    """Checks ``[*B, C, H, W]`` uint8 frames and returns ``[N, C, H, W]`` floats times ``scale``
    (N: the batch dims flattened). ``owner`` names the network in errors."""

    def __init__(
        self, in_channels: int, frame_size: tuple[int, int], scale: float, owner: str
    ) -> None:
        super().__init__()
        self.in_channels, self.frame_size, self.scale, self.owner = (
            in_channels,
            frame_size,
            scale,
            owner,
        )

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        c, (h, w) = self.in_channels, self.frame_size
        expected = f"uint8 frames [*B, {c}, {h}, {w}] (channels first)"
        got = f"{observation.dtype} of shape {tuple(observation.shape)}"
        if observation.dtype != torch.uint8:
            raise TypeError(
                f"{self.owner}: observation must be {expected}, got {got}; pass the env's "
                f"uint8 frames, the network scales them by {self.scale:g} itself"
            )
        if observation.dim() < 3 or tuple(observation.shape[-3:]) != (c, h, w):
            hint = ""
            if observation.dim() >= 3 and observation.shape[-1] == c:
                hint = "; this looks channels last (HWC): permute to [*B, C, H, W]"
            raise ValueError(f"{self.owner}: observation must be {expected}, got {got}{hint}")
        # Channels-last activations: oneDNN's CPU convolutions run them about a fifth faster.
        frames = observation.reshape(-1, c, h, w).contiguous(memory_format=torch.channels_last)
        return frames.float() * self.scale


class FlatFrames(nn.Module):
    """uint8 frames ``[*B, C, H, W]`` as floats ``[*B, C * H * W]`` times ``scale``: the input of
    an MLP on small frames (an exploration bonus's networks on MiniGrid's 7x7 view)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if frames.dim() < 3:
            shape = tuple(frames.shape)
            raise ValueError(f"FlatFrames: expected frames [*B, C, H, W], got shape {shape}")
        return frames.flatten(-3).to(torch.get_default_dtype()) * self.scale


class _PixelNet(nn.Module):
    """``PixelInput -> convolutions -> flatten`` (``features``), then ``head``; a subclass names
    its convolutions and its defaults (None in an argument: the subclass's)."""

    convolutions: tuple[tuple[int, int, int], ...]
    """(out channels, kernel, stride) of each convolution."""
    default_hidden: int
    default_frame_size: int
    default_scale: float

    def __init__(
        self,
        in_channels: int,
        num_outputs: int | None,
        *,
        hidden: int | None = None,
        frame_size: int | tuple[int, int] | None = None,
        scale: float | None = None,
        dueling: bool = False,
        atoms: int = 1,
    ) -> None:
        super().__init__()
        convolutions = self.convolutions
        hidden = self.default_hidden if hidden is None else hidden
        counts = {"in_channels": in_channels, "num_outputs": num_outputs, "hidden": hidden}
        for name, count in {**counts, "atoms": atoms}.items():
            if count is None:  # num_outputs: the hidden features
                continue
            if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
                owner = type(self).__name__
                raise ValueError(f"{owner}: {name} must be an int >= 1, got {count!r}")
        scale = self.default_scale if scale is None else scale
        frame_size = self.default_frame_size if frame_size is None else frame_size
        size = (frame_size, frame_size) if isinstance(frame_size, int) else frame_size
        size = (int(size[0]), int(size[1]))
        layers: list[nn.Module] = [PixelInput(in_channels, size, scale, type(self).__name__)]
        layers += [*self._body(in_channels), nn.Flatten()]
        # Module.to takes memory_format (torch's docs); its type stubs do not list it.
        self.features = nn.Sequential(*layers).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        with torch.no_grad():  # the flattened width for this frame size
            try:
                probe = torch.zeros(1, in_channels, *size, dtype=torch.uint8)
                width = self.features(probe).shape[-1]
            except RuntimeError as err:
                raise ValueError(
                    f"{type(self).__name__}: frames of {size[0]}x{size[1]} are too small for "
                    f"its convolutions {list(convolutions)} (out, kernel, stride): {err}"
                ) from None
        self.num_features = int(width)  # the flattened convolution output
        self.hidden = hidden

        def stream(out: int) -> nn.Sequential:
            return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, out))

        self.head: nn.Module
        if num_outputs is None:  # the hidden layer's output (IQN's psi, a custom head)
            self.head = nn.Sequential(nn.Linear(width, hidden), nn.ReLU())
        elif dueling:  # value and advantage streams, each with its own hidden layer
            self.head = Dueling(nn.Identity(), stream(atoms), stream(num_outputs), atoms=atoms)
        else:
            self.head = stream(num_outputs)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        seen = getattr(_passes, "seen", None)
        if seen is not None:  # inside one_pass_per_input()
            key = (id(self), id(observation), observation._version, torch.is_grad_enabled())
            hit = seen.get(key)
            if hit is not None and hit[0] is observation:
                return hit[1]  # type: ignore[no-any-return]
        out = self.head(self.features(observation))
        out = out.reshape(*observation.shape[:-3], out.shape[-1])
        if seen is not None:
            seen[key] = (observation, out)  # the input is kept: its id is not reused meanwhile
        return out

    def _body(self, in_channels: int) -> list[nn.Module]:
        """The layers between the scaled frames and the flatten: each of :attr:`convolutions`
        with a ReLU."""
        layers: list[nn.Module] = []
        channels = in_channels
        for out_channels, kernel, stride in self.convolutions:
            layers += [nn.Conv2d(channels, out_channels, kernel, stride), nn.ReLU()]
            channels = out_channels
        return layers


class NatureCNN(_PixelNet):
    """DQN's network (Mnih et al. 2015, Nature 518): 32 8x8 filters stride 4, 64 4x4 stride 2,
    64 3x3 stride 1, each with ReLU, then a 512-unit ReLU layer and the output layer.

    Args:
        in_channels: stacked frames (4 in the paper).
        num_outputs: actions (or actions x atoms for C51); None: the 512 hidden features.
        hidden: width of the fully connected layer (NatureCNN 512, MinAtarCNN 128).
        frame_size: H and W (84), at least 36.
        scale: input factor (1/255 maps pixels to [0, 1]).
        dueling: a value and an advantage stream, each with its own hidden layer
            (Wang et al. 2016, arXiv 1511.06581).
        atoms: dueling outputs per action (``num_outputs = actions x atoms``: Rainbow's
            per-atom dueling head for C51); 1 for Q values.

    Shapes:
        ``[*B, in_channels, H, W]`` uint8 -> ``[*B, num_outputs]`` float.
    """

    convolutions = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    default_hidden, default_frame_size, default_scale = 512, 84, 1 / 255


class MinAtarCNN(_PixelNet):
    """MinAtar's network (Young & Tian 2019, arXiv 1903.03176): 16 3x3 filters stride 1 with
    ReLU, then a 128-unit ReLU layer and the output layer.

    Args:
        in_channels: the game's channels (Breakout 4, Seaquest 10, ...).
        num_outputs: actions (or actions x atoms); None: the 128 hidden features.
        hidden: width of the fully connected layer (NatureCNN 512, MinAtarCNN 128).
        frame_size: H and W (10).
        scale: input factor (1: MinAtar's channels are already 0 or 1).
        dueling, atoms: value and advantage streams (as :class:`NatureCNN`).

    Shapes:
        ``[*B, in_channels, H, W]`` uint8 -> ``[*B, num_outputs]`` float.
    """

    convolutions = ((16, 3, 1),)
    default_hidden, default_frame_size, default_scale = 128, 10, 1.0


class _Residual(nn.Module):
    """``x + conv(relu(conv(relu(x))))``, two 3x3 convolutions keeping the channels and size."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaCNN(_PixelNet):
    """IMPALA's deep residual network (Espeholt et al. 2018, arXiv 1802.01561, fig. 3; the
    Procgen and PPG papers' network): three stacks of 16, 32 and 32 channels, each a 3x3
    convolution, a 3x3 max pool of stride 2 and two residual blocks, then a ReLU, a 256-unit
    ReLU layer and the output layer.

    Args:
        in_channels: the frames' channels (stacked frames: channels x stack).
        num_outputs: actions (or actions x atoms); None: the 256 hidden features.
        hidden: width of the fully connected layer (256).
        frame_size: H and W (64, Procgen's; any size of 8 or more).
        scale: input factor (1/255 maps pixels to [0, 1]).
        dueling, atoms: value and advantage streams (as :class:`NatureCNN`).

    Shapes:
        ``[*B, in_channels, H, W]`` uint8 -> ``[*B, num_outputs]`` float.
    """

    convolutions = ((16, 3, 1), (32, 3, 1), (32, 3, 1))
    """each stack's (out channels, kernel, stride) of its first convolution."""
    default_hidden, default_frame_size, default_scale = 256, 64, 1 / 255

    def _body(self, in_channels: int) -> list[nn.Module]:
        layers: list[nn.Module] = []
        channels = in_channels
        for out_channels, kernel, _ in self.convolutions:
            layers += [
                nn.Conv2d(channels, out_channels, kernel, padding=kernel // 2),
                nn.MaxPool2d(3, stride=2, padding=1),
                _Residual(out_channels),
                _Residual(out_channels),
            ]
            channels = out_channels
        return [*layers, nn.ReLU()]


def frame_cnn(leaf: Any, kind: str = "auto") -> Callable[..., _PixelNet]:
    """The CNN class for a uint8 frames spec ``leaf`` (``[*B, C, H, W]``) with its input set:
    channels, frame size and the scale 1 / high (1/255 for Atari's pixels, 1 for MinAtar's 0/1
    channels). ``kind`` "auto" (or "cnn"): :class:`MinAtarCNN` on frames under 36 pixels,
    :class:`NatureCNN` from 36; "impala": :class:`ImpalaCNN`. Call it with the outputs (None:
    the hidden features)."""
    channels, height, width = (int(d) for d in leaf.shape[-3:])
    scale = 1.0 / max(float(leaf.space.high.max()), 1.0)
    if kind == "impala":
        cnn: type[_PixelNet] = ImpalaCNN
    elif kind in ("auto", "cnn"):
        cnn = NatureCNN if min(height, width) >= 36 else MinAtarCNN
    else:
        raise ValueError(f"frame_cnn: kind must be 'auto', 'cnn' or 'impala', got {kind!r}")
    return partial(cnn, channels, frame_size=(height, width), scale=scale)
