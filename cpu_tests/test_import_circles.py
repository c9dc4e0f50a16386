"""kvfault's modules import one another one way: no module of ``kvfault.reference``,
``kvfault.fakes`` or ``kvfault.faults`` imports one that imports it back, counting
imports made only for type checking and inside functions (a circle of either kind
still ties the files together; import-linter's contracts skip type-only imports)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reference", "fakes", "faults")


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the three packages, by dotted name (a package by its own)."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(["kvfault", *parts])] = path
    return out


def _lazy_exports(source: str) -> dict[str, str]:
    """A package's ``_EXPORTS`` (name -> the module that defines it), read, not run."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            if any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
                pairs = zip(node.value.keys, node.value.values, strict=True)
                return {k.value: v.value for k, v in pairs if isinstance(k, ast.Constant)
                        and isinstance(v, ast.Constant)}  # fmt: skip
    return {}


def _graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of ``sources`` it imports anywhere in its text. A name
    imported from a package is the submodule of that name, or the module its lazy
    exports name, or else the package itself."""
    exports = {m: _lazy_exports(s) for m, s in sources.items()}

    def target(module: str, name: str) -> str | None:
        if f"{module}.{name}" in sources:
            return f"{module}.{name}"
        if exports.get(module, {}).get(name) in sources:
            return exports[module][name]
        return module if module in sources else None

    graph: dict[str, set[str]] = {}
    for mod, source in sources.items():
        out: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.update(t for a in node.names if (t := target(node.module, a.name)))
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in sources)
        graph[mod] = out - {mod}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each import circle of ``graph`` (each strongly connected set of
    more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            circle = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(circle) > 1:
                found.append(sorted(circle))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_module_of_kvfault_imports_one_that_imports_it_back():
    graph = _graph({m: p.read_text() for m, p in _modules(ROOT).items()})
    # The scan sees imports: plain, lazy-export, in-function and type-only ones.
    assert "kvfault.faults.campaign.kinds" in graph["kvfault.faults.campaign.select"]
    assert "kvfault.faults.atom.worker_faults" in graph["kvfault.faults.atom.worker"]
    assert "kvfault.faults.runs" in graph["kvfault.faults.injectors.base"]
    assert "kvfault.reference.rules.ruleset" in graph["kvfault.reference.rules"]
    assert _circles(graph) == []


def test_the_scan_finds_a_circle_made_only_for_type_checking():
    bottom = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvfault.faults.campaign.kinds import TargetKind\n"
    graph = _graph(
        {
            "kvfault.faults.campaign.targets": bottom,
            "kvfault.faults.campaign.kinds": "from kvfault.faults.campaign.outcomes import signature\n",
            "kvfault.faults.campaign.outcomes": "from kvfault.faults.campaign import targets\n",
            "kvfault.faults.campaign": "",
        }
    )
    assert _circles(graph) == [
        [
            "kvfault.faults.campaign.kinds",
            "kvfault.faults.campaign.outcomes",
            "kvfault.faults.campaign.targets",
        ]  # fmt: skip
    ]


def test_the_scan_follows_a_name_through_a_package_s_lazy_exports():
    # runs.py importing ``Trigger`` from the injectors package is an import of the
    # module that defines it, which imports runs.py back.
    graph = _graph(
        {
            "kvfault.faults.injectors": '_EXPORTS = {"Trigger": "kvfault.faults.injectors.base"}\n',
            "kvfault.faults.injectors.base": "from kvfault.faults.runs import Injector\n",
            "kvfault.faults.runs": "def f():\n    from kvfault.faults.injectors import Trigger\n",
        }
    )
    assert _circles(graph) == [["kvfault.faults.injectors.base", "kvfault.faults.runs"]]
