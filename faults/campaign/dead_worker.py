"""The one rule for a campaign worker that died while it held cases, whichever backend
started it (forked workers, ``kvfault run -j``; pytest-xdist workers and gateways,
``-n`` and ``--tx``): which case is blamed, how its ERROR reads, and which cases go
back to be run again. A backend says what it saw (``DeadWorker``) and hands the rest
out again; the session records the blamed case (``Session.lost``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from kvfault.faults.campaign.hang_guard import TIMEOUT_EXIT
from kvfault.faults.campaign.session import Session
from kvfault.faults.campaign.targets import Case


@dataclass(frozen=True)
class DeadWorker:
    """A worker that died holding ``held``: the cases handed to it whose outcomes never
    came back, in the order it runs them. ``running`` is the one it had started, where
    its backend knows; ``exit_code`` its exit status, where known (negative: the signal
    that killed it); ``detail`` what its backend saw instead (pytest-xdist's crash line,
    the last line of a task's traceback), ``error`` a traceback to keep."""

    held: Sequence[Case]
    running: Case | None = None
    exit_code: int | None = None
    detail: str = ""
    error: str | None = None

    @property
    def blamed(self) -> Case | None:
        """The case the death is recorded against: the running one; else the first it
        held, so a unit that kills every worker before a case starts loses a case
        each time round and cannot be handed out for ever."""
        if self.running is not None:
            return self.running
        return self.held[0] if self.held else None

    @property
    def timed_out(self) -> bool:
        """Its hang guard ended it: that exits with ``TIMEOUT_EXIT``, and only in a case."""
        return self.running is not None and self.exit_code == TIMEOUT_EXIT

    @property
    def cause(self) -> str:
        """Why the blamed case has no verdict, as its ERROR says it (a crash's)."""
        if self.detail:
            return self.detail
        code = self.exit_code
        how = f"exited with {code}" if code is not None and code >= 0 else "was killed"
        return f"it {how} (a crash: its stderr says why)"

    @property
    def rest(self) -> list[Case]:
        """What goes back to be run again: every held case but the blamed one."""
        rest = list(self.held)
        if self.blamed in rest:
            rest.remove(self.blamed)
        return rest

    def settle(self, session: Session) -> list[Case]:
        """Record the blamed case on ``session`` (an ERROR: timed out or crashed) and
        return ``rest``, for the backend to hand out again."""
        blamed = self.blamed
        if blamed is not None:
            session.lost(blamed, self.cause, error=self.error, timed_out=self.timed_out)
        return self.rest
