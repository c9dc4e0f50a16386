"""Properties checked over a run's trace (docs/design.md#properties).

Each checker reads only the trace and what the run was made from (requests, geometry,
the model's cold run): never the name of a rule variant or a fault. A planted regression
is caught when one of these finds a violation in its run.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from dataclasses import dataclass

from fakes.model import DeterministicModel
from faults.properties.violation import Checker, Violation
from faults.runs import RunResult
from reference.stack.worker import page_digest
from reference.trace import Ev, TraceEvent
from reference.types import Request


class _ColdRuns:
    """The cold run of a prompt is the same in every run that holds it: the legacy and
    fixed sides of a regression, each fault on the scenario, the determinism re-run.
    One model (with its memo of cold pages) and the cold outputs it gave, per model
    kind, geometry, scenario and seed, for the last few of those."""

    KEPT = 8

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple, tuple[DeterministicModel, dict]] = OrderedDict()

    def of(self, run: RunResult) -> tuple[DeterministicModel, dict[Request, tuple[int, ...]]]:
        c = run.config
        key = (c.model_kind, c.geometry, run.scenario, run.seed)
        if key in self._kept:
            self._kept.move_to_end(key)
        else:
            self._kept[key] = (run.model, {})
            if len(self._kept) > self.KEPT:
                self._kept.popitem(last=False)
        return self._kept[key]


_COLD = _ColdRuns()


def correctness(run: RunResult) -> list[Violation]:
    """Every output equals the cold run's; every restored range equals recompute; a run
    that ended normally answered every request."""
    model, outputs = _COLD.of(run)
    bs = run.config.geometry.block_size
    out: list[Violation] = []
    for ev in run.trace.of(Ev.OUTPUT):
        req = run.requests[ev.req_id]
        cold = outputs.get(req)
        if cold is None:
            cold = outputs[req] = model.cold_output(req)
        if tuple(ev.data["tokens"]) != cold:
            out.append(
                Violation("correctness", f"output of {ev.req_id} differs from its cold run", t=ev.t)
            )
    # Generations restart with the scheduler: pair each copy with the latest dispatch.
    dispatch: dict[str, TraceEvent] = {}
    for ev in run.trace.of(Ev.DISPATCH, Ev.COPY_COMPLETE):
        if ev.kind is Ev.DISPATCH:
            dispatch[str(ev.op)] = ev
            continue
        d = dispatch.get(str(ev.op))
        if d is None or ev.data.get("digest") is None:
            continue
        req = run.requests[ev.req_id]
        expected = page_digest(
            model.cold_pages(req)[d.data["start"] // bs : d.data["kv_end"] // bs]
        )
        if ev.data["digest"] != expected:
            out.append(
                Violation("correctness", "restored pages differ from recompute", str(ev.op), ev.t)
            )
    if not run.stop and not run.hung and not run.startup_error:
        answered = {e.req_id for e in run.trace.of(Ev.OUTPUT)}
        missing = sorted(set(run.requests) - answered)
        if missing:
            out.append(
                Violation(
                    "correctness", f"{len(missing)} requests never answered, e.g. {missing[0]}"
                )
            )
    return out


def keys(run: RunResult) -> list[Violation]:
    """No key is shared by requests of different media at any key site."""
    seeds: dict[tuple[str, str], set[int]] = defaultdict(set)
    first_seen: dict[tuple[str, str], TraceEvent] = {}
    for ev in run.trace.of(Ev.KEY):
        if ev.data["first"] is None:
            continue
        k = (ev.data["site"], ev.data["first"])
        seeds[k].add(ev.data["seed"])
        first_seen.setdefault(k, ev)
    return [
        Violation(
            "keys",
            f"{site} key {key[:16]} shared by {len(s)} different media seeds",
            t=first_seen[(site, key)].t,
        )
        for (site, key), s in sorted(seeds.items())
        if len(s) > 1
    ]


def identity(run: RunResult) -> list[Violation]:
    """No two live servers on one host share a lookup socket."""
    live: dict[str, str] = {}
    out = []
    for ev in run.trace.of(Ev.BIND, Ev.UNBIND):
        path, server = ev.data["path"], ev.data["server"]
        if ev.kind is Ev.BIND:
            if path in live and live[path] != server:
                out.append(
                    Violation(
                        "identity",
                        f"{server} binds {path}, already served by live {live[path]}",
                        t=ev.t,
                    )
                )
            live.setdefault(path, server)
        elif live.get(path) == server:
            del live[path]
    return out


def grid(run: RunResult) -> list[Violation]:
    """Under the multiprocess tier every state image requested lies on the chunk grid
    (the server silently drops the rest, so such an anchor is lost)."""
    chunk = run.config.geometry.chunk_size
    return [
        Violation(
            "grid",
            f"state image at {ev.data['position']} is off the {chunk}-token chunk grid: lost",
            str(ev.op),
            ev.t,
        )
        for ev in run.trace.of(Ev.STATE_SAVE)
        if ev.data["grid"] == "chunk" and ev.data["position"] % chunk
    ]


def hybrid(run: RunResult) -> list[Violation]:
    """A hybrid's hit claims exactly the joint boundary: the last state image at or
    below the KV hit and below the prompt end — never less, never the whole prompt."""
    out = []
    for ev in run.trace.of(Ev.LOOKUP):
        d = ev.data
        if d["claim"] >= d["prompt_len"]:
            out.append(
                Violation("hybrid", f"{ev.req_id} claims its whole prompt ({d['claim']})", t=ev.t)
            )
        if not d["hybrid"]:
            continue
        joint = max((p for p in d["states"] if p <= d["kv_hit"] and p < d["prompt_len"]), default=0)
        if d["claim"] != joint:
            out.append(
                Violation(
                    "hybrid",
                    f"{ev.req_id} claims {d['claim']} of {d['prompt_len']} tokens; the joint boundary is {joint}",
                    t=ev.t,
                )
            )
    return out


@dataclass
class _LoadLife:
    dispatched: float
    submitted: float | None = None
    retrieved: float | None = None
    enqueued: float | None = None
    copied: float | None = None
    reported: float | None = None  # the worker sent its completion
    delivered: float | None = None  # the completion reached the scheduler's inbox
    applied: float | None = None
    fenced: bool = False  # a fence raised: the load keeps its submission clock


def _load_lives(run: RunResult) -> dict[str, _LoadLife]:
    """Each load's timeline, keyed by op, in dispatch order; a restart starts afresh."""
    lives: dict[str, _LoadLife] = {}
    fields = {
        Ev.RETRIEVE_SUBMIT: "submitted",
        Ev.RETRIEVE_TERMINAL: "retrieved",
        Ev.COPY_ENQUEUE: "enqueued",
        Ev.COPY_COMPLETE: "copied",
        Ev.FINISHED_REPORTED: "reported",
        Ev.DELIVERED: "delivered",
        Ev.COMPLETION_APPLIED: "applied",
    }
    for ev in run.trace.events:
        if ev.kind is Ev.RESTART:
            lives = {k: v for k, v in lives.items() if v.applied is not None}
        elif ev.kind is Ev.DISPATCH:
            lives[str(ev.op)] = _LoadLife(ev.t)
        elif ev.kind is Ev.COPY_FENCE_ERROR and str(ev.op) in lives:
            lives[str(ev.op)].fenced = True
        elif ev.kind in fields and ev.op is not None and str(ev.op) in lives:
            life = lives[str(ev.op)]
            if getattr(life, fields[ev.kind]) is None:
                setattr(life, fields[ev.kind], ev.t)
    return lives


