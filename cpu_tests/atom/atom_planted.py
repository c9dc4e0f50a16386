"""An ATOM with a bug planted by hand, for the tests that show a row catches it: a
scratch clone of the checkout under test with one file edited. Each edit must match
exactly once; where it does not, the test skips (that ATOM is not the form the planted
bug edits)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CONNECTOR = "atom/kv_transfer/offload/dense/connector.py"
# ATOM's load_failed keeps the save floor: the recompute after a failed load does not
# save the chunks the lookup claimed again, so the tier never holds them on the worker
# whose load failed.
KEEPS_SAVE_FLOOR = (("            entry[1] = self._chunk_floor(floor)\n", "            pass\n"),)


def stores_only_where(keep: str) -> tuple[tuple[str, str]]:
    """The dense connector edit under which a worker whose ``keep`` (an expression over
    ``self._rank``, its lmcache worker id) is false reports its saves done without
    storing."""
    stored = f"(self._engine.store if {keep} else (lambda *a, **k: None))("
    return (("        self._engine.store(", f"        {stored}"),)


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
