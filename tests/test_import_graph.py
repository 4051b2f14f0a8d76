"""The import graph of ``tdrl`` has no circle: no module reaches itself through imports, lazy
imports inside functions included (import-linter's layers contract in pyproject.toml checks the
direction between packages; this checks every module)."""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp")  # installed with import-linter (the dev extra)


def _cycles(graph: object, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative Tarjan: the graph is deep enough for recursion
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start) & modules)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    imported = graph.find_modules_directly_imported_by(child) & modules
                    work.append((child, iter(sorted(imported))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_of_tdrl_imports_itself_through_a_circle():
    graph = grimp.build_graph("tdrl")
    modules = set(graph.modules)
    assert _cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_circle():
    graph = grimp.ImportGraph()
    for name in ("a", "b", "c", "d"):
        graph.add_module(name)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert _cycles(graph, {"a", "b", "c", "d"}) == [["a", "b", "c"]]


def test_no_loss_inherits_more_than_three_tdrl_classes():
    """Losses compose; their own hierarchy stays shallow (a base, a shared base, the loss)."""
    import inspect

    import tdrl.objectives as objectives

    deep = {}
    for name in objectives.__all__:
        cls = getattr(objectives, name)
        if inspect.isclass(cls):
            chain = [k.__name__ for k in cls.__mro__ if k.__module__.startswith("tdrl.")]
            if len(chain) > 3:
                deep[name] = chain
    assert not deep