def no_false_stop(run: RunResult) -> list[Violation]:
    """When every retrieve and copy completed within the deadline of its own clock, as
    the polling worker saw it, and no completion was lost, the engine never stops.

    A completion is lost when the worker reported it and it never reached the
    scheduler's inbox (``delivered``). One that reached the inbox but was not applied
    when the engine stopped is not lost: the scheduler stopped before applying what it
    had been told, and a stop naming such a load is false whatever else happened."""
    stop = next(iter(run.trace.of(Ev.STOP)), None)
    if stop is None or stop.op is None:
        return []
    deadline = run.config.transfer_deadline_s
    lives = _load_lives(run)
    named = lives.get(str(stop.op))
    if named is not None and named.delivered is not None and named.applied is None:
        return [
            Violation(
                "no_false_stop",
                f"engine stopped ({stop.data['error']}) on a load whose completion had reached "
                f"the scheduler at t={named.delivered:.3f}s and was not yet applied",
                str(stop.op),
                stop.t,
            )
        ]
    for life in lives.values():
        if life.submitted is None:
            continue
        if (life.retrieved if life.retrieved is not None else stop.t) - life.submitted > deadline:
            return []
        if (
            life.enqueued is not None
            and (life.copied if life.copied is not None else stop.t) - life.enqueued > deadline
        ):
            return []
        if life.reported is not None and life.delivered is None and life.applied is None:
            return []  # a completion was lost on the way: stopping is right
        if (
            life.fenced
            and (life.copied if life.copied is not None else stop.t) - life.submitted > deadline
        ):
            return []  # a fence raised and the restore took longer than its submission clock
    return [
        Violation(
            "no_false_stop",
            f"engine stopped ({stop.data['error']}) though every transfer finished within {deadline:g}s of its own clock",
            str(stop.op),
            stop.t,
        )
    ]


