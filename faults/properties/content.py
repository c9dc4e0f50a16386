"""What the tier holds, by content: the account the accounting properties share.

A request's content keys are a chain over its token ids seeded with its media digest,
one per full chunk, computed here and never taken from the stack's own keys: a stack
that keys wrongly cannot agree with itself. ``TierAccount`` reads a trace in order and
keeps, per content key, when the tier made that chunk visible.
"""

from __future__ import annotations

from kvfault.faults.runs import RunResult
from kvfault.reference.rules.keys import block_hash_chain
from kvfault.reference.trace import Ev, TraceEvent
from kvfault.reference.types import OperationId


class ContentChains:
    """Each request's content keys, one per full chunk (or per ``size`` tokens),
    computed once per request."""

    def __init__(self, run: RunResult, size: int | None = None):
        self._run = run
        self._chunk = size or run.config.geometry.chunk_size  # tokens per key
        self._chains: dict[str, list[int]] = {}

    def of(self, req_id: str) -> list[int]:
        chain = self._chains.get(req_id)
        if chain is None:
            req = self._run.requests[req_id]
            chain = block_hash_chain(req.prompt_token_ids, self._chunk, req.cache_seed)
            self._chains[req_id] = chain
        return chain


class TierAccount:
    """The chunks completed saves put in the tier, by content, as a trace shows them
    (fed every event in order with ``feed``).

    A save the worker reports finished (``finished_reported``: the poll that saw the
    tier write it; where the engine's finished save promises only that its blocks may
    be freed, the report's ``stored`` says how many tokens from the start the tier
    really holds, and only those count) adds the chunks the tier does not hold yet, visible from then on, or
    from ``delay_s`` later when a fault event reports late visibility for it; a store of
    a chunk already held writes nothing, so the chunk keeps the visibility of the save
    that first put it there. A fault event naming a dropped ``chunk`` removes it. A
    fault event naming a save ``unstored`` (an injected store failure, perhaps on one
    tensor-parallel rank of several, while the others stored and the save is reported
    finished) makes the chunks that save put there only ``maybe`` held, whether it
    comes before the save's report or after; ``unstored`` keeps when each of them
    became so, until a later save puts it there for sure.

    A save reported failed may still have written some or all of its chunks: its answer
    can be lost after the tier kept the data (a dropped reply), or it can fail part-way.
    Its chunks the tier does not surely hold are ``maybe`` held, from the save's
    submission on: a lookup may find them or not, and neither is a fault of the stack."""

    KINDS = (Ev.SAVE, Ev.FAULT, Ev.FINISHED_REPORTED)  # the events ``feed`` reads

    def __init__(self, run: RunResult, chains: ContentChains | None = None):
        self.run = run
        self.chunk = run.config.geometry.chunk_size
        self.chains = chains or ContentChains(run)
        self.held: dict[int, float] = {}  # content key -> when it became visible
        self.maybe: dict[int, float] = {}  # content key -> visible at the earliest
        self._save_range: dict[OperationId, tuple[int, int]] = {}
        self._submitted: dict[OperationId, float] = {}
        self._late: dict[OperationId, float] = {}  # save op -> visible at
        self._unstored: set[OperationId] = set()  # saves whose store a fault broke
        self._added: dict[OperationId, list[int]] = {}  # save op -> keys it first put
        # content key -> since when only maybe held because an injected store failure
        # broke the save that would have put it there
        self.unstored: dict[int, float] = {}

    def feed(self, ev: TraceEvent) -> None:
        kind = ev.kind
        if kind is Ev.SAVE:
            assert ev.op is not None  # a save names its operation
            self._save_range[ev.op] = (ev.data["start"], ev.data["end"])
            self._submitted[ev.op] = ev.t
        elif kind is Ev.FAULT and ev.op is not None:
            if "delay_s" in ev.data:
                self._late[ev.op] = ev.t + ev.data["delay_s"]
            elif ev.data.get("unstored"):
                # A store an injected fault broke (on one tensor-parallel rank, say):
                # whatever its save reports, before or after, is only maybe held.
                self._unstored.add(ev.op)
                for key in self._added.pop(ev.op, []):
                    at = self.held.pop(key, None)
                    if at is not None:
                        self.maybe.setdefault(key, self._submitted.get(ev.op, at))
                        self.unstored.setdefault(key, ev.t)
            elif "chunk" in ev.data and ev.req_id is not None and ev.req_id in self.run.requests:
                chain = self.chains.of(ev.req_id)
                if ev.data["chunk"] < len(chain):
                    self.held.pop(chain[ev.data["chunk"]], None)
                    self.maybe.pop(chain[ev.data["chunk"]], None)
                    self.unstored.pop(chain[ev.data["chunk"]], None)
        elif kind is Ev.FINISHED_REPORTED and ev.op is not None:
            rng = self._save_range.get(ev.op)
            if rng is None:
                return
            assert ev.req_id is not None  # an event that names an op names its request
            chain = self.chains.of(ev.req_id)
            # A tier whose engine promises no data with a finished save (ATOM's frees
            # blocks) records what the store holds: ``stored`` tokens from the start.
            if ev.data.get("outcome") == "finished" and ev.op not in self._unstored:
                visible = self.visible_at(ev)
                end = min(rng[1], ev.data.get("stored", rng[1]))
                added = self._added.setdefault(ev.op, [])
                for key in chain[rng[0] // self.chunk : min(end // self.chunk, len(chain))]:
                    if key not in self.held:
                        added.append(key)
                    self.held.setdefault(key, visible)
                    self.maybe.pop(key, None)
                    self.unstored.pop(key, None)
            else:
                broken = ev.op in self._unstored
                for key in chain[rng[0] // self.chunk : min(rng[1] // self.chunk, len(chain))]:
                    if key not in self.held:
                        self.maybe.setdefault(key, self.maybe_from(ev))
                        if broken:
                            self.unstored.setdefault(key, ev.t)

    def visible_at(self, report: TraceEvent) -> float:
        """When what the save reported finished by ``report`` wrote becomes visible."""
        late = self._late.get(report.op) if report.op is not None else None
        return report.t if late is None else late

    def maybe_from(self, report: TraceEvent) -> float:
        """The earliest a failed save's chunks may be visible: its submission."""
        assert report.op is not None  # a report names its operation
        return self._submitted.get(report.op, report.t)

    def visible_prefix(self, req_id: str, t: float, possibly: bool = False) -> int:
        """Tokens of the request's prefix held and visible at ``t`` (whole chunks); with
        ``possibly``, also the chunks failed saves may have written."""
        n = 0
        for key in self.chains.of(req_id):
            at = self.held.get(key, float("inf"))
            if possibly:
                at = min(at, self.maybe.get(key, float("inf")))
            if at > t:
                break
            n += self.chunk
        return n

    def holds(self, req_id: str, start: int, end: int) -> bool:
        """Whether every chunk covering ``[start, end)`` of the request is in the tier
        (visible or not: a read does not wait for visibility)."""
        keys = self.keys(req_id, start, end)
        return keys is not None and all(key in self.held for key in keys)

    def keys(self, req_id: str, start: int, end: int) -> list[int] | None:
        """The content keys of the chunks covering ``[start, end)`` of the request (None
        when the range runs past its whole chunks)."""
        chain = self.chains.of(req_id)
        last = -(-end // self.chunk)
        return None if last > len(chain) else chain[start // self.chunk : last]
