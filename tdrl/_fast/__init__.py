"""tdrl's fast paths: the one package allowed to use private torch / tensordict APIs, ctypes or
raw pointers (docs/design.md, "Fast paths").

Every function in this package is the twin of a plain function written with public APIs in the
normal layer. The plain one is what a reader meets first; it calls its twin here only when
:func:`enabled` says so, and a test proves the two equal (bitwise, or to a stated tolerance).

One switch selects the plain twins everywhere: ``TDRL_FAST=0`` in the environment, or
``tdrl.set_fast(False)`` at run time (read at every call, so it takes effect at once). Outside
the torch / tensordict versions the fast paths were tested with, they stay off and one warning
says so (``TDRL_FAST=force`` turns them on anyway).
"""

from __future__ import annotations

import os
import warnings

import tensordict
import torch

__all__ = ["TESTED_VERSIONS", "enabled", "set_fast", "supported"]

# The versions whose private APIs the fast paths were written against and tested with
# (constraints.txt). A version string must start with one of these prefixes.
TESTED_VERSIONS: dict[str, tuple[str, ...]] = {
    "torch": ("2.13.",),
    "tensordict": ("0.14.",),
}


def _untested() -> list[str]:
    installed = {"torch": torch.__version__, "tensordict": tensordict.__version__}
    return [
        f"{name} {installed[name]}"
        for name, prefixes in TESTED_VERSIONS.items()
        if not installed[name].startswith(prefixes)
    ]


def _initial() -> tuple[bool, bool]:
    """(requested, supported) from ``TDRL_FAST`` and the installed versions."""
    setting = os.environ.get("TDRL_FAST", "1").strip().lower()
    if setting not in ("0", "1", "force", "false", "true", "off", "on", ""):
        raise ValueError(f"TDRL_FAST must be 0, 1 or force, got {setting!r}")
    requested = setting not in ("0", "false", "off")
    untested = _untested()
    if requested and untested and setting != "force":
        warnings.warn(
            f"tdrl's fast paths are off: they were tested with torch 2.13 and tensordict 0.14, "
            f"this process has {', '.join(untested)}; the plain public-API code runs instead "
            f"(TDRL_FAST=force turns them on anyway)",
            RuntimeWarning,
            stacklevel=2,
        )
    return requested, not untested or setting == "force"


_requested, _supported = _initial()
_enabled = _requested and _supported


def enabled() -> bool:
    """Whether the fast paths run (else their plain public-API twins do); never inside a
    ``torch.compile`` trace, which reads the plain twins."""
    return _enabled and not torch.compiler.is_compiling()


def supported() -> bool:
    """Whether the installed torch / tensordict are the versions the fast paths were tested with
    (or ``TDRL_FAST=force`` was given)."""
    return _supported


def set_fast(flag: bool) -> bool:
    """Turn the fast paths on or off for the whole process; returns the previous setting.

    Turning them on outside the tested versions warns and leaves them off.
    """
    global _enabled
    previous = _enabled
    if flag and not _supported:
        warnings.warn(
            f"set_fast(True) ignored: untested {', '.join(_untested())}",
            RuntimeWarning,
            stacklevel=2,
        )
        flag = False
    _enabled = bool(flag)
    return previous
