"""Properties checked over a run's trace (docs/design.md#properties).

Each checker reads only the trace and what the run was made from (requests, geometry,
the model's cold run): never the name of a rule variant or a fault. A planted regression
is caught when one of these finds a violation in its run.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from dataclasses import dataclass

from kvfault.fakes.model import DeterministicModel
from kvfault.faults.properties.names import Prop
from kvfault.faults.properties.registry import Properties
from kvfault.faults.properties.violation import Checker, Violation
from kvfault.faults.runs import RunResult
from kvfault.reference.stack.worker import page_digest
from kvfault.reference.trace import Ev, TraceEvent
from kvfault.reference.types import Request


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


def usage(run: RunResult) -> list[Violation]:
    """What an answer reports about itself holds: where an output records the tokens
    it reports as cached (``cached``), they cover the prefix its request loaded from
    the tier (the ``kv_end`` of its last load the engine applied as finished). Apart
    from ``correctness`` so that a wrong count and wrong tokens are told apart (a fix
    of one must not need a fix of the other to be seen)."""
    kv_end: dict[str, int] = {}
    loaded: dict[str, int] = {}
    out: list[Violation] = []
    for ev in run.trace.of(Ev.DISPATCH, Ev.COMPLETION_APPLIED, Ev.OUTPUT):
        if ev.kind is Ev.DISPATCH and ev.op is not None:
            kv_end[str(ev.op)] = int(ev.data.get("kv_end", 0))
        elif ev.kind is Ev.COMPLETION_APPLIED and ev.op is not None and ev.req_id:
            if ev.data.get("outcome") == "finished" and str(ev.op) in kv_end:
                loaded[ev.req_id] = kv_end[str(ev.op)]
        elif ev.kind is Ev.OUTPUT and "cached" in ev.data and ev.req_id:
            need = loaded.get(ev.req_id, 0)
            if int(ev.data["cached"]) < need:
                out.append(
                    Violation(
                        Prop.USAGE,
                        f"usage of {ev.req_id} reports {ev.data['cached']} cached tokens, "
                        f"not the {need} it loaded from the tier",
                        t=ev.t,
                    )
                )
    return out


def correctness(run: RunResult) -> list[Violation]:
    """Every output equals the cold run's; every restored range equals recompute; a run
    that ended normally answered every request."""
    model, outputs = _COLD.of(run)
    bs = run.config.geometry.block_size
    out: list[Violation] = []
    for ev in run.trace.of(Ev.OUTPUT):
        assert ev.req_id is not None  # an output names its request
        req = run.requests[ev.req_id]
        cold = outputs.get(req)
        if cold is None:
            cold = outputs[req] = model.cold_output(req)
        if tuple(ev.data["tokens"]) != cold:
            out.append(
                Violation(
                    Prop.CORRECTNESS, f"output of {ev.req_id} differs from its cold run", t=ev.t
                )
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
        assert ev.req_id is not None  # a copy names its load, and the load its request
        req = run.requests[ev.req_id]
        expected = page_digest(
            model.cold_pages(req)[d.data["start"] // bs : d.data["kv_end"] // bs]
        )
        if ev.data["digest"] != expected:
            out.append(
                Violation(
                    Prop.CORRECTNESS, "restored pages differ from recompute", str(ev.op), ev.t
                )
            )
    if not run.stop and not run.hung and not run.startup_error:
        answered = {e.req_id for e in run.trace.of(Ev.OUTPUT)}
        aborted = run.notes.get("aborted", ())  # the client stopped waiting for these
        assert isinstance(aborted, (list, tuple))
        missing = sorted(set(run.requests) - answered - set(aborted))
        if missing:
            out.append(
                Violation(
                    Prop.CORRECTNESS, f"{len(missing)} requests never answered, e.g. {missing[0]}"
                )
            )
    return out


def keys(run: RunResult) -> list[Violation]:
    """No key is shared by requests of different media at any key site, the tier's
    retrieves and stores included; and one content has one key: every retrieve and
    store the worker sent for the same prefix (the same token ids and media, up to the
    operation's end) used the same key (per tensor-parallel rank: each rank's shard is
    its own data), so a load cannot look for its data under
    another key than the one its saves stored it under."""
    seeds: dict[tuple[str, str], set[int]] = defaultdict(set)
    first_seen: dict[tuple[str, str], TraceEvent] = {}
    for ev in run.trace.of(Ev.KEY, Ev.SENT):
        if ev.data["first"] is None:
            continue
        if ev.kind is Ev.KEY:
            k, seed = (ev.data["site"], ev.data["first"]), ev.data["seed"]
        elif ev.req_id in run.requests:
            k, seed = (ev.data["what"], ev.data["first"]), run.requests[ev.req_id].cache_seed
        else:
            continue
        seeds[k].add(seed)
        first_seen.setdefault(k, ev)
    out = [
        Violation(
            Prop.KEYS,
            f"{site} key {key[:16]} shared by {len(s)} different media seeds",
            t=first_seen[(site, key)].t,
        )
        for (site, key), s in sorted(seeds.items())
        if len(s) > 1
    ]
    return out + _one_key_per_content(run)


def _one_key_per_content(run: RunResult) -> list[Violation]:
    from kvfault.faults.properties.content import ContentChains

    chunk = run.config.geometry.chunk_size
    chains = ContentChains(run)
    # (content key, TP rank) -> the first operation that sent it: each tensor-parallel
    # rank files its own shard, under a key naming its rank (``rank``: absent for one).
    sent_as: dict[tuple[int, int], TraceEvent] = {}
    out: list[Violation] = []
    for ev in run.trace.of(Ev.SENT):
        last, req = ev.data["last"], ev.req_id
        if last is None or req not in run.requests:
            continue
        chain = chains.of(req)
        i = ev.data["end"] // chunk - 1
        if not 0 <= i < len(chain):
            continue
        first = sent_as.setdefault((chain[i], ev.data.get("rank", 0)), ev)
        if first.data["last"] != last:
            out.append(
                Violation(
                    Prop.KEYS,
                    f"{ev.data['what']} sends tokens [0, {ev.data['end']}) of {req} under key "
                    f"{last[:16]}; {first.data['what']} {first.op} sent the same content "
                    f"under {first.data['last'][:16]}",
                    str(ev.op),
                    ev.t,
                )
            )
    return out


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
                        Prop.IDENTITY,
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
            Prop.GRID,
            f"state image at {ev.data['position']} is off the {chunk}-token chunk grid: lost",
            str(ev.op),
            ev.t,
        )
        for ev in run.trace.of(Ev.STATE_SAVE)
        if ev.data["grid"] == "chunk" and ev.data["position"] % chunk
    ]


def hybrid(run: RunResult) -> list[Violation]:
    """A hybrid's hit claims exactly the joint boundary, derived here from the prompt,
    the tier's state grid and what completed saves put in the tier (never from what the
    lookup reports): the last grid position below the prompt end where a state image of
    the same content is visible, at or below the KV prefix the tier holds visible. No
    claim is the whole prompt. Every state image a save asks for lies where some hit
    can use it: on the tier's state grid, below the prompt end and within the KV the
    tier can hold for the prompt (its full chunks).

    A save reported failed may have written its chunks and images anyway (its answer was
    lost, or it failed part-way): a claim beyond the joint boundary is also accepted at
    a grid position that such writes could have made one."""
    from kvfault.faults.properties.content import ContentChains, TierAccount

    geo = run.config.geometry
    bs, chunk = geo.block_size, geo.chunk_size
    grid = chunk if run.config.state_grid == "chunk" else bs
    account = TierAccount(run)
    blocks = ContentChains(run, bs)  # a state image at p names the prefix [0, p)
    states: dict[int, float] = {}  # content of an image's prefix -> visible from
    maybe_states: dict[int, float] = {}  # ... written by a save reported failed, perhaps
    asked: dict[object, list[int]] = {}  # save op -> positions of the images it stores
    out = []
    kept_grid: dict[object, int] = {}  # save op -> the grid the tier keeps images on
    kinds = (Ev.STATE_SAVE, Ev.LOOKUP, Ev.SENT, *TierAccount.KINDS)
    for ev in run.trace.of(*kinds):
        kind = ev.kind
        if kind is Ev.STATE_SAVE:
            assert ev.req_id is not None  # a state save names its request
            p, n = ev.data["position"], run.requests[ev.req_id].prompt_len
            asked.setdefault(ev.op, []).append(p)
            if p % grid or not 0 < p <= min(n - 1, geo.floor_chunk(n)):
                out.append(
                    Violation(
                        Prop.HYBRID,
                        f"state image at {p} of {ev.req_id} ({n} tokens) lies where no hit "
                        f"can use it (a hit claims a {grid}-token grid position below the "
                        f"prompt end, within the {geo.floor_chunk(n)} tokens of full chunks)",
                        str(ev.op),
                        ev.t,
                    )
                )
        elif kind is Ev.LOOKUP:
            d = ev.data
            if d["claim"] >= d["prompt_len"]:
                out.append(
                    Violation(
                        Prop.HYBRID, f"{ev.req_id} claims its whole prompt ({d['claim']})", t=ev.t
                    )
                )
            if not d["hybrid"] or ev.req_id not in run.requests:
                continue
            n = d["prompt_len"]
            kv = min(account.visible_prefix(ev.req_id, ev.t), n - 1)
            chain = blocks.of(ev.req_id)
            joint = max(
                (
                    p
                    for p in range(grid, kv + 1, grid)
                    if states.get(chain[p // bs - 1], float("inf")) <= ev.t
                ),
                default=0,
            )
            claim = d["claim"]
            if claim != joint and not (
                joint < claim <= min(account.visible_prefix(ev.req_id, ev.t, True), n - 1)
                and claim % grid == 0
                and min(
                    states.get(chain[claim // bs - 1], float("inf")),
                    maybe_states.get(chain[claim // bs - 1], float("inf")),
                )
                <= ev.t
            ):
                out.append(
                    Violation(
                        Prop.HYBRID,
                        f"{ev.req_id} claims {claim} of {n} tokens; the joint boundary is {joint}",
                        t=ev.t,
                    )
                )
        elif kind is Ev.SENT:
            if "state_grid" in ev.data:  # the tier's own grid, whatever the stack's is
                kept_grid[ev.op] = chunk if ev.data["state_grid"] == "chunk" else bs
        else:
            if kind is Ev.FINISHED_REPORTED and ev.op in asked:
                assert ev.req_id is not None  # a report names its save's request
                # The tier keeps an image on its grid and stamps each write anew.
                chain = blocks.of(ev.req_id)
                step = kept_grid.get(ev.op, grid)
                for p in asked[ev.op]:
                    if p % step or not 0 < p <= len(chain) * bs:
                        continue
                    if ev.data.get("outcome") == "finished":
                        states[chain[p // bs - 1]] = account.visible_at(ev)
                    else:
                        maybe_states.setdefault(chain[p // bs - 1], account.maybe_from(ev))
            account.feed(ev)
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
                Prop.NO_FALSE_STOP,
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
            Prop.NO_FALSE_STOP,
            f"engine stopped ({stop.data['error']}) though every transfer finished within {deadline:g}s of its own clock",
            str(stop.op),
            stop.t,
        )
    ]


def liveness(run: RunResult) -> list[Violation]:
    """Nothing hangs; a load never reported terminal stops the engine, with an error
    naming it, within one bound after the last load dispatched before it finished."""
    if run.hung:
        where = run.notes.get("hung_in")  # a real tier's hung call, with its innermost frame
        return [
            Violation(
                Prop.LIVENESS,
                "the engine neither finished nor stopped within the run's limit"
                + (f": {where}" if where else ""),
            )
        ]
    lives = _load_lives(run)
    stop = next(iter(run.trace.of(Ev.STOP)), None)
    stuck = [op for op, life in lives.items() if life.applied is None]
    if not stuck:
        return []
    if stop is None:
        return [
            Violation(
                Prop.LIVENESS, "a load was never terminal and the engine did not stop", stuck[0]
            )
        ]
    out = []
    if stop.op is not None and str(stop.op) not in stuck:
        out.append(
            Violation(
                Prop.LIVENESS, f"stop names {stop.op}, which had finished", str(stop.op), stop.t
            )
        )
    order = list(lives)
    first = stuck[0]
    before = [a for o in order[: order.index(first)] if (a := lives[o].applied) is not None]
    ref = max([lives[first].dispatched, *before])
    slack = _longest_gap(run) + run.config.idle_tick_s
    limit = ref + run.config.bound_s + slack
    if stop.t > limit + 1e-9:
        out.append(
            Violation(
                Prop.LIVENESS,
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
from kvfault.faults.properties.ledger import (  # noqa: E402
    efficiency,
    exactly_once,
    hbm_owners,
    load_failures,
    resources,
)


def _built_in() -> dict[str, Checker]:
    return dict(_CHECKERS)


_CHECKERS: dict[str, Checker] = {
    Prop.CORRECTNESS: correctness,
    Prop.USAGE: usage,
    Prop.KEYS: keys,
    Prop.IDENTITY: identity,
    Prop.GRID: grid,
    Prop.HYBRID: hybrid,
    Prop.NO_FALSE_STOP: no_false_stop,
    Prop.LIVENESS: liveness,
    Prop.EFFICIENCY: efficiency,
    Prop.LOAD_FAILURES: load_failures,
    Prop.EXACTLY_ONCE: exactly_once,
    Prop.RESOURCES: resources,
    Prop.HBM_OWNERS: hbm_owners,
}
# Prop.DETERMINISM compares two runs; faults.campaign.execute checks it.
# The one registry: these, and every Property class of this package (property.py).
PROPERTIES = Properties(_built_in)
