"""Accounting properties: what the stack loaded, which operations ended, what it holds.

- ``efficiency`` — no claim exceeds what the rules allow, and no silent miss: a request
  whose prefix the tier holds (stored by an earlier save that completed, under the
  request's own content: its token ids and its media) and which nothing evicted, loads
  it; a resend of the same prompt with the same media hits.
- ``load_failures`` — no unexplained load failure: a load of a range the tier holds
  (the same account) succeeds unless an injected fault could explain its failure.
- ``exactly_once`` — every load and save reaches exactly one terminal report and one
  applied completion; operation ids never repeat within a run (within one scheduler's
  life, and across restarts, where a completion from before one could still arrive).
- ``hbm_owners`` — at most one live owner per HBM block, prefix-cache sharing counted
  by reference (what the scheduler took and freed, not what the pool raises); a block
  shared from the prefix cache lies within the request's HBM hit (never computed into).
- ``resources`` — when an engine's run ends with nothing left to do, no request holds
  HBM blocks (every finished request gave its blocks back), no load awaits completion,
  no worker operation and no tier ticket is pending.

Each reads the trace in one pass, with dicts: no per-event rescans.
"""

from __future__ import annotations

from collections import Counter, deque
from itertools import count, repeat

from kvfault.faults.properties.content import TierAccount
from kvfault.faults.properties.names import Prop
from kvfault.faults.properties.violation import Violation
from kvfault.faults.runs import RunResult
from kvfault.reference.trace import Ev, TraceEvent
from kvfault.reference.types import OperationId, OpKind


def efficiency(run: RunResult) -> list[Violation]:
    """No claim exceeds the rules: the tier's hit lies on its chunk grid and within the
    prompt, the KV transferred lies on the grid and within the hit, the claim within the
    KV transferred and at most the prompt minus one token; a claim beyond HBM's own hit
    is loaded (dispatched). No silent miss: at a lookup, the tier must report at least
    the prefix that completed saves of the same content put there (visible by then, and
    not evicted since: a fault event's evidence names late visibility as ``delay_s`` and
    a dropped chunk as ``chunk``); a chunk is visible from the save that first put it
    there, since a store of a chunk the tier holds writes nothing; a dense claim must
    then cover it, on the chunk grid and short of the prompt's last token. A lookup
    marked ``sidecars`` (a hybrid that resumes only where the request's state at a
    boundary is stored) need cover it only up to the largest such boundary whose
    sidecar the tier holds (``sidecar`` events; ``_Sidecars``).

    Applies to runs whose engines share one tier."""
    chunk = run.config.geometry.chunk_size
    out: list[Violation] = []
    account = TierAccount(run)
    awaiting_load: dict[str, float] = {}  # req -> lookup time: claim beyond HBM, no load yet
    sidecars = _Sidecars(account)
    for ev in run.trace.of(Ev.DISPATCH, Ev.LOOKUP, Ev.SIDECAR, *TierAccount.KINDS):
        kind = ev.kind
        if kind is Ev.SIDECAR:
            sidecars.stored(ev)
        elif kind is Ev.DISPATCH:
            assert ev.req_id is not None  # a dispatch names its load and its request
            awaiting_load.pop(ev.req_id, None)
        elif kind is Ev.LOOKUP:
            assert ev.req_id is not None  # a lookup names its request
            out.extend(_claim_bounds(ev, chunk))
            d = ev.data
            if d["claim"] > d["hbm_hit"]:
                awaiting_load[ev.req_id] = ev.t
                out.extend(_hbm_reload(ev))
            if ev.req_id not in run.requests:
                continue
            expected = min(account.visible_prefix(ev.req_id, ev.t), d["prompt_len"])
            if d["kv_hit"] < expected:
                out.append(
                    Violation(
                        Prop.EFFICIENCY,
                        f"silent miss: {ev.req_id} hit {d['kv_hit']} tokens; completed saves "
                        f"of its content hold {expected}",
                        t=ev.t,
                    )
                )
            elif not d["hybrid"]:
                loadable = expected - expected % chunk
                loadable = min(loadable, (d["prompt_len"] - 1) - (d["prompt_len"] - 1) % chunk)
                if d.get("sidecars"):
                    loadable = sidecars.boundary(ev.req_id, loadable, ev.t)
                if max(d["claim"], d["hbm_hit"]) < loadable:
                    out.append(
                        Violation(
                            Prop.EFFICIENCY,
                            f"{ev.req_id} claims {d['claim']} tokens of a {expected}-token "
                            f"tier hit; {loadable} are loadable",
                            t=ev.t,
                        )
                    )
        else:
            account.feed(ev)
            if kind is Ev.FINISHED_REPORTED:
                sidecars.reported(ev)
    for req_id, t in awaiting_load.items():
        out.append(
            Violation(
                Prop.EFFICIENCY,
                f"{req_id} claimed tokens beyond its HBM hit and never loaded them",
                t=t,
            )
        )
    return out


