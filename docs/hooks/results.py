"""MkDocs hook: result tables on the docs pages, computed from the JSONL result stores.

A line ``<!-- results: STORE [page] [FILTER=VALUE ...] [columns="A,B,..."] -->`` is replaced
by markdown that the store's benchmark script writes (its ``markdown()``, the text of its
``--render`` page; ``minatar_ablation``: ``ablation_markdown()``, a table and its versions), from
``docs/benchmarks/<STORE>_table.jsonl``:

    <!-- results: mujoco page -->                        the whole generated page
    <!-- results: mujoco -->                             its main table
    <!-- results: mujoco algo=trpo,npg task=Hopper-v5 -->   the rows of that table that match
    <!-- results: offline algo=iql columns="dataset,steps,tdrl final,TorchRL final" -->

STORE is ``mujoco``, ``minatar``, ``atari``, ``offline``, ``goal``, ``exploration``,
``marl`` or ``minatar_ablation`` (Rainbow's ablation runs). A filter names a column of the
main table (``algo`` stands for ``algorithm``) and one or more comma-separated values, compared
without case or punctuation (``td3bc`` matches ``TD3+BC``). An unknown store, filter or column,
or a placeholder that matches no row, raises, so ``mkdocs build --strict`` stops on it.
"""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"^<!--\s*results:(.*?)-->[ \t]*$", re.MULTILINE)
ALIASES = {"algo": "algorithm"}


def _script(name: str) -> Any:
    """``benchmarks/<name>.py`` (the scripts import each other as siblings)."""
    folder = str(ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def _suite(module: str, suite: str) -> Any:
    """The generated page of the ``mujoco_table.Suite`` named ``suite`` in
    ``benchmarks/<module>.py``, as a function of no arguments."""

    def page() -> str:
        mt, script = _script("mujoco_table"), _script(module)
        table = getattr(script, suite)
        return mt.markdown(mt.read_lines(table.table), table)

    return page


def _offline() -> str:
    mt, ot = _script("mujoco_table"), _script("offline_table")
    return ot.markdown(mt.read_lines(ot.OFFLINE.table))


def _minatar_ablation() -> str:
    mt, mn = _script("mujoco_table"), _script("minatar_table")
    return mn.ablation_markdown(mt.read_lines(mn.ABLATION_TABLE))


def _marl() -> str:
    marl = _script("marl_table")
    return marl.markdown(marl.read_table())


STORES = {
    "mujoco": _suite("mujoco_table", "MUJOCO"), "minatar": _suite("minatar_table", "MINATAR"),
    "atari": _suite("atari_table", "ATARI"), "offline": _offline,
    "goal": _suite("goal_table", "GOALS"), "marl": _marl,
    "exploration": _suite("exploration_table", "EXPLORATION"),
    "minatar_ablation": _minatar_ablation,
}  # fmt: skip
_pages: dict[str, tuple[float, str]] = {}


def generated(store: str) -> str:
    """The generated page of ``store``, recomputed when its JSONL file changed."""
    if store not in STORES:
        raise ValueError(f"results: unknown store {store!r}; known: {', '.join(STORES)}")
    mtime = (ROOT / "docs" / "benchmarks" / f"{store}_table.jsonl").stat().st_mtime
    if store not in _pages or _pages[store][0] != mtime:
        _pages[store] = (mtime, STORES[store]())
    return _pages[store][1]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def table(store: str, filters: dict[str, str], columns: list[str] | None = None) -> str:
    """The rows of ``store``'s main table (its first) that match every filter, in
    ``columns`` (default: all)."""
    lines = generated(store).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    header = _cells(lines[start])
    align = _cells(lines[start + 1])
    rows = [_cells(line) for line in lines[start + 2 :]]
    rows = rows[: next((i for i, r in enumerate(rows) if r == [""]), len(rows))]
    names = {_norm(name): i for i, name in enumerate(header)}

    def index(name: str) -> int:
        key = _norm(ALIASES.get(name, name))
        if key not in names:
            raise ValueError(f"results: {store} has no column {name!r}; columns: {header}")
        return names[key]

    for name, value in filters.items():
        i, wanted = index(name), {_norm(v) for v in value.split(",")}
        rows = [row for row in rows if _norm(row[i]) in wanted]
    if not rows:
        raise ValueError(f"results: no row of {store} matches {filters}")
    keep = [index(name) for name in columns] if columns else list(range(len(header)))
    out = [[header[i] for i in keep], [align[i] for i in keep]]
    out += [[row[i] for i in keep] for row in rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in out)


def render(argument: str) -> str:
    """The markdown of one placeholder's argument (``STORE [page] [k=v ...]``)."""
    words = shlex.split(argument)
    if not words:
        raise ValueError("results: a placeholder names no store")
    store, rest = words[0], words[1:]
    if rest == ["page"]:
        return generated(store)
    settings = dict(word.split("=", 1) for word in rest if "=" in word)
    if len(settings) != len(rest):
        raise ValueError(f"results: cannot read {argument!r} (words are key=value or 'page')")
    columns = settings.pop("columns", None)
    return table(store, settings, columns.split(",") if columns else None)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs' event: every placeholder of the page replaced by its table."""

    def replace(match: re.Match[str]) -> str:
        try:
            return "\n" + render(match.group(1)) + "\n"
        except (ValueError, OSError, StopIteration) as error:
            from mkdocs.exceptions import PluginError  # the build stops with the page's name

            raise PluginError(f"{page.file.src_path}: {error}") from error

    return PLACEHOLDER.sub(replace, markdown)
