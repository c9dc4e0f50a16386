"""What a picture says in words and colours: the palette, how a stop's clock is drawn
(``clock_style``), and the boxed note's facts and diagnoses, derived from the trace only.
No matplotlib."""

from __future__ import annotations

from dataclasses import dataclass

from kvfault.faults.report.timeline.model import LoadRow, Panel, StopInfo

_C = {
    "active": "#b0b0b0",
    "retrieve": "#1f77b4",
    "wait": "#9ecae1",
    "copy": "#ff7f0e",
    "dispatch": "#222222",
    "reported": "#2ca02c",
    "applied": "#0b5d1e",
    "restart": "#9467bd",
    "fault": "#e7298a",
    "stop": "#d62728",
    "other": "#8a6d00",
    "forward": "#7f7f7f",
    "forward_fault": "#8c564b",
    "muted": "#555555",
    # The clocks a stop counted (one colour each, none shared with a row's spans).
    "bound_clock": "#17becf",
    "deadline_clock": "#bcbd22",
    "other_clock": "#e377c2",
    # The token axis of hybrid hits: its own colours, not the rows'.
    "kv_hit": "#c6dbef",
    "state_image": "#6a3d9a",
    "claim_ok": "#41ab5d",
    "claim_short": "#fb6a4a",
}


@dataclass(frozen=True)
class ClockStyle:
    """How a stop's clock is drawn: whose timer it is, from which event, where."""

    label: str
    color: str
    side: int  # -1: above the stopping load's row, +1: below it
    marker: str


def clock_style(stop: StopInfo) -> ClockStyle:
    """The scheduler's load bound and the worker's transfer deadline are different
    clocks owned by different parts of the stack; they must not look alike. The label
    names the timer, its limit and the event it counted from."""
    start = stop.clock_from or "an unknown event"
    limit = f" {stop.limit:g} s" if stop.limit is not None else ""
    if stop.error == "LoadNotTerminal":
        return ClockStyle(
            f"scheduler's {stop.limit_name or 'load bound'}{limit}, counted from {start}",
            _C["bound_clock"],
            -1,
            "D",
        )
    if stop.error == "TransferUnprovable":
        return ClockStyle(
            f"worker's {stop.limit_name or 'transfer deadline'}{limit}, counted from {start}",
            _C["deadline_clock"],
            1,
            "s",
        )
    return ClockStyle(
        f"{stop.limit_name or 'clock'}{limit}, counted from {start}", _C["other_clock"], -1, "o"
    )


def _peers_before(row: LoadRow, panel: Panel) -> list[LoadRow]:
    """Loads dispatched before ``row`` by the same engine life (since the last restart)."""
    since = max((t for t in panel.restarts if t <= row.dispatched), default=float("-inf"))
    return [r for r in panel.rows if r.rank < row.rank and r.dispatched >= since]


def _row_facts(row: LoadRow, panel: Panel, error: str) -> str:
    """The load's own timeline in words, and when the loads dispatched before it
    finished: what a reviewer checks the bound and deadline rules against."""
    facts = [f"dispatched {row.dispatched:.2f}"]
    if row.retrieved is not None:
        facts.append(f"retrieved {row.retrieved:.2f}")
    if row.enqueued is not None:
        facts.append(f"copy enqueued {row.enqueued:.2f}")
    if row.copied is not None:
        facts.append(f"copied {row.copied:.2f}")
    if error != "TransferUnprovable":  # the worker's deadline knows nothing of bounds
        if row.restarts:
            n = len(row.restarts)
            facts.append(
                f"bound restarted {n}x, last {row.restarts[-1]:.2f}"
                if n > 1
                else f"bound restarted {row.restarts[0]:.2f}"
            )
        else:
            facts.append("bound never restarted")
    if row.reported is not None:
        facts.append(f"reported {row.reported:.2f}")
    facts.append(f"applied {row.applied:.2f}" if row.applied is not None else "never applied")
    for t, name in row.faults:
        facts.append(f"fault {name} at {t:.2f}")
    lines = [" · ".join(facts[i : i + 3]) for i in range(0, len(facts), 3)]
    before = _peers_before(row, panel)
    if before and error != "TransferUnprovable":
        done = [r.applied for r in before if r.applied is not None]
        last = f", last at {max(done):.2f}" if done else ""
        lines.append(f"{len(done)}/{len(before)} loads dispatched before it finished{last}")
    return "t (s): " + "\n".join(lines)


def _diagnosis(row: LoadRow, panel: Panel, stop: StopInfo) -> list[str]:
    """What the trace says went wrong for the stopping load, in one or two lines;
    derived from the events only, never from the name of a rule variant."""
    out: list[str] = []
    if stop.error == "TransferUnprovable" and row.enqueued is not None:
        out.append(f"=> its copy had run {stop.t - row.enqueued:.2f} s of its own clock")
    if stop.error != "LoadNotTerminal":
        return out
    rank = {r.op: r.rank for r in panel.rows}
    later = sum(1 for by in row.restarted_by if rank.get(by, 0) > row.rank)
    if later:
        out.append(f"=> its bound was restarted {later}x by loads dispatched after it")
    done = [r.applied for r in _peers_before(row, panel) if r.applied is not None]
    if done and not any(t >= max(done) for t in row.restarts):
        out.append("=> its bound was not restarted when the loads before it finished")
    return out
