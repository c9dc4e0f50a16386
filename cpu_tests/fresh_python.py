"""A snippet of Python run in an interpreter of its own: its signal handlers and
unraisable hook are its own, not pytest's, and a signal it sends itself ends only it.
Bounded; its output comes back as text, for the test to check."""

from __future__ import annotations

import subprocess
import sys


def run_snippet(code: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``python -c`` in this interpreter's environment; its exit status,
    stdout and stderr. ``subprocess.TimeoutExpired`` past ``timeout_s``."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s
    )
