"""The atom tier against a real ATOM checkout (``KVFAULT_ATOM_SRC``), a real lmcache
engine and torch. Every test here is marked ``atom``. Without a checkout (or without
lmcache and torch) no module here is imported: each is collected as one skip that names
what is missing, and a run of cpu_tests/atom alone exits 0."""

from __future__ import annotations

import importlib.util

import pytest
from tier_gate import TierGate

from kvfault.faults.atom.source import AtomSource, AtomSourceMissing


def _missing() -> str | None:
    try:
        AtomSource.find(None)
    except AtomSourceMissing as e:
        return str(e)
    for mod in ("torch", "lmcache", "xxhash"):
        if importlib.util.find_spec(mod) is None:
            return f"the atom tier needs {mod}: pip install -c constraints/ci.txt '.[lmcache,atom]'"
    return None


MISSING = _missing()


GATE = TierGate(__file__, "atom", MISSING)  # cpu_tests/tier_gate.py
pytest_pycollect_makemodule = GATE.pytest_pycollect_makemodule
pytest_collection_modifyitems = GATE.pytest_collection_modifyitems
pytest_sessionfinish = GATE.pytest_sessionfinish


@pytest.fixture(scope="session")
def atom_src() -> str:
    return str(AtomSource.find(None).path)  # from $KVFAULT_ATOM_SRC
