"""Fixtures shared by the tests of faults/."""

from __future__ import annotations

import dataclasses

import pytest

from kvfault.faults.injectors import INJECTORS
from kvfault.faults.runs import finishes


@pytest.fixture
def unexercised_fault(monkeypatch) -> str:
    """A fault row that never fires: ``lost_completion`` moved to a scenario with fewer
    completions than its ``nth`` and expected to run to the end. Returns its name."""
    info = INJECTORS["lost_completion"]
    monkeypatch.setitem(
        INJECTORS,
        "lost_completion",
        dataclasses.replace(
            info, scenario="chunk_aligned_hybrid", defaults={"nth": (64,)}, expect=finishes()
        ),
    )
    return "lost_completion"
