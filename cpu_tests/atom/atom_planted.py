"""An ATOM with a bug planted by hand, for the tests that show a row catches it: a
scratch clone of the checkout under test with one file edited. Each edit must match
exactly once; where it does not, the test skips (that ATOM is not the form the planted
bug edits)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CONNECTOR = "atom/kv_transfer/offload/dense/connector.py"


def planted(atom_src: str, dest: Path, *edits: tuple[str, str], file: str = CONNECTOR) -> str:
    """A clone of ``atom_src`` at ``dest`` with ``edits`` (``(old, new)`` pairs) made
    to ``file``; its path."""
    subprocess.run(["git", "clone", "-q", atom_src, str(dest)], check=True)
    path = dest / file
    text = path.read_text() if path.exists() else ""
    for old, new in edits:
        if text.count(old) != 1:
            pytest.skip(f"this ATOM's {file} is not the form the planted bug edits")
        text = text.replace(old, new)
    path.write_text(text)
    return str(dest)
