"""The plain data a timeline picture draws, read off a run's trace only: one ``LoadRow``
per load, the ``StopInfo`` of the error that stopped the run, a ``Panel`` per run, and a
hybrid's ``HybridClaim``s. Nothing here needs matplotlib."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvfault.faults.runs import RunResult
from kvfault.reference.trace import Ev, TraceEvent

# The picture formats a path's extension may name (matplotlib writers; jpeg via Pillow,
# which matplotlib requires).
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".jpg": "jpeg", ".jpeg": "jpeg"}
PLOT_HINT = "install the plot extra: pip install '.[plot]' in a kvfault checkout (see README)"


def picture_format(path: str | Path) -> str:
    """The format ``path``'s extension names; ``ValueError`` (one line) for any other."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        named = f"extension {suffix!r}" if suffix else "no extension"
        raise ValueError(f"{path} has {named}; a timeline is written as {', '.join(FORMATS)}")
    return FORMATS[suffix]


@dataclass
class LoadRow:
    """One load's life as the trace tells it; times in simulated seconds, ``None`` when
    the event never happened."""

    op: str
    rank: int  # 1-based position in dispatch order over the whole run
    dispatched: float
    submitted: float | None = None
    retrieved: float | None = None
    retrieve_ok: bool | None = None
    enqueued: float | None = None
    copied: float | None = None
    reported: float | None = None
    applied: float | None = None
    outcome: str | None = None
    restarts: list[float] = field(default_factory=list)
    restarted_by: list[str] = field(default_factory=list)  # the finished load, per restart
    fence_errors: list[float] = field(default_factory=list)
    faults: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class StopInfo:
    """The engine's stop: the named error and, when it names one, the load and the clock
    it counted (``clock_from`` says which event started that clock)."""

    t: float
    error: str
    message: str
    op: str | None = None
    elapsed: float | None = None
    limit: float | None = None
    limit_name: str | None = None
    clock_from: str | None = None


@dataclass
class Panel:
    """Everything one panel draws, taken from one run (plain data, no matplotlib)."""

    label: str
    rows: list[LoadRow]
    forwards: list[tuple[float, float, str]]  # (start, end, fault label or "")
    restarts: list[float]
    stop: StopInfo | None
    start: float
    end: float
    verdict: str
    ok: bool | None  # None: not judged (a bare RunResult)
    note: str = ""  # the first violation's message, when judged and failing


def short_op(op: str) -> str:
    """A load id short enough for an axis label: ``load:chatcmpl-e9abfb0d-…-burst#3``
    becomes ``chatcmpl-e9abfb0d…burst#3``; short ids stay as they are."""
    body = op.split(":", 1)[1] if ":" in op else op
    req, _, gen = body.rpartition("#")
    if not req:
        req, gen = body, ""
    if len(req) > 26:
        parts = req.split("-")
        head = "-".join(parts[:2]) if len(parts) > 2 else req[:17]
        req = f"{head[:20]}…{parts[-1][:10]}" if len(parts) > 2 else f"{req[:17]}…"
    return f"{req}#{gen}" if gen else req


def load_rows(run: RunResult) -> list[LoadRow]:
    """Every load of the run in dispatch order, with its events folded in."""
    rows: list[LoadRow] = []
    current: dict[str, LoadRow] = {}
    for ev in run.trace.events:
        key = str(ev.op) if ev.op is not None else None
        if ev.kind is Ev.DISPATCH and key is not None:
            row = LoadRow(key, len(rows) + 1, ev.t)
            rows.append(row)
            current[key] = row
            continue
        if ev.kind is Ev.BOUND_RESTART:
            for restarted in ev.data.get("restarted", ()):
                if restarted in current:
                    current[restarted].restarts.append(ev.t)
                    current[restarted].restarted_by.append(str(ev.op))
            continue
        load = current.get(key) if key is not None else None
        if load is None:
            continue
        _fold(load, ev)
    return rows


def _fold(row: LoadRow, ev: TraceEvent) -> None:
    # First occurrence wins: a stale duplicate must not move a row's times.
    kind = ev.kind
    if kind is Ev.RETRIEVE_SUBMIT and row.submitted is None:
        row.submitted = ev.t
    elif kind is Ev.RETRIEVE_TERMINAL and row.retrieved is None:
        row.retrieved = ev.t
        row.retrieve_ok = bool(ev.data.get("ok", True))
    elif kind is Ev.COPY_ENQUEUE and row.enqueued is None:
        row.enqueued = ev.t
    elif kind is Ev.COPY_FENCE_ERROR:
        row.fence_errors.append(ev.t)
    elif kind is Ev.COPY_COMPLETE and row.copied is None:
        row.copied = ev.t
    elif kind is Ev.FINISHED_REPORTED and row.reported is None:
        row.reported = ev.t
        row.outcome = ev.data.get("outcome")
    elif kind is Ev.COMPLETION_APPLIED and row.applied is None and not ev.data.get("stale"):
        row.applied = ev.t
        row.outcome = ev.data.get("outcome", row.outcome)
    elif kind is Ev.FAULT:
        row.faults.append((ev.t, str(ev.data.get("injector", "fault"))))


