"""One namespace: kvfault installs one top-level name, and its code uses no other.

The three folders ``reference/``, ``fakes/`` and ``faults/`` stay at the checkout's root;
``kvfault/`` links to them and the wheel stores them under ``kvfault/``. A module that
still imported ``faults.x`` would load a second copy of the same file in a checkout (its
root is on ``sys.path``) and fail outright from a wheel.
"""

# ns_rewrite: skip (this file names the old names on purpose)
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLD = ("reference", "fakes", "faults")
CODE = ("reference", "fakes", "faults", "cpu_tests", "gpu_tests", "benchmarks", "scripts")
# A string naming a module by its old name: an entry point, a mock target, `-m faults.cli`;
# or code in a string (a child's `-c`, a file a test writes): `from faults import cli`.
OLD_IN_STRING = re.compile(r"(?<![\w./\-])(?:reference|fakes|faults)\.[a-z_]\w*(?:[.:]\w+)*")
OLD_IMPORT_IN_STRING = re.compile(
    r"(?<![\w.])from\s+(reference|fakes|faults)\s+import\b|^\s*import\s+(reference|fakes|faults)\s*$",
    re.MULTILINE,
)


def _python_files() -> list[Path]:
    """Every Python file of the checkout but this one (which names the old names to test
    the check)."""
    here = Path(__file__).resolve()
    return sorted(p for top in CODE for p in (ROOT / top).rglob("*.py") if p.resolve() != here)


def _old_names(source: str) -> list[tuple[int, str]]:
    """Where ``source`` imports or names a module by its old top-level name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [m.group(0) for m in OLD_IN_STRING.finditer(node.value)]
            names = [n for n in names if _is_module(n)]
            names += [m.group(1) or m.group(2) for m in OLD_IMPORT_IN_STRING.finditer(node.value)]
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] in OLD]
    return sorted(found)


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` (``faults.cli``, ``faults.memory.tier:TIER``) starts with a real
    module or package of the checkout, so prose such as ``faults.append`` is not one."""
    top, sub = dotted.split(":")[0].split(".")[:2]
    return (ROOT / top / f"{sub}.py").is_file() or (ROOT / top / sub / "__init__.py").is_file()


def test_no_module_names_the_old_top_level_packages():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in _python_files()
        for line, name in _old_names(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "name them kvfault.<package>:\n" + "\n".join(found)


def test_the_old_name_check_finds_old_imports_and_module_strings():
    source = (
        "from faults.cli import main\nimport reference.trace\nX = 'faults.memory.tier:TIER'\n"
        "import kvfault.faults.cli\nY = 'kvfault.faults.cli'\nfaults = []\nfaults.append(1)\n"
        "CHILD = 'import sys\\nfrom fakes import SimWorld'\nOK = 'from kvfault.fakes import SimWorld'\n"
    )
    assert _old_names(source) == [
        (1, "faults.cli"),
        (2, "reference.trace"),
        (3, "faults.memory.tier:TIER"),
        (8, "fakes"),
    ]


def test_kvfault_links_each_folder():
    for name in OLD:
        link = ROOT / "kvfault" / name
        assert link.is_symlink(), f"kvfault/{name} is not a link"
        assert link.resolve() == (ROOT / name).resolve()


def test_the_wheel_holds_one_top_level_name_and_every_module():
    wheel = pytest.importorskip("hatchling.builders.wheel")
    files = [f.distribution_path for f in wheel.WheelBuilder(str(ROOT)).recurse_included_files()]
    assert {f.split("/")[0] for f in files} == {"kvfault"}
    for name in OLD:
        shipped = {f for f in files if f.startswith(f"kvfault/{name}/") and f.endswith(".py")}
        ours = {f"kvfault/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / name).rglob("*.py")}
        assert shipped == ours, name


def test_a_wheel_built_from_the_sdist_holds_every_module_too(tmp_path):
    """An sdist keeps no links (hatchling walks each real directory once): it leaves
    kvfault/'s links out and keeps the folders, and the wheel maps the same folders."""
    hatch = pytest.importorskip("hatchling.builders.sdist")
    wheel = pytest.importorskip("hatchling.builders.wheel")
    sdist = [f.relative_path for f in hatch.SdistBuilder(str(ROOT)).recurse_included_files()]
    assert not [f for f in sdist if f.startswith(tuple(f"kvfault/{n}/" for n in OLD))]
    for rel in sdist:  # the sdist's tree, unpacked
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((ROOT / rel).read_bytes())
    built = {
        f.distribution_path for f in wheel.WheelBuilder(str(tmp_path)).recurse_included_files()
    }
    here = {f.distribution_path for f in wheel.WheelBuilder(str(ROOT)).recurse_included_files()}
    assert built == here


def test_import_kvfault_imports_none_of_its_packages():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, kvfault; print(sorted(m for m in sys.modules if 'kvfault' in m))"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['kvfault']"]
