"""Where a panel's rows go: which load a panel centres on, runs of identical loads
folded into one row, the rows around the focus, and the zoom window. No matplotlib."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvfault.faults.report.timeline.model import LoadRow, Panel

# One row's height in the picture, in inches: a panel's height is its rows times this,
# and a boxed note's lines are counted in rows of it.
_ROW_IN = 0.115


@dataclass
class _Layout:
    """Where one panel's rows go: y grows downwards (forwards strip at 0)."""

    panel: Panel
    focus: str | None
    why: str  # "stop" | "other" | "stuck"
    other_error: str | None
    earlier: list[LoadRow]
    shown: list[LoadRow]
    later: list[LoadRow]
    # A shown row that stands for a run of identical loads: its op -> all of them.
    members: dict[str, list[LoadRow]] = field(default_factory=dict)
    ypos: dict[str, float] = field(default_factory=dict)
    y_earlier: float | None = None
    y_later: float | None = None
    bottom: float = 0.0

    @property
    def lines(self) -> int:
        return len(self.shown) + bool(self.earlier) + bool(self.later) + 2


def _focus(panel: Panel, other: Panel | None) -> tuple[str | None, str]:
    """The load a panel centres on, and why."""
    if panel.stop is not None and panel.stop.op is not None:
        return panel.stop.op, "stop"
    if other is not None and other.stop is not None and other.stop.op is not None:
        if any(r.op == other.stop.op for r in panel.rows):
            return other.stop.op, "other"
    stuck = next((r.op for r in panel.rows if r.applied is None), None)
    return stuck, "stuck"


def _row_key(row: LoadRow, quantum: float) -> tuple[Any, ...]:
    """What a row looks like at ``quantum`` seconds per drawn unit: two rows with the
    same key are drawn the same, so a run of them is one row with a count."""

    def q(t: float | None) -> int | None:
        return None if t is None else round(t / quantum)

    return (
        q(row.dispatched), q(row.submitted), q(row.retrieved), row.retrieve_ok,
        q(row.enqueued), q(row.copied), q(row.reported), q(row.applied), row.outcome,
        tuple(sorted({q(t) for t in row.restarts}, key=lambda v: v or 0)),
        tuple(q(t) for t in row.fence_errors), tuple((q(t), n) for t, n in row.faults),
    )  # fmt: skip


def collapse_rows(
    rows: list[LoadRow], quantum: float, keep: str | None = None
) -> list[list[LoadRow]]:
    """Consecutive rows that draw alike at ``quantum`` (``_row_key``) as one group each,
    in order; the row ``keep`` (the load that matters) always stands alone."""
    groups: list[list[LoadRow]] = []
    last: tuple[Any, ...] | None = None
    for row in rows:
        key = None if row.op == keep else _row_key(row, quantum)
        if key is not None and key == last and groups:
            groups[-1].append(row)
        else:
            groups.append([row])
        last = key
    return groups


def _layout(panel: Panel, other: Panel | None, max_rows: int, quantum: float) -> _Layout:
    """Runs of identical loads fold into one row with a count; then ``max_rows`` rows
    around the focus, a quarter of them before it so the loads it waited on stay in
    view; the rest fold into summary rows."""
    focus, why = _focus(panel, other)
    groups = collapse_rows(panel.rows, quantum, focus)
    if len(groups) <= max_rows:
        lo, hi = 0, len(groups)
    else:
        idx = next((i for i, g in enumerate(groups) if any(r.op == focus for r in g)), 0)
        lo = max(0, min(idx - max_rows // 4, len(groups) - max_rows))
        hi = lo + max_rows
    other_error = other.stop.error if other is not None and other.stop is not None else None
    lay = _Layout(
        panel,
        focus,
        why,
        other_error,
        [r for g in groups[:lo] for r in g],
        [g[0] for g in groups[lo:hi]],
        [r for g in groups[hi:] for r in g],
    )
    lay.members = {g[0].op: g for g in groups[lo:hi] if len(g) > 1}
    y = 1.5
    if lay.earlier:
        lay.y_earlier, y = y, y + 1.0
    for row in lay.shown:
        lay.ypos[row.op] = y
        y += 1.0
    if lay.later:
        lay.y_later, y = y, y + 1.0
    lay.bottom = y + 0.2
    return lay


def _row_times(row: LoadRow) -> list[float]:
    ts = [row.dispatched, *row.restarts, *row.fence_errors, *(t for t, _ in row.faults)]
    ts += [
        t
        for t in (row.submitted, row.retrieved, row.enqueued, row.copied, row.reported, row.applied)
        if t is not None
    ]
    return ts


def _detail_window(panels: list[Panel], xlim: tuple[float, float]) -> tuple[float, float] | None:
    """A zoom around the decisive instant (the legacy stop, else the fixed one) when
    the overview crowds many events into a sliver of its width there."""
    span = xlim[1] - xlim[0]
    stops = [p.stop.t for p in panels if p.stop is not None]
    if not stops:
        return None
    t = stops[0]
    times = [x for p in panels for r in p.rows for x in _row_times(r)] + stops
    near = [x for x in times if abs(x - t) <= 0.03 * span]
    if len(near) < 12:
        return None
    a, b = min(near), max(near)
    width = max(b - a, 1e-3)
    if width > 0.2 * span:
        return None
    return (a - 0.08 * width, b + 0.08 * width)
