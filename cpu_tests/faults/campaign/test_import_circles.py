"""The campaign package's modules import one another one way: no module imports one
that imports it back, counting imports made only for type checking and inside
functions (a circle of either kind still ties the files together)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "kvfault.faults.campaign"
ROOT = Path(__file__).resolve().parents[3] / "faults" / "campaign"


def _imports(source: str) -> set[str]:
    """The modules of ``PACKAGE`` that ``source`` imports anywhere in its text."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:  # ``from kvfault.faults.campaign import kinds``
                out.update(f"{PACKAGE}.{a.name}" for a in node.names)
            elif node.module.startswith(f"{PACKAGE}."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(f"{PACKAGE}."))
    return out


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle of ``graph`` once, as the modules along it."""
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0] and path[0] == min(path):
                found.append(path)
            elif nxt not in path and nxt > path[0]:
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return found


def test_no_module_of_the_campaign_package_imports_one_that_imports_it_back():
    graph = {
        f"{PACKAGE}.{p.stem}": _imports(p.read_text())
        for p in ROOT.glob("*.py")
        if p.name != "__init__.py"  # its lazy exports name modules, never import them
    }
    assert f"{PACKAGE}.kinds" in graph[f"{PACKAGE}.select"]  # the scan sees imports
    assert _circles(graph) == []


def test_the_scan_finds_a_circle_made_only_for_type_checking():
    bottom = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvfault.faults.campaign.kinds import TargetKind\n"
    graph = {
        f"{PACKAGE}.targets": _imports(bottom),
        f"{PACKAGE}.kinds": _imports("from kvfault.faults.campaign.outcomes import signature\n"),
        f"{PACKAGE}.outcomes": _imports("from kvfault.faults.campaign import targets\n"),
    }
    assert _circles(graph) == [[f"{PACKAGE}.kinds", f"{PACKAGE}.outcomes", f"{PACKAGE}.targets"]]