def _stop_info(run: RunResult, rows: list[LoadRow]) -> StopInfo | None:
    ev = next(iter(run.trace.of(Ev.STOP)), None)
    if ev is None:
        return None
    error = str(ev.data.get("error", "stop"))
    info = StopInfo(ev.t, error, str(ev.data.get("message", "")))
    if ev.op is None:
        return info
    info.op = str(ev.op)
    elapsed = ev.data.get("elapsed")
    info.elapsed = float(elapsed) if elapsed is not None else None
    cfg = run.config
    if error == "LoadNotTerminal":
        info.limit, info.limit_name = cfg.bound_s, "load bound"
    elif error == "TransferUnprovable":
        info.limit, info.limit_name = cfg.transfer_deadline_s, "transfer deadline"
    else:
        m = re.search(r"\(([a-z ]+?) ([0-9.]+)s\)", info.message)
        if m:
            info.limit_name, info.limit = m.group(1), float(m.group(2))
    row = next((r for r in reversed(rows) if r.op == info.op), None)
    if row is not None and info.elapsed is not None:
        info.clock_from = _clock_origin(row, ev.t - info.elapsed, error)
    return info


def _clock_origin(row: LoadRow, start: float, error: str) -> str | None:
    """Which event of the row started the clock the stop counted. Dispatch and retrieve
    submission happen in one step; the scheduler's bound counts from the first, the
    worker's deadline from the second, so the error decides the name."""
    worker = error == "TransferUnprovable"
    candidates = [
        ("its last bound restart", row.restarts[-1] if row.restarts and not worker else None),
        ("copy enqueue", row.enqueued if worker else None),
        (
            "retrieve submission" if worker else "dispatch",
            row.submitted if worker else row.dispatched,
        ),
        (
            "dispatch" if worker else "retrieve submission",
            row.dispatched if worker else row.submitted,
        ),
    ]
    for name, t in candidates:
        if t is not None and abs(t - start) < 1e-6:
            return name
    return None


def _forwards(run: RunResult) -> list[tuple[float, float, str]]:
    out: list[tuple[float, float, str]] = []
    pending_fault = ""
    open_start: float | None = None
    open_label = ""
    for ev in run.trace.events:
        if ev.kind is Ev.FAULT and ev.data.get("injector") == "slow_forward":
            pending_fault = "slow forward (fault)"
        elif ev.kind is Ev.FORWARD_START:
            open_start, open_label, pending_fault = ev.t, pending_fault, ""
        elif ev.kind is Ev.FORWARD_END and open_start is not None:
            out.append((open_start, ev.t, open_label))
            open_start = None
    if open_start is not None:  # the run ended inside a forward
        out.append((open_start, run.sim_seconds, open_label))
    return out


def _unwrap(result: Any) -> tuple[RunResult, list[Any] | None]:
    """Accept a ``RunResult`` or anything with ``.run`` and ``.violations`` (a
    ``kvfault.faults.campaign.execute.JudgedRun``), whose verdict then heads the panel."""
    if isinstance(result, RunResult):
        return result, None
    run = getattr(result, "run", None)
    if not isinstance(run, RunResult):
        raise TypeError(
            f"write_timeline wants a RunResult or a JudgedRun with .run, got {type(result).__name__}"
        )
    return run, list(getattr(result, "violations", []) or [])


def panel_of(result: Any, label: str) -> Panel:
    """The plain data of one panel from a ``RunResult`` or a ``JudgedRun``."""
    run, violations = _unwrap(result)
    rows = load_rows(run)
    stop = _stop_info(run, rows)
    events = run.trace.events
    end = events[-1].t if events else 0.0
    start = rows[0].dispatched if rows else (events[0].t if events else 0.0)
    ok = None if violations is None else not violations
    note = str(getattr(violations[0], "message", violations[0])) if violations else ""
    if run.startup_error and not note:
        note = run.startup_error
    return Panel(
        label,
        rows,
        _forwards(run),
        [e.t for e in run.trace.of(Ev.RESTART)],
        stop,
        start,
        end,
        _verdict(run, rows, stop, violations),
        ok,
        note,
    )


@dataclass(frozen=True)
class HybridClaim:
    """A hybrid request's tier hit, in tokens: what it claimed against the joint KV and
    state boundary (the last state image at or below the KV hit, below the prompt's
    end), which is what it must claim."""

    label: str
    req_id: str
    t: float
    prompt_len: int
    kv_hit: int
    states: tuple[int, ...]
    claim: int
    joint: int
    chunk: int


def hybrid_claims(result: Any, label: str = "") -> list[HybridClaim]:
    """Every hybrid lookup of the run that hit the tier, in trace order."""
    run, _ = _unwrap(result)
    chunk = int(getattr(getattr(run.config, "geometry", None), "chunk_size", 0) or 0)
    out = []
    for ev in run.trace.of(Ev.LOOKUP):
        d = ev.data
        if not d.get("hybrid") or not d.get("kv_hit"):
            continue
        states = tuple(int(p) for p in d.get("states", ()))
        joint = max((p for p in states if p <= d["kv_hit"] and p < d["prompt_len"]), default=0)
        out.append(
            HybridClaim(
                label,
                str(ev.req_id),
                ev.t,
                int(d["prompt_len"]),
                int(d["kv_hit"]),
                states,
                int(d["claim"]),
                joint,
                chunk,
            )  # fmt: skip
        )
    return out


def _verdict(
    run: RunResult, rows: list[LoadRow], stop: StopInfo | None, violations: list[Any] | None
) -> str:
    if stop is not None:
        what = f"stopped at t={stop.t:.1f}s: {stop.error}" + (
            f" on {short_op(stop.op)}" if stop.op else ""
        )
    elif run.startup_error:
        what = "startup error"
    elif run.hung:
        what = "hung: neither finished nor stopped"
    else:
        done = sum(1 for r in rows if r.applied is not None)
        what = f"finished at t={run.sim_seconds:.1f}s, {done}/{len(rows)} loads restored"
    if violations is None:
        return what
    if not violations:
        return f"PASS: {what}"
    first = violations[0]
    prop = getattr(first, "prop", "")
    more = f", +{len(violations) - 1} more" if len(violations) > 1 else ""
    return f"FAIL [{prop}{more}]: {what}"
