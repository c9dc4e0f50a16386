"""The vllm tier against vLLM 0.32's real scheduler, LMCache's real connector and a
real lmcache server. Every test here is marked ``vllm``. Without vllm (or lmcache and
torch) no module here is imported: each is collected as one skip that names what is
missing, and a run of cpu_tests/vllm alone exits 0."""

from __future__ import annotations

import importlib.util

import pytest


def _missing() -> str | None:
    for mod in ("torch", "lmcache", "vllm"):
        spec = importlib.util.find_spec(mod)
        if spec is None or spec.origin is None:  # a directory named vllm is not vllm
            return f"the vllm tier needs {mod}: scripts/install_vllm.sh (docs/vllm/tier.md)"
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
        if "cpu_tests/vllm/" in str(item.fspath):
            item.add_marker(pytest.mark.vllm)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if MISSING and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(scope="module")
def executor():
    """One opened tier (lmcache server, warm interpreters) per module: it holds the
    host-wide real-tier lock, which a module that runs ``kvfault`` itself must not
    find taken by its own session."""
    from kvfault.faults.vllm.executor import vllm_executor

    with vllm_executor() as ex:
        yield ex
