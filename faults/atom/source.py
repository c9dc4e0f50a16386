"""Where the ATOM checkout under test is: ``--atom-src PATH`` or ``KVFAULT_ATOM_SRC``.

Checked without importing ATOM (the campaign process never imports it; the server
processes put the checkout first on ``sys.path``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kvfault.faults.errors import KvfaultError

ENV = "KVFAULT_ATOM_SRC"
_NEEDED = ("atom/model_engine/scheduler.py", "atom/kv_transfer/offload")


class AtomSourceMissing(KvfaultError, ValueError):
    """No usable ATOM checkout: one line that names ``--atom-src``."""


@dataclass(frozen=True)
class AtomSource:
    path: Path

    @classmethod
    def find(cls, given: str | None = None) -> AtomSource:
        """The checkout at ``given``, else at ``$KVFAULT_ATOM_SRC``; ``AtomSourceMissing``
        when neither names a directory with ATOM's scheduler and offload connector."""
        if given is not None and not given.strip():
            raise AtomSourceMissing("--atom-src: an empty path; give the path of an ATOM checkout")
        raw = given if given is not None else os.environ.get(ENV)
        named = f"--atom-src {given}" if given is not None else f"{ENV}={raw}"
        if not raw:
            raise AtomSourceMissing(
                f"the atom tier needs an ATOM checkout: pass --atom-src PATH or set {ENV}"
            )
        path = Path(raw).expanduser().resolve()
        missing = [p for p in _NEEDED if not (path / p).exists()]
        if missing:
            raise AtomSourceMissing(
                f"{named}: not an ATOM checkout with an offload connector (no {missing[0]})"
            )
        return cls(path)
