"""The product's text carries no work narrative: the library, the recipes, the README and the
docs name no tracker issue ("issue 16") and hold no session logs; git history keeps those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"\bissues? #?\d+\b", re.IGNORECASE)
TEXT = {".py", ".md", ".txt", ".toml", ".yml", ".yaml", ".cfg"}


def _product_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for folder in ("tdrl", "recipes", "docs", "benchmarks"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in TEXT]
    return files


def test_no_product_file_names_a_tracker_issue():
    found = []
    for path in _product_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ISSUE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)


def test_docs_hold_no_session_logs():
    logs = sorted(p.name for p in (ROOT / "docs").rglob("*") if re.search(r"session", p.name, re.I))
    assert not logs, logs
