"""A run of the ``atom`` tier as the judge reads every run: a ``kvfault.faults.runs.RunResult``
whose trace holds the events the server processes recorded, in host time."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfault.faults.atom.pictures import cold_content
from kvfault.faults.atom.spec import AtomRequest, RawEvent
from kvfault.faults.runs import RunResult
from kvfault.reference.stack.engine import EngineConfig, EngineOutcome
from kvfault.reference.trace import Ev, Trace, TraceEvent
from kvfault.reference.types import Geometry, OperationId, OpKind, Request


@dataclass
class FiredCount:
    """Stands in for an ``Injector`` in ``RunResult.injectors``: a name and how often
    the server processes recorded it firing."""

    name: str
    fired: int = 0
    spec: object = field(default=None)


def trace_of(events: list[RawEvent], t0: float) -> Trace:
    """The events of all processes of a host, in time order, as one trace."""
    out = []
    for e in sorted(events, key=lambda e: e.t):
        op = None
        if e.op is not None:
            req, gen, kind = e.op
            op = OperationId(req, gen, OpKind(kind))
        out.append(TraceEvent(e.t - t0, e.step, Ev(e.kind), op, e.req_id, dict(e.data)))
    trace = Trace(lambda: 0.0, events=out)
    return trace


def result_of(
    scenario: str,
    seed: int,
    events: list[RawEvent],
    t0: float,
    requests: list[AtomRequest],
    geometry: Geometry,
    hung: bool,
    startup_error: str | None,
    faults: tuple[str, ...] = (),
    model_kind: str = "dense",
) -> RunResult:
    trace = trace_of(events, t0)
    fired = {name: FiredCount(name) for name in faults}
    for ev in trace.of(Ev.FAULT):
        name = ev.data.get("injector")
        if name in fired:
            fired[name].fired += 1
    outputs = {
        e.req_id: tuple(e.data["tokens"]) for e in trace.of(Ev.OUTPUT) if e.req_id is not None
    }
    last = trace.events[-1].t if trace.events else 0.0
    return RunResult(
        scenario=scenario,
        seed=seed,
        trace=trace,
        config=EngineConfig(geometry=geometry, model_kind=model_kind),  # type: ignore[arg-type]
        requests={
            # A picture's request is judged by what a cold run computes from: its ids
            # with the picture merged at its placeholders.
            r.req_id: Request(
                r.req_id,
                cold_content(r.prompt, r.picture),
                r.cache_seed,
                max_output_tokens=r.max_tokens,
            )
            for r in requests
        },
        outcomes=[EngineOutcome(None, last, 0, outputs, hung=hung)],
        injectors=list(fired.values()),  # type: ignore[arg-type]  # counts only, no injector
        # Requests the client aborted: nobody waits for their answer.
        notes={
            "tier": "atom",
            "aborted": sorted(
                {e.req_id for e in trace.of(Ev.FAULT) if e.data.get("aborted") and e.req_id}
            ),
        },
        startup_error=startup_error,
    )
