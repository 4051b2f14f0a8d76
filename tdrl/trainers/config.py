"""Typed configs that are also the command line (tyro: a frozen dataclass becomes the CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def parse(config_cls: type[T], args: Sequence[str] | None = None) -> T:
    """Build ``config_cls`` from the command line (``--field value``; ``--help`` lists fields
    with the one-line docs written under them)."""
    import tyro

    return tyro.cli(config_cls, args=args)