class _Sidecars:
    """The state sidecars (``sidecar`` events) the tier holds, by the content of the
    prefix each restores: one counts once it was stored and its save reported finished
    (visible from then, as that save's chunks), never from what the stack says it
    committed."""

    def __init__(self, account: TierAccount):
        self.account = account
        self.by_save: dict[OperationId, list[int]] = {}  # save -> content keys it stored
        self.reported_at: dict[OperationId, float] = {}  # save reported finished -> visible
        self.held: dict[int, float] = {}  # content key -> visible from

    def stored(self, ev: TraceEvent) -> None:
        assert ev.op is not None and ev.req_id is not None  # a sidecar names its save
        if ev.req_id not in self.account.run.requests:
            return
        chunk, b = self.account.chunk, ev.data["boundary"]
        chain = self.account.chains.of(ev.req_id)
        if b <= 0 or b % chunk or b // chunk > len(chain):
            return  # no boundary on the chunk grid a hit can resume at
        key = chain[b // chunk - 1]
        self.by_save.setdefault(ev.op, []).append(key)
        if ev.op in self.reported_at:
            self._visible(key, max(self.reported_at[ev.op], ev.t))

    def reported(self, ev: TraceEvent) -> None:
        if ev.op is None or ev.data.get("outcome") != "finished":
            return
        at = self.account.visible_at(ev)
        self.reported_at[ev.op] = at
        for key in self.by_save.get(ev.op, ()):
            self._visible(key, at)

    def _visible(self, key: int, at: float) -> None:
        self.held[key] = min(self.held.get(key, at), at)

    def boundary(self, req_id: str, upto: int, t: float) -> int:
        """The largest chunk boundary at most ``upto`` where a sidecar of the request's
        prefix is held and visible at ``t``; 0 if none."""
        chunk, chain = self.account.chunk, self.account.chains.of(req_id)
        for b in range(upto - upto % chunk, 0, -chunk):
            if self.held.get(chain[b // chunk - 1], float("inf")) <= t:
                return b
        return 0


def load_failures(run: RunResult) -> list[Violation]:
    """No unexplained load failure: a load whose whole range the tier holds (by the
    content account of ``efficiency``: completed saves of the same content, nothing
    dropped since) succeeds, unless an injected fault could explain the failure: a
    fault event naming the load, or one naming no operation (a wire fault, a slow
    forward) while the load was in flight. An injected store failure that left chunks
    only maybe held (``TierAccount.unstored``) explains the failed loads of them until
    one has failed: a load of them dispatched after that, which fails again with no
    save having put them there since, is unexplained (the stack knew they were not
    stored and neither stored them again nor stopped asking for them). Catches a load
    that sends other ids than the lookup and the saves of its content used: it fails
    like an eviction, the stack recomputes, and nothing else notices."""
    out: list[Violation] = []
    account = TierAccount(run)
    flying: dict[OperationId, tuple[tuple[int, int], bool]] = {}  # load -> (range, excused)
    dispatched: dict[OperationId, float] = {}
    told: dict[int, float] = {}  # unstored content key -> when a failed load of it ended
    kinds = (Ev.DISPATCH, Ev.RETRIEVE_TERMINAL, Ev.RESTART, *TierAccount.KINDS)
    for ev in run.trace.of(*kinds):
        kind = ev.kind
        if kind is Ev.DISPATCH:
            assert ev.op is not None  # a dispatch names its load
            flying[ev.op] = ((ev.data["start"], ev.data["kv_end"]), False)
            dispatched[ev.op] = ev.t
        elif kind is Ev.RETRIEVE_TERMINAL:
            assert ev.op is not None  # a retrieve's end names its load
            # Kept past its first end: each tensor-parallel rank reports its own retrieve.
            (start, end), excused = flying.get(ev.op, ((0, 0), True))
            # The tier reads when it answers: what it holds then is what counts.
            held = ev.req_id in run.requests and account.holds(ev.req_id, start, end)
            if not ev.data["ok"] and held and not excused:
                out.append(
                    Violation(
                        Prop.LOAD_FAILURES,
                        f"a load of data the tier holds failed ({ev.data['error']}) and no "
                        "injected fault explains it",
                        str(ev.op),
                        ev.t,
                    )
                )
            elif not ev.data["ok"] and not excused and ev.req_id in run.requests:
                keys = account.keys(ev.req_id, start, end) or []
                since = account.unstored
                sent = dispatched.get(ev.op, ev.t)
                again = [k for k in keys if k in since and since[k] <= told.get(k, -1.0) < sent]
                if again and all(k in account.held or k in again for k in keys):
                    out.append(
                        Violation(
                            Prop.LOAD_FAILURES,
                            f"a load failed ({ev.data['error']}) of chunks an injected store "
                            "failure left unstored, after an earlier load of them had failed, "
                            "with no save of them since",
                            str(ev.op),
                            ev.t,
                        )
                    )
                for k in keys:
                    if k in since and told.get(k, -1.0) < since[k]:
                        told[k] = ev.t  # the first failure since it became unstored
        elif kind is Ev.RESTART:
            flying.clear()  # the worker that sent them is gone: never answered
        else:
            if kind is Ev.FAULT:
                if ev.op in flying:
                    flying[ev.op] = (flying[ev.op][0], True)
                elif ev.op is None:
                    flying = {op: (rng, True) for op, (rng, _) in flying.items()}
            account.feed(ev)
    return out


def _hbm_reload(ev: TraceEvent) -> list[Violation]:
    """A claim from the tier over a prefix HBM still holds in blocks no live request
    owns (``hbm_resident``: the tier reads the pages themselves, where the stack keeps
    an HBM prefix cache) is a load the stack's own cache should have served. Capped at
    the prompt minus one token, the most any HBM hit may claim."""
    d = ev.data
    resident = d.get("hbm_resident")
    if resident is None:
        return []
    usable = min(resident, d["prompt_len"] - 1)
    if usable <= d["hbm_hit"]:
        return []
    return [
        Violation(
            Prop.EFFICIENCY,
            f"{ev.req_id} loads from the tier [{d['hbm_hit']}, {min(usable, d['claim'])}) "
            f"that HBM still holds ({resident} tokens in free blocks; HBM hit {d['hbm_hit']})",
            t=ev.t,
        )
    ]


def _claim_bounds(ev: TraceEvent, chunk: int) -> list[Violation]:
    d = ev.data
    n, hit, end, claim = d["prompt_len"], d["kv_hit"], d["kv_end"], d["claim"]
    problems = []
    if hit % chunk or hit > n:
        problems.append(f"tier hit {hit} is off the {chunk}-token grid or past the prompt ({n})")
    if end % chunk or end > hit:
        problems.append(f"transfers [0, {end}) off the grid or beyond the tier hit {hit}")
    if claim > end or claim > n - 1:
        problems.append(f"claims {claim} of {n} tokens with KV up to {end}")
    return [Violation(Prop.EFFICIENCY, f"{ev.req_id}: {p}", t=ev.t) for p in problems]


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
            out.append(Violation(Prop.EXACTLY_ONCE, f"{what} twice", str(op), t))

    for ev in run.trace.events:
        kind, op = ev.kind, ev.op
        if kind is Ev.DISPATCH or kind is Ev.SAVE:
            assert op is not None  # every kind but RESTART and STOP here names its op
            if op in first:
                out.append(
                    Violation(
                        Prop.EXACTLY_ONCE,
                        f"operation id reused (first used at t={first[op]:.3f}s)",
                        str(op),
                        ev.t,
                    )
                )
            else:
                first[op] = ev.t
            live[op] = ev.t
        elif kind is Ev.FINISHED_REPORTED:
            assert op is not None
            once(reports, op, "reported terminal", ev.t)
        elif kind is Ev.DELIVERED:
            assert op is not None
            delivered.add(op)
        elif (kind is Ev.COMPLETION_APPLIED and not ev.data.get("stale")) or kind is Ev.SAVE_DONE:
            assert op is not None
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
                Violation(Prop.EXACTLY_ONCE, f"{what} never reached a terminal report", str(op), t)
            )
        elif op in delivered:
            out.append(
                Violation(Prop.EXACTLY_ONCE, "completion delivered but never applied", str(op), t)
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
                    Prop.RESOURCES,
                    f"{ev.data.get('engine')} quiescent but still holds {what}",
                    t=ev.t,
                )
            )
    return out


def hbm_owners(run: RunResult) -> list[Violation]:
    """At most one live owner per HBM block: a block a request takes that is not a
    prefix-cache hit has no live holder, a prefix-cache hit is shared only with holders
    that keep the same content in it (the same prefix of token ids and media, at the
    same block of their prompts), and a request frees only blocks it holds, once each.
    Every block a request shares lies within its HBM hit (its lookup's ``hbm_hit``): it
    computes from there on, so a shared block past it would be written while another
    request may hold it. An engine's restart gives back all of its blocks. Sharing is
    counted by reference: a block is free again when its last holder frees it. Checked
    from what the scheduler took and freed (``blocks`` events), never from what the
    pool raises."""
    from kvfault.reference.rules.keys import block_hash_chain

    bs = run.config.geometry.block_size
    out: list[Violation] = []
    engines: dict[str, _BlockHolders] = {}
    chains: dict[str, list[int]] = {}
    # Blocks each request took from the prefix cache, until its lookup (recorded right
    # after) says its HBM hit: (engine, the blocks).
    shared_by: dict[str, tuple[str, list[int]]] = {}

    def chain(req_id: str) -> list[int]:
        if req_id not in chains:
            req = run.requests.get(req_id)
            chains[req_id] = (
                block_hash_chain(req.prompt_token_ids, bs, req.cache_seed) if req else []
            )
        return chains[req_id]

    def bad(message: str, t: float) -> None:
        out.append(Violation(Prop.HBM_OWNERS, message, t=t))

    for ev in run.trace.of(Ev.BLOCKS, Ev.RESTART, Ev.LOOKUP):
        if ev.kind is Ev.LOOKUP:
            # A tier that records no ``blocks`` (atom) leaves nothing to compare.
            took_shared = shared_by.pop(ev.req_id, None) if ev.req_id is not None else None
            if took_shared is not None and len(took_shared[1]) * bs > ev.data["hbm_hit"]:
                engine, hits = took_shared
                bad(
                    f"{engine} block {hits[ev.data['hbm_hit'] // bs]} shared by {ev.req_id} "
                    f"from the prefix cache lies past its HBM hit {ev.data['hbm_hit']}: "
                    "it computes into a block it shares",
                    ev.t,
                )
            continue
        engine = ev.data["engine"]
        if ev.kind is Ev.RESTART:
            engines.pop(engine, None)
            continue
        pool = engines.get(engine)
        if pool is None:
            pool = engines[engine] = _BlockHolders()
        req, t = ev.req_id, ev.t
        assert req is not None  # blocks taken or freed name their request
        if "took" in ev.data:
            took, shared = ev.data["took"], ev.data["shared"]
            if shared:
                shared_by[req] = (engine, took[:shared])
            refs, owner = pool.refs, pool.owner
            fresh = took[shared:]
            taken = set(fresh)
            clash = refs.keys() & taken
            for b in sorted(clash, key=fresh.index)[:1]:
                bad(f"{engine} block {b} handed to {req} while {owner[b][0]} holds it", t)
            for i, b in enumerate(took[:shared]):  # prefix-cache hits: few, shared
                if b in refs:
                    theirs, j = owner[b]
                    if chain(theirs)[j : j + 1] != chain(req)[i : i + 1]:
                        bad(
                            f"{engine} block {b} shared by {req} and {theirs}, which hold "
                            "different content in it",
                            t,
                        )
                refs[b] = refs.get(b, 0) + 1
            for b in clash:  # counted once more, after the report
                refs[b] += 1
            refs.update(dict.fromkeys(taken - clash if clash else fresh, 1))
            owner.update(zip(fresh, zip(repeat(req), count(shared)), strict=False))
            pool.held.setdefault(req, []).append(took)
        else:
            freed = ev.data["freed"]
            lists = pool.held.get(req, [])
            if freed in lists:
                lists.remove(freed)
            else:
                bad(f"{req} frees {engine} blocks it does not hold, e.g. {freed[:1]}", t)
                continue
            refs = pool.refs
            if max(map(refs.__getitem__, freed), default=1) == 1 and len(set(freed)) == len(freed):
                deque(map(refs.__delitem__, freed), maxlen=0)  # each held once: all free
                continue
            for b in freed:
                n = refs[b]
                if n == 1:
                    del refs[b]
                else:
                    refs[b] = n - 1
    return out


class _BlockHolders:
    """One engine's HBM blocks as ``hbm_owners`` follows them: live references per
    block, the request (and block index) that last took each block fresh, and the
    block lists each request holds."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}
        self.owner: dict[int, tuple[str, int]] = {}
        self.held: dict[str, list[list[int]]] = {}
