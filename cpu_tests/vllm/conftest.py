"""The vllm tier against vLLM 0.32's real scheduler, LMCache's real connector and a
real lmcache server. Every test here is marked ``vllm``. Without vllm (or lmcache and
torch) no module here is imported: each is collected as one skip that names what is
missing, and a run of cpu_tests/vllm alone exits 0."""

from __future__ import annotations

import importlib.util

import pytest
from tier_gate import TierGate


def _missing() -> str | None:
    for mod in ("torch", "lmcache", "vllm"):
        spec = importlib.util.find_spec(mod)
        if spec is None or spec.origin is None:  # a directory named vllm is not vllm
            return f"the vllm tier needs {mod}: scripts/install_vllm.sh (docs/vllm/tier.md)"
    return None


MISSING = _missing()


GATE = TierGate(__file__, "vllm", MISSING)  # cpu_tests/tier_gate.py
pytest_pycollect_makemodule = GATE.pytest_pycollect_makemodule
pytest_collection_modifyitems = GATE.pytest_collection_modifyitems
pytest_sessionfinish = GATE.pytest_sessionfinish


@pytest.fixture(scope="module")
def executor():
    """One opened tier (lmcache server, warm interpreters) per module: it holds the
    host-wide real-tier lock, which a module that runs ``kvfault`` itself must not
    find taken by its own session."""
    from kvfault.faults.vllm.executor import vllm_executor

    with vllm_executor() as ex:
        yield ex
