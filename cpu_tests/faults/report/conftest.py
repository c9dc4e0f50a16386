"""Fixtures for the report tests: a planted regression's legacy and fixed runs, each
judged by its signature property, to draw and describe."""

from __future__ import annotations

import pytest

from kvfault.faults.campaign import JudgedRun, run_case
from kvfault.faults.regressions import REGRESSIONS


def _pair(name: str) -> tuple[JudgedRun, JudgedRun]:
    reg = REGRESSIONS[name]
    legacy = run_case(reg.scenario, 0, reg.rules, properties=[reg.signature])
    fixed = run_case(reg.scenario, 0, None, properties=[reg.signature])
    return legacy, fixed


@pytest.fixture(scope="module")
def bound_pair() -> tuple[JudgedRun, JudgedRun]:
    return _pair("load_bound_without_restart")


@pytest.fixture(scope="module")
def restart_all_pair() -> tuple[JudgedRun, JudgedRun]:
    return _pair("restart_all_over_fix")


@pytest.fixture(scope="module")
def deadline_pair() -> tuple[JudgedRun, JudgedRun]:
    return _pair("restore_deadline_from_submission")


@pytest.fixture(scope="module")
def hybrid_pair() -> tuple[JudgedRun, JudgedRun]:
    return _pair("hybrid_last_chunk")
