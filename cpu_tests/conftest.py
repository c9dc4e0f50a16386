"""CPU tier configuration: small shared fixtures. The hypothesis profiles (dev, ci,
nightly) come from kvfault's pytest plugin; ``kv_hypothesis_profile`` in pyproject.toml
makes ``dev`` the default here, ``HYPOTHESIS_PROFILE`` picks another."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from kvfault.reference.stack.lookup_channel import rpc_base_budget

# An ipc:// path must fit in sockaddr_un; private_rpc_dir goes under the temp dir only
# when it is at most this long (else under /tmp).
_IPC_BASE_MAX = rpc_base_budget()


@pytest.fixture
def short_tmp(tmp_path_factory: pytest.TempPathFactory):
    """A fresh directory short enough to hold ``ipc://`` sockets, made the process's
    temp dir for the test (so ``private_rpc_dir`` lands in it) and removed afterwards.

    pytest's own tmp dirs are too deep for AF_UNIX paths, so when they are, this is a
    ``tempfile.mkdtemp`` directory in the system temp dir instead."""
    path = tmp_path_factory.mktemp("ipc", numbered=True)
    own = len(str(path)) <= _IPC_BASE_MAX
    if not own:
        path = Path(tempfile.mkdtemp(prefix="kvf"))
    saved = tempfile.tempdir
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = saved
        if not own:
            shutil.rmtree(path, ignore_errors=True)


# -- a scheduler on the fakes, for tests that drive it step by step ----------------------


class SchedulerRig:
    """A ``Scheduler`` wired to a virtual clock, an in-process tier and a trace; tests
    call ``schedule`` / ``after_forward`` / ``apply`` themselves."""

    def __init__(self, geometry, model_kind="dense", state_grid="block", bound_s=40.0, **kw):
        from kvfault.fakes import MemoryTier, VirtualClock
        from kvfault.reference import Trace
        from kvfault.reference.stack import BlockPool, Scheduler, SchedulerConfig

        self.clock = VirtualClock()
        self.trace = Trace(self.clock.now)
        self.tier = kw.pop("tier", None) or MemoryTier(self.clock, geometry, state_grid)
        self.pool = BlockPool(kw.pop("num_blocks", 4096))
        rules = kw.pop("rules", None)
        self.sched = Scheduler(
            SchedulerConfig(geometry, model_kind, state_grid, bound_s, **kw),
            self.clock,
            self.tier,
            self.pool,
            self.trace,
            rules,
        )
        self.step_no = 0

    def step(self, completions=()):
        """apply, check_bounds, schedule; returns the step's metadata."""
        self.step_no += 1
        self.sched.apply(list(completions))
        self.sched.check_bounds()
        return self.sched.schedule(self.step_no)


@pytest.fixture
def rig():
    return SchedulerRig


# -- mutation testing ---------------------------------------------------------------------

# mutmut (``tox -e mutation``) sets MUTANT_UNDER_TEST in every process it runs tests in.
# It maps each test to the functions the test calls and runs only those tests against a
# function's mutants, so a run that a module caches for its later tests (``_CACHE``, a
# ``functools.cache``) would hide those calls from the later tests, and a cache filled
# before a worker forks would answer with unmutated results.
_UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ


@pytest.fixture(autouse=_UNDER_MUTMUT)
def _fresh_module_caches(request: pytest.FixtureRequest):
    """Under mutmut only: empty the test module's run caches before each test."""
    for obj in list(vars(request.module).values()):
        if callable(getattr(obj, "cache_clear", None)):
            obj.cache_clear()
        elif obj is getattr(request.module, "_CACHE", None) and isinstance(obj, dict):
            obj.clear()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under mutmut only: run the quickest tests first. mutmut stops a mutant's run at
    the first failure, so a mutant that a fast unit test kills is never charged a slow
    scenario. Durations are the ones mutmut measured (``mutants/mutmut-stats.json``)."""
    if not _UNDER_MUTMUT:
        return
    try:
        durations = json.loads(Path("mutmut-stats.json").read_text())["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))
