"""CPU tier configuration: hypothesis profiles and small shared fixtures.

Profiles (select with ``HYPOTHESIS_PROFILE``, default ``dev``):

- ``dev``: a few examples per property, for the edit-test loop.
- ``ci``: more examples, derandomized (the same examples on every CI run, so a red CI
  reproduces locally with ``HYPOTHESIS_PROFILE=ci``); about a minute on 2 cores.
- ``nightly``: many examples, random, for the nightly job's wider search.

Simulated runs take milliseconds of wall time but their cost varies with the drawn
geometry, so no profile has a per-example deadline; virtual time is asserted instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from reference.stack.lookup_channel import rpc_base_budget

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The explain phase re-runs a shrunk failure many times to point at the lines that
# matter; with whole simulated runs per example that takes minutes. dev and ci skip it,
# so a failure reports in seconds; nightly keeps it.
_FAST_PHASES = tuple(p for p in Phase if p is not Phase.explain)

settings.register_profile("dev", max_examples=12, phases=_FAST_PHASES, **_COMMON)
settings.register_profile(
    "ci",
    max_examples=150,
    derandomize=True,
    database=None,
    print_blob=True,
    phases=_FAST_PHASES,
    **_COMMON,
)
settings.register_profile("nightly", max_examples=1000, print_blob=True, **_COMMON)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
if PROFILE not in ("dev", "ci", "nightly"):
    raise pytest.UsageError(
        f"HYPOTHESIS_PROFILE={PROFILE!r} is not a profile; use dev, ci or nightly"
    )
settings.load_profile(PROFILE)


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
        from fakes.clock import VirtualClock
        from fakes.memory_tier import MemoryTier
        from reference.stack.hbm import BlockPool
        from reference.stack.scheduler import Scheduler, SchedulerConfig
        from reference.trace import Trace

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
