"""Accounting properties: what the stack loaded, which operations ended, what it holds.

- ``efficiency`` — no claim exceeds what the rules allow, and no silent miss: a request
  whose prefix the tier holds (stored by an earlier save that completed, under the
  request's own content: its token ids and its media) and which nothing evicted, loads
  it; a resend of the same prompt with the same media hits.
- ``exactly_once`` — every load and save reaches exactly one terminal report and one
  applied completion; operation ids never repeat within a run (within one scheduler's
  life, and across restarts, where a completion from before one could still arrive).
- ``resources`` — when an engine's run ends with nothing left to do, no request holds
  HBM blocks (every finished request gave its blocks back), no load awaits completion,
  no worker operation and no tier ticket is pending.

Each reads the trace in one pass, with dicts: no per-event rescans.
"""

from __future__ import annotations

from collections import Counter

from faults.properties.violation import Violation
from faults.runs import RunResult
from reference.rules.keys import block_hash_chain
from reference.trace import Ev
from reference.types import OperationId, OpKind


def _content_chain(run: RunResult, req_id: str, cache: dict[str, list[int]]) -> list[int]:
    """A request's content keys, one per full chunk: a chain over its token ids seeded
    with its media digest. Independent of the stack's own keys, so a stack that keys
    wrongly cannot agree with itself here."""
    chain = cache.get(req_id)
    if chain is None:
        req = run.requests[req_id]
        chain = block_hash_chain(
            req.prompt_token_ids, run.config.geometry.chunk_size, req.cache_seed
        )
        cache[req_id] = chain
    return chain


