"""The atom tier against a real ATOM checkout (``KVFAULT_ATOM_SRC``), a real lmcache
engine and torch. Every test here is marked ``atom``. Without a checkout (or without
lmcache and torch) no module here is imported: each is collected as one skip that names
what is missing, and a run of cpu_tests/atom alone exits 0."""

from __future__ import annotations

import importlib.util

import pytest

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


class _SkippedModule(pytest.Module):
    def collect(self):
        pytest.skip(MISSING or "")


def pytest_pycollect_makemodule(module_path, parent):
    if MISSING:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cpu_tests/atom/" in str(item.fspath):
            item.add_marker(pytest.mark.atom)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if MISSING and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(scope="session")
def atom_src() -> str:
    return str(AtomSource.find(None).path)  # from $KVFAULT_ATOM_SRC
