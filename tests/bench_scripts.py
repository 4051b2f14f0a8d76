"""The scripts of ``benchmarks/`` loaded as modules for their tests (imported as
``tests.bench_scripts``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(script: str, name: str | None = None) -> ModuleType:
    """``benchmarks/<script>.py`` as the module ``name`` (the script's own by default), put in
    ``sys.modules`` before it runs: its dataclasses resolve their module by name."""
    name = name or script
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
