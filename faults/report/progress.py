"""Progress on stderr, as the campaign session reports it (``kvfault.faults.campaign.session.
Progress``: cases done, cases in all, the case starting or ``"done"``): a bar on a
terminal, a dozen lines when stderr is not one, nothing with ``--no-progress``."""

from __future__ import annotations

import sys
import time


class Lines:
    """Progress as lines (stderr is not a terminal): the first, one each tenth of the
    cases or each ``every_s`` seconds, whichever comes first, and the last; about a
    dozen lines a run, not one per case."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.clock = time.monotonic
        self.every_s = every_s
        self.last_i: int | None = None
        self.last_t = 0.0

    def due(self, i: int, total: int) -> bool:
        now = self.clock()
        step = max(1, total // 10)
        if (
            self.last_i is None
            or i == total
            or i - self.last_i >= step
            or now - self.last_t >= self.every_s
        ):
            self.last_i, self.last_t = i, now
            return True
        return False


def progress_mode(quiet: bool) -> str | Lines | None:
    """``bar`` on a terminal, ``Lines`` when stderr is not one (CI, a pipe: a run is
    not silent for minutes, nor one line per case), None when ``quiet``."""
    if quiet:
        return None
    return "bar" if sys.stderr.isatty() else Lines()


def show(mode: str | Lines | bool | None, i: int, total: int, label: str) -> None:
    """Show that ``i`` of ``total`` cases are done and ``label`` runs (``mode`` from
    ``progress_mode``); an empty ``label`` (a backend that learns only of finished
    work) names none."""
    if not mode or total == 0:
        return
    if isinstance(mode, Lines) or mode == "lines":
        if isinstance(mode, Lines) and not mode.due(i, total):
            return
        what = "; done" if i == total else f"; running {label}" if label else ""
        print(f"kvfault: {i}/{total} cases done{what}", file=sys.stderr, flush=True)
        return
    width = 24
    done = int(width * i / total)
    label = "done" if i == total else label
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{total} {label[:48]:48s}")
    if i == total:
        sys.stderr.write("\n")
    sys.stderr.flush()
