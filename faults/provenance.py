"""Which code a case ran: the checkout under test, its commit and whether its tree was
dirty. A replay artifact records it (``kvfault.faults.campaign.artifacts``) and a replay says
so, before it runs, when the code it would run now is not that code. Only the standard
library and git."""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# git answers in milliseconds; a hung one (a network file system) must not hang a
# campaign: past this bound the commit is unknown.
GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Code:
    """The code under test: ``path`` (absolute), ``commit`` (None: not a git checkout,
    or git could not tell), ``dirty`` (uncommitted changes to tracked files; None when
    unknown) and ``engine``, what it is (``"ATOM"``, ``"kvfault"``)."""

    engine: str
    path: str
    commit: str | None
    dirty: bool | None

    def as_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "path": self.path, "commit": self.commit,
                "dirty": self.dirty}  # fmt: skip

    @classmethod
    def from_json(cls, obj: Any) -> Code:
        """Read back ``as_json``; ``ValueError`` with one line for anything else."""
        if not isinstance(obj, dict) or set(obj) != {"engine", "path", "commit", "dirty"}:
            raise ValueError("'code' must be an object with engine, path, commit and dirty")
        engine, path, commit, dirty = obj["engine"], obj["path"], obj["commit"], obj["dirty"]
        if not isinstance(engine, str) or not isinstance(path, str) or not path:
            raise ValueError("'code' engine and path must be strings")
        if commit is not None and not (
            isinstance(commit, str) and 4 <= len(commit) <= 64 and all(
                c in "0123456789abcdef" for c in commit)
        ):  # fmt: skip
            raise ValueError(f"'code' commit must be null or a hex commit id, got {commit!r}")
        if dirty is not None and not isinstance(dirty, bool):
            raise ValueError(f"'code' dirty must be null, true or false, got {dirty!r}")
        return cls(engine, path, commit, dirty)

    def describe(self) -> str:
        """One phrase: ``ATOM ffdf3bb5d2c1 (clean) at /src/ATOM``."""
        commit = self.commit[:12] if self.commit else "(no git commit)"
        state = {True: " (dirty tree)", False: " (clean)", None: ""}[self.dirty]
        return f"{self.engine} {commit}{state} at {self.path}"

    def differs(self, other: Code) -> str | None:
        """Why ``other`` is not this code, in one phrase (None: the same commit, both
        clean). A dirty tree is never the same code as anything: its edits are
        unrecorded."""
        if self.commit != other.commit:
            return f"recorded at {self.describe()}, this run has {other.describe()}"
        if self.dirty or other.dirty:
            return (
                f"recorded at {self.describe()}, this run has {other.describe()}: "
                "uncommitted edits are not recorded"
            )
        return None


def _git(path: str, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", path, *args], capture_output=True, text=True, errors="replace",
            stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S, check=False,
            env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


@functools.lru_cache(maxsize=32)
def checkout(path: str, engine: str) -> Code:
    """The code at ``path`` (made absolute): its git commit and whether tracked files
    differ from it. Cached per process: a campaign asks once per row."""
    where = os.path.abspath(path)
    commit = _git(where, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if commit is None or not commit.strip():
        return Code(engine, where, None, None)
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    return Code(engine, where, commit.strip(), None if status is None else bool(status.strip()))


def kvfault_root() -> str:
    """The directory kvfault's own packages are imported from (a checkout's root)."""
    import kvfault.faults as faults

    return str(Path(faults.__file__).resolve().parent.parent)


def of_target(tier: str, options: tuple[str, ...] | list[str]) -> Code | None:
    """The engine checkout a target on ``tier`` with ``options`` (its tier's own
    options, as recorded) runs: the one its source option (or that option's environment
    variable) names, or None (the tier's code under test is kvfault's own stack or
    installed packages, or no checkout is named)."""
    from kvfault.faults.tiers import Tiers

    on = Tiers.installed()[tier]
    opt = on.source_option
    if opt is None:
        return None
    try:
        given = on.opener_options(options).get(opt.dest)
    except ValueError:
        return None
    raw = given if given is not None else os.environ.get(opt.env) if opt.env else None
    if not raw:
        return None
    return checkout(os.path.realpath(os.path.expanduser(raw)), on.engine or on.name)
