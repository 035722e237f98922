"""The map holds: no import cycle among the gateway's modules, and no module past 600 lines.

The layers themselves are the import-linter contracts in ``pyproject.toml``
(``lint-imports`` runs in ``scripts/test``). A cycle is looked for in grimp's
graph of every import that runs: at module level and inside functions alike.
Imports under ``if TYPE_CHECKING:`` never run, so they cannot close a cycle at
import time; they are left out.
"""

from __future__ import annotations

from pathlib import Path

import grimp

from tests.conftest import REPO_ROOT

MAX_MODULE_LINES = 600


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
    return found


def test_no_import_cycle_among_the_gateways_modules() -> None:
    graph = grimp.build_graph(
        "gateway", include_external_packages=False, exclude_type_checking_imports=True
    )
    assert len(graph.modules) > 100
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")
    assert _cycles(graph) == [["a", "b"]]


def test_no_module_of_the_gateway_passes_600_lines() -> None:
    sizes = {
        str(path.relative_to(REPO_ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in Path(REPO_ROOT, "gateway").rglob("*.py")
    }
    assert len(sizes) > 100
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}