def efficiency(run: RunResult) -> list[Violation]:
    """No claim exceeds the rules: the tier's hit lies on its chunk grid and within the
    prompt, the KV transferred lies on the grid and within the hit, the claim within the
    KV transferred and at most the prompt minus one token; a claim beyond HBM's own hit
    is loaded (dispatched). No silent miss: at a lookup, the tier must report at least
    the prefix that completed saves of the same content put there (visible by then, and
    not evicted since: a fault event's evidence names late visibility as ``delay_s`` and
    a dropped chunk as ``chunk``); a chunk is visible from the save that first put it
    there, since a store of a chunk the tier holds writes nothing; a dense claim must
    then cover it.

    Applies to runs whose engines share one tier."""
    chunk = run.config.geometry.chunk_size
    out: list[Violation] = []
    chains: dict[str, list[int]] = {}
    held: dict[int, float] = {}  # content key -> when it became visible
    save_range: dict[OperationId, tuple[int, int]] = {}
    late: dict[OperationId, float] = {}  # save op -> visible at (late visibility)
    awaiting_load: dict[str, float] = {}  # req -> lookup time: claim beyond HBM, no load yet
    for ev in run.trace.events:
        kind = ev.kind
        if kind is Ev.SAVE:
            save_range[ev.op] = (ev.data["start"], ev.data["end"])
        elif kind is Ev.FAULT and ev.op is not None:
            if "delay_s" in ev.data:
                late[ev.op] = ev.t + ev.data["delay_s"]
            elif "chunk" in ev.data and ev.req_id in run.requests:
                chain = _content_chain(run, ev.req_id, chains)
                if ev.data["chunk"] < len(chain):
                    held.pop(chain[ev.data["chunk"]], None)
        elif kind is Ev.FINISHED_REPORTED:
            # The worker reports a save finished in the poll that saw the tier write
            # it: the tier's write order, whether or not the completion reaches the
            # scheduler (``save_done``) afterwards.
            rng = save_range.get(ev.op)
            if rng is None or ev.data.get("outcome") != "finished":
                continue
            visible = late.get(ev.op, ev.t)
            chain = _content_chain(run, ev.req_id, chains)
            for i in range(rng[0] // chunk, min(rng[1] // chunk, len(chain))):
                # A store of a chunk the tier already holds writes nothing: the chunk
                # stays visible from when the save that put it there made it visible
                # (a late one too), not from this later save.
                held.setdefault(chain[i], visible)
        elif kind is Ev.DISPATCH:
            awaiting_load.pop(ev.req_id, None)
        elif kind is Ev.LOOKUP:
            out.extend(_claim_bounds(ev, chunk))
            d = ev.data
            if d["claim"] > d["hbm_hit"]:
                awaiting_load[ev.req_id] = ev.t
            if ev.req_id not in run.requests:
                continue
            expected = 0
            for key in _content_chain(run, ev.req_id, chains):
                if held.get(key, float("inf")) > ev.t:
                    break
                expected += chunk
            expected = min(expected, d["prompt_len"])
            if d["kv_hit"] < expected:
                out.append(
                    Violation(
                        "efficiency",
                        f"silent miss: {ev.req_id} hit {d['kv_hit']} tokens; completed saves "
                        f"of its content hold {expected}",
                        t=ev.t,
                    )
                )
            elif not d["hybrid"]:
                loadable = expected - expected % chunk
                loadable = min(loadable, (d["prompt_len"] - 1) - (d["prompt_len"] - 1) % chunk)
                if max(d["claim"], d["hbm_hit"]) < loadable:
                    out.append(
                        Violation(
                            "efficiency",
                            f"{ev.req_id} claims {d['claim']} tokens of a {expected}-token "
                            f"tier hit; {loadable} are loadable",
                            t=ev.t,
                        )
                    )
    for req_id, t in awaiting_load.items():
        out.append(
            Violation(
                "efficiency",
                f"{req_id} claimed tokens beyond its HBM hit and never loaded them",
                t=t,
            )
        )
    return out


def _claim_bounds(ev, chunk: int) -> list[Violation]:
    d = ev.data
    n, hit, end, claim = d["prompt_len"], d["kv_hit"], d["kv_end"], d["claim"]
    problems = []
    if hit % chunk or hit > n:
        problems.append(f"tier hit {hit} is off the {chunk}-token grid or past the prompt ({n})")
    if end % chunk or end > hit:
        problems.append(f"transfers [0, {end}) off the grid or beyond the tier hit {hit}")
    if claim > end or claim > n - 1:
        problems.append(f"claims {claim} of {n} tokens with KV up to {end}")
    return [Violation("efficiency", f"{ev.req_id}: {p}", t=ev.t) for p in problems]


def exactly_once(run: RunResult) -> list[Violation]:
    """Every dispatched load and every save reaches exactly one terminal report from
    the worker and, once delivered, one applied completion; no operation id is used
    twice in a run. An operation is excused from reaching its end when its engine
    stopped, hung or restarted with it in flight, or when its completion was lost on
    the way (reported, never delivered: liveness judges what that does to a load)."""
    out: list[Violation] = []
    first: dict[OperationId, float] = {}
    reports: Counter[OperationId] = Counter()
    applied: Counter[OperationId] = Counter()
    delivered: set[OperationId] = set()
    live: dict[OperationId, float] = {}  # this life's operations not yet applied

    def once(counter: Counter[OperationId], op: OperationId, what: str, t: float) -> None:
        counter[op] += 1
        if counter[op] == 2:
            out.append(Violation("exactly_once", f"{what} twice", str(op), t))

    for ev in run.trace.events:
        kind, op = ev.kind, ev.op
        if kind is Ev.DISPATCH or kind is Ev.SAVE:
            if op in first:
                out.append(
                    Violation(
                        "exactly_once",
                        f"operation id reused (first used at t={first[op]:.3f}s)",
                        str(op),
                        ev.t,
                    )
                )
            else:
                first[op] = ev.t
            live[op] = ev.t
        elif kind is Ev.FINISHED_REPORTED:
            once(reports, op, "reported terminal", ev.t)
        elif kind is Ev.DELIVERED:
            delivered.add(op)
        elif (kind is Ev.COMPLETION_APPLIED and not ev.data.get("stale")) or kind is Ev.SAVE_DONE:
            once(applied, op, "completion applied", ev.t)
            live.pop(op, None)
        elif kind is Ev.RESTART or kind is Ev.STOP:
            live.clear()  # in flight when the engine died or stopped: gone with it
    if run.hung:
        return out
    for op, t in live.items():
        if not reports[op]:
            what = "load" if op.kind is OpKind.LOAD else "save"
            out.append(
                Violation("exactly_once", f"{what} never reached a terminal report", str(op), t)
            )
        elif op in delivered:
            out.append(
                Violation("exactly_once", "completion delivered but never applied", str(op), t)
            )
    return out


def resources(run: RunResult) -> list[Violation]:
    """When an engine's run ends with nothing left to do (``quiescent``), it holds no
    HBM block, no load awaiting completion, no unfinished request, and its worker has
    no load, save or tier ticket pending."""
    out = []
    for ev in run.trace.of(Ev.QUIESCENT):
        held = {k: v for k, v in ev.data.items() if k != "engine" and v}
        if held:
            what = ", ".join(f"{k}={v}" for k, v in sorted(held.items()))
            out.append(
                Violation(
                    "resources", f"{ev.data.get('engine')} quiescent but still holds {what}", t=ev.t
                )
            )
    return out
