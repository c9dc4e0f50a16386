"""Every package with a curated ``__init__`` (one that sets ``__all__``) keeps its word:
each exported name resolves, ``__all__`` is sorted and lists exactly the exports, and
importing the package pulls in no heavy dependency.

The packages are found by walking reference, fakes and faults, so a new curated package
is checked without an entry here. A package's exports are its ``_EXPORTS`` (the names
it resolves lazily, ``kvfault.reference._lazy``) where it has them, else the public names its
``__init__`` binds (modules left out)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOTS = ("reference", "fakes", "faults")

# What importing a package must not import: the tensor stack, the real tier's client,
# the wire, plotting, fake data, ATOM. Each is imported where a name is used.
HEAVY = ("torch", "numpy", "triton", "lmcache", "zmq", "matplotlib", "faker", "atom")


# Optional dependencies a name may need to resolve (reference.device: torch): where one
# is not installed, the names that need it are not checked.
OPTIONAL = ("torch", "numpy", "triton", "matplotlib")

REPO = Path(__file__).resolve().parents[1]


def _curated() -> list[str]:
    """The packages whose ``__init__`` sets ``__all__``, found on disk (importing
    nothing)."""
    return sorted(
        ".".join(("kvfault", *init.parent.relative_to(REPO).parts))
        for root in ROOTS
        for init in (REPO / root).rglob("__init__.py")
        if re.search(r"^__all__\b", init.read_text(), re.MULTILINE)
    )


CURATED = _curated()


# Run in a fresh interpreter: in this one, earlier tests have resolved lazy names into
# some packages' namespaces and imported submodules onto them.
EXPORTS_OF = """
import importlib, json, sys, types
pkg = importlib.import_module(sys.argv[1])
lazy = vars(pkg).get("_EXPORTS")
# A package's exports: its lazy _EXPORTS, else what its __init__ binds that is public
# and not a submodule or a __future__ flag.
exported = set(lazy) if lazy is not None else {
    name
    for name, value in vars(pkg).items()
    if not name.startswith("_")
    and not isinstance(value, types.ModuleType)
    and type(value).__module__ != "__future__"
}
print(json.dumps([list(pkg.__all__), sorted(exported)]))
"""


def test_the_walk_finds_the_curated_packages():
    assert {
        "kvfault.reference",
        "kvfault.fakes",
        "kvfault.faults",
        "kvfault.faults.campaign",
        "kvfault.reference.device",
    } <= set(CURATED)


@pytest.mark.parametrize("name", CURATED)
def test_every_exported_name_resolves(name):
    pkg = importlib.import_module(name)
    missing = []
    for export in pkg.__all__:
        try:
            getattr(pkg, export)
        except ModuleNotFoundError as exc:
            dep = (exc.name or "").split(".")[0]
            if dep not in OPTIONAL or importlib.util.find_spec(dep) is not None:
                missing.append(f"{export}: {type(exc).__name__}: {exc}")
        except (AttributeError, ImportError) as exc:
            missing.append(f"{export}: {type(exc).__name__}: {exc}")
    assert missing == []


@pytest.mark.parametrize("name", CURATED)
def test_all_is_sorted_and_lists_exactly_the_exports(name):
    listed, exported = json.loads(_fresh(EXPORTS_OF, name))
    assert listed == sorted(listed)
    assert listed == exported


@pytest.mark.parametrize("name", CURATED)
def test_dir_lists_every_export_before_any_is_used(name):
    # What completion and help() see: a lazy name is listed before its first use.
    code = (
        f"import importlib, json\npkg = importlib.import_module({name!r})\n"
        "print(json.dumps(sorted(set(pkg.__all__) - set(dir(pkg)))))\n"
    )
    assert json.loads(_fresh(code)) == []


@pytest.mark.parametrize("name", CURATED)
def test_importing_the_package_pulls_in_nothing_heavy(name):
    code = (
        f"import importlib, json, sys\nimportlib.import_module({name!r})\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    assert json.loads(_fresh(code)) == []


def _fresh(code: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