def liveness(run: RunResult) -> list[Violation]:
    """Nothing hangs; a load never reported terminal stops the engine, with an error
    naming it, within one bound after the last load dispatched before it finished."""
    if run.hung:
        return [
            Violation("liveness", "the engine neither finished nor stopped within the run's limit")
        ]
    lives = _load_lives(run)
    stop = next(iter(run.trace.of(Ev.STOP)), None)
    stuck = [op for op, life in lives.items() if life.applied is None]
    if not stuck:
        return []
    if stop is None:
        return [
            Violation("liveness", "a load was never terminal and the engine did not stop", stuck[0])
        ]
    out = []
    if stop.op is not None and str(stop.op) not in stuck:
        out.append(
            Violation("liveness", f"stop names {stop.op}, which had finished", str(stop.op), stop.t)
        )
    order = list(lives)
    first = stuck[0]
    before = [lives[o].applied for o in order[: order.index(first)] if lives[o].applied is not None]
    ref = max([lives[first].dispatched, *before])
    slack = _longest_gap(run) + run.config.idle_tick_s
    limit = ref + run.config.bound_s + slack
    if stop.t > limit + 1e-9:
        out.append(
            Violation(
                "liveness",
                f"stopped {stop.t - ref:.1f}s after the last load ahead of {first} finished; the bound is {run.config.bound_s:g}s",
                first,
                stop.t,
            )
        )
    return out


def _longest_gap(run: RunResult) -> float:
    """The longest forward: bounds are checked at step starts, so a stop may come that
    much after the bound ran out."""
    return max((e.data["duration"] for e in run.trace.of(Ev.FORWARD_START)), default=0.0)


# The accounting properties (what was loaded, which operations ended, what is held).
from faults.properties.ledger import efficiency, exactly_once, resources  # noqa: E402

PROPERTIES: dict[str, Checker] = {
    "correctness": correctness,
    "keys": keys,
    "identity": identity,
    "grid": grid,
    "hybrid": hybrid,
    "no_false_stop": no_false_stop,
    "liveness": liveness,
    "efficiency": efficiency,
    "exactly_once": exactly_once,
    "resources": resources,
}
# "determinism" compares two runs; faults.campaign.execute checks it.
