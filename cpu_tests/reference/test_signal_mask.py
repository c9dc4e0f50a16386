"""The stop signals' mask (``kvfault.reference.signals``): blocked from ``kvfault``'s first
line until its handlers are in, and across a fork or an exec; this module alone sets it."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from kvfault.reference.signals import (
    STOP_SIGNALS,
    block_stop_signals,
    stop_signals_blocked,
    unblock_stop_signals,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask"), reason="no signal masks on this platform"
)


def _blocked() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & set(STOP_SIGNALS)


def test_a_stop_sent_while_blocked_is_taken_after_the_block():
    got: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda n, _f: got.append(n))
    try:
        assert _blocked() == set()
        with stop_signals_blocked():
            assert _blocked() == set(STOP_SIGNALS)
            # To this thread: the mask is per thread, and another may take a signal
            # sent to the process.
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            assert got == []  # pending, not taken
        assert got == [signal.SIGTERM]
        assert _blocked() == set()
    finally:
        signal.signal(signal.SIGTERM, before)


def test_block_then_unblock_takes_the_waiting_stop():
    got: list[int] = []
    before = signal.signal(signal.SIGHUP, lambda n, _f: got.append(n))
    try:
        block_stop_signals()
        assert _blocked() == set(STOP_SIGNALS)
        signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
        assert got == []
        unblock_stop_signals()
        assert got == [signal.SIGHUP] and _blocked() == set()
    finally:
        unblock_stop_signals()
        signal.signal(signal.SIGHUP, before)


def test_only_this_module_sets_the_signal_mask():
    found = [
        str(path.relative_to(ROOT))
        for top in ("reference", "fakes", "faults")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "pthread_sigmask" in path.read_text()
    ]
    assert found == ["reference/signals.py"]
