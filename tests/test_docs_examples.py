"""Every ```python block of the README and of docs/ runs as pasted.

Each block is one self-contained example: it runs in a fresh namespace (``__name__ ==
"__main__"``), in a temporary working directory, on one torch thread (as the recipes run; see
docs/getting-started/first-run.md), with the process's environment variables and torch thread
count restored afterwards. HTML comments on the lines right above a fence (invisible
on the site and on GitHub) mark it:

- ``<!-- slow -->``: it trains for minutes; it runs with ``python -m pytest -m slow``.
- ``<!-- requires: ray minari -->``: it skips when one of those modules does not import.

Other fences (```bash, ```text) are not run.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_MARK = re.compile(r"^\s*<!--\s*(?P<body>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    code: str
    slow: bool
    requires: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def _marks(lines: list[str], fence: int) -> tuple[bool, tuple[str, ...]]:
    """The ``<!-- ... -->`` marks on the lines right above line ``fence`` (0-based)."""
    slow, requires = False, []
    i = fence - 1
    while i >= 0 and (match := _MARK.match(lines[i])):
        body = match["body"]
        if body == "slow":
            slow = True
        elif body.startswith("requires:"):
            requires += body.removeprefix("requires:").split()
        i -= 1
    return slow, tuple(requires)


def blocks_of(path: Path, root: Path = ROOT) -> list[Block]:
    """The ```python blocks of one markdown file, in order."""
    lines = path.read_text().splitlines()
    rel = path.relative_to(root).as_posix()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match["indent"], match["fence"], match["lang"].lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1  # the closing fence
        if lang in ("python", "py"):
            slow, requires = _marks(lines, start)
            out.append(Block(rel, start + 1, "\n".join(body) + "\n", slow, requires))
    return out


def all_blocks() -> list[Block]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [block for path in files for block in blocks_of(path)]


BLOCKS = all_blocks()


def _param(block: Block) -> object:
    marks = [pytest.mark.slow] if block.slow else []
    return pytest.param(block, id=block.id, marks=marks)


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_example_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in block.requires:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (an optional extra)")
    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        exec(compile(block.code, block.id, "exec"), {"__name__": "__main__"})
    finally:
        os.environ.clear()
        os.environ.update(environ)
        torch.set_num_threads(threads)


def test_blocks_are_found() -> None:
    """The collector sees the README's and the guides' examples (a parsing slip would silently
    leave them untested)."""
    paths = {block.path for block in BLOCKS}
    assert "README.md" in paths
    assert "docs/guides/custom-loop.md" in paths
    assert all(block.code.strip() for block in BLOCKS)


def test_marks_are_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = "x\n<!-- slow -->\n<!-- requires: ray minari -->\n```python\nprint(1)\n```\n"
    text += "```bash\nls\n```\n  ```python\n  a = 1\n  ```\n"
    page.write_text(text)
    found = blocks_of(page, root=tmp_path)
    assert [(b.line, b.slow, b.requires, b.code) for b in found] == [
        (4, True, ("ray", "minari"), "print(1)\n"),
        (10, False, (), "a = 1\n"),
    ]
