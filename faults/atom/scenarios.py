"""The ``atom`` tier's scenarios: stories told to real ATOM servers on one simulated
host. A scenario starts servers, sends them requests and lets each run until it is idle
(or its limit passes: a hang); the properties judge what the processes recorded.

Prompts come from the seed (``random.Random(seed)``); sizes are in tokens with 16-token
blocks and 64-token lmcache chunks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from kvfault.faults.atom.host import AtomHost, Server
from kvfault.faults.atom.pictures import PICTURE_TOKEN
from kvfault.faults.atom.spec import AtomRequest, FaultSpec, ServerSpec

# Past this a server has hung: over 3 times lmcache's 3 s lookup timeout, which a lost
# lookup reply costs once, and 100 times what an idle-to-idle run takes here.
RUN_LIMIT_S = 10.0
# How long a story lets a slowed tier finish before the prompt is resent: over the
# slowed saves or retrieves that can be left copying when an old ATOM stops stepping.
SAVE_SETTLE_S = 2.5


@dataclass
class AtomRun:
    """One run: the host, the seed's prompts, the faults for the server named in
    ``faulted`` (every server when empty), and what was sent."""

    host: AtomHost
    seed: int
    faults: FaultSpec = field(default_factory=FaultSpec)
    faulted: tuple[str, ...] = ()
    spec_changes: dict = field(default_factory=dict)
    injector: str | None = None  # the fault row's name: applied spec changes fire it
    fixes: tuple[str, ...] = ()  # candidate fixes of ATOM every server runs with
    record_path: bool = False  # servers record ATOM's lines they execute
    requests: list[AtomRequest] = field(default_factory=list)
    hung: bool = False
    # Which of its row's schedules this run is: 0 is the plain one; another draws its
    # own prompts and has every server's worker jitter its threads (``ServerSpec``).
    schedule: int = 0
    # Every server's tensor-parallel size and pipeline stages where the story sets
    # none (``--atom-tp``, ``--atom-pp``).
    tp_size: int = 1
    pp_size: int = 1

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed if not self.schedule else f"{self.seed}/{self.schedule}")

    def prompt(self, n: int) -> tuple[int, ...]:
        return tuple(self.rng.randrange(3, 30000) for _ in range(n))

    def picture(self) -> bytes:
        """An image's bytes, drawn from the seed."""
        return bytes(self.rng.randrange(256) for _ in range(16))

    def server(self, name: str, **spec: Any) -> Server:
        spec = {"tp_size": self.tp_size, "pp_size": self.pp_size, **spec}
        s = ServerSpec(
            name, fixes=self.fixes, record_path=self.record_path, schedule=self.schedule, **spec
        )
        if not self.faulted or name in self.faulted:
            s = replace(s, faults=self.faults, **self.spec_changes)
            if self.spec_changes and self.injector:
                self.host.note_fault(self.injector, server=name, **self.spec_changes)
        return self.host.start(s)

    def serve(self, server: Server, *requests: AtomRequest, until_answered: bool = False) -> None:
        self.requests.extend(requests)
        server.submit(list(requests))
        if not server.run(RUN_LIMIT_S, until_answered):
            self.hung = True

    def settle(self, server: Server) -> None:
        """The host sends nothing until no save or load of ATOM's is left in
        ``server``'s workers (queued on ATOM's KV threads or running), at most
        ``SAVE_SETTLE_S``: what a slowed tier finishes meanwhile lands in it, and
        nothing steps, so an ATOM that stops polling when idle reports none of it."""
        server.settle(SAVE_SETTLE_S)

    def stored(self, server: Server, prompt: Sequence[int], shared_tier: bool = False) -> None:
        """Wait, at most ``SAVE_SETTLE_S``, until the tier holds ``prompt``'s whole
        chunks: ATOM's worker saves on its own thread, so a request answered is not yet
        a prompt stored, and an ATOM that stops stepping when idle does not wait for it.
        A save that never lands (a fault) ends the wait at the bound.

        With ``shared_tier``, until ``server``'s shared remote tier holds them: lmcache
        writes its remote tier on a thread of its own after the store has returned (and
        ATOM has called the save done), so another server's lookup made at once may
        find nothing there whatever the keys."""
        if shared_tier and not server.spec.shared_tier:
            raise ValueError(f"{server.spec.name} has no shared tier to wait for")
        chunk = server.spec.chunk_size
        want = len(prompt) // chunk * chunk
        backend = "RemoteBackend" if shared_tier else None  # lmcache's name for it
        server.wait_stored(list(prompt), want, SAVE_SETTLE_S, backend)

    def end(self, *servers: Server) -> None:
        for s in servers:
            s.quiescent()


Story = Callable[[AtomRun], None]


def prefix_reuse(run: AtomRun) -> None:
    """One server without an HBM prefix cache (every reuse goes through lmcache): a
    200-token prompt, another prompt (its work lands in the blocks the first gave
    back), the first again once the tier holds it (loads its 3 chunks), then the
    first with a 40-token suffix."""
    _prefix_reuse(run, {"prefix_caching": False})


def tp_prefix_reuse(run: AtomRun) -> None:
    """``prefix_reuse`` on a server of two tensor-parallel ranks: each rank's worker
    stores and loads its own shard of the KV heads, only rank 0's lmcache engine
    answers the scheduler's lookups (ATOM's ``lookup_server_worker_ids=[0]``), and a
    load is done when ATOM's aggregator has both ranks' completions."""
    _prefix_reuse(run, {"prefix_caching": False, "tp_size": 2})


def pp_prefix_reuse(run: AtomRun) -> None:
    """``prefix_reuse`` on a server of two pipeline stages (one worker each, holding one
    of the model's two layers): each stage's worker stores and restores its own layers
    in its own lmcache engine (worker ids 0 and 1), stage 0's engine alone answers the
    head's lookups, and a load is done when ATOM's ``PPKVAggregator`` has both stages'
    completions."""
    _prefix_reuse(run, {"prefix_caching": False, "pp_size": 2, "tp_size": 1})


# A wider dense model than the tier's (2 layers, 2 KV heads): enough KV heads for four
# TP ranks and layers for two stages of two TP ranks each, every worker holding more
# than one head or layer (ATOM splits both evenly).
WIDE = {"kv_heads": 4, "layers": 4}


def tp4_prefix_reuse(run: AtomRun) -> None:
    """``prefix_reuse`` on a server of four tensor-parallel ranks (the wider model: one
    KV head of four each): each rank's worker stores and loads its own shard, only rank
    0's lmcache engine answers the scheduler's lookups, and a load is done when ATOM's
    aggregator has all four ranks' completions."""
    _prefix_reuse(run, {"prefix_caching": False, "tp_size": 4, "pp_size": 1, **WIDE})


def pp_tp_prefix_reuse(run: AtomRun) -> None:
    """``prefix_reuse`` on a server of two pipeline stages of two tensor-parallel ranks
    each (the wider model: each worker holds two layers of four and two KV heads of
    four), lmcache worker ids ``stage x 2 + TP rank`` of a world of 4: worker 0's engine
    alone answers the head's lookups, each stage's completions go through ATOM's
    aggregator over its two ranks, then ATOM's ``PPKVAggregator`` over the stages."""
    _prefix_reuse(run, {"prefix_caching": False, "pp_size": 2, "tp_size": 2, **WIDE})


def _prefix_reuse(run: AtomRun, spec: dict[str, Any], prompt: int = 200, suffix: int = 40) -> None:
    """The ``prefix_reuse`` story on a server of ``spec``: a ``prompt``-token prompt
    stored, another, the first again, then the first with a ``suffix``-token suffix."""
    a = run.server("A", **spec)
    p = run.prompt(prompt)
    run.serve(a, AtomRequest("first", p))
    run.stored(a, p)  # "again" is to find it in the tier, however fast it comes
    # Between the store and its reuse: a load that wrote nothing must not find the
    # first prompt's own pages still in the blocks it gets back.
    run.serve(a, AtomRequest("between", run.prompt(prompt)))
    run.serve(a, AtomRequest("again", p))
    run.serve(a, AtomRequest("longer", p + run.prompt(suffix)))
    run.end(a)


# A hybrid (DeepSeek-V4) server: ATOM's hybrid PAGE/SLOT connector, 256-token blocks
# and chunks (ATOM's DSV4 block), 24 blocks and 4 state slots, one TP rank and one
# stage whatever ``--atom-tp`` and ``--atom-pp`` say (``dsv4_tp2_prefix_reuse`` sets
# its own TP size; ATOM's DSV4 connector refuses PP > 1).
HYBRID: dict[str, Any] = {
    "layout": "hybrid",
    "tp_size": 1,
    "pp_size": 1,
    "block_size": 256,
    "chunk_size": 256,
    "num_blocks": 24,
    "max_num_seqs": 4,
    "prefix_caching": False,
}


def dsv4_prefix_reuse(run: AtomRun) -> None:
    """``prefix_reuse`` on a DeepSeek-V4 server (ATOM's hybrid connector): a 600-token
    prompt (two whole 256-token chunks), another prompt (its work and its state in what
    the first gave back), the first again once the tier holds its chunks (ATOM loads
    the PAGE units of 512 tokens and the SLOT checkpoint at 512, then computes the
    rest from that state), then the first with a 100-token suffix."""
    _prefix_reuse(run, HYBRID, 600, 100)


# ``HYBRID`` with ATOM's HBM prefix cache on (its default): its block manager keeps a
# request's state at each 256-token rung as a checkpoint image in PAGE units of the KV
# pool (``block_manager.py:118-126``), so an HBM hit resumes from one.
HYBRID_HBM = {**HYBRID, "prefix_caching": True}


def dsv4_hbm_partial(run: AtomRun) -> None:
    """A DeepSeek-V4 server with ATOM's HBM prefix cache on and a pool of 8 PAGE units
    (KV blocks and state checkpoint images share it): a 600-token prompt (stored in
    lmcache: PAGE units of 512 tokens and the SLOT sidecar at 512), its first 300
    tokens (an HBM hit of nothing: ATOM keeps no checkpoint at 256 for the first
    prompt; this one's prefill leaves one there), another 600-token prompt that
    evicts the first's checkpoint at 512, then the first prompt again: HBM can resume
    it at 256 (its first block and that checkpoint), lmcache holds 512. ATOM's DSV4
    connector declines a tier load above a nonzero HBM floor for a request with
    state (``stateful_nonzero_hbm_floor``): it restores the state from the
    checkpoint in HBM and computes the rest."""
    a = run.server("A", **{**HYBRID_HBM, "num_blocks": 8})
    p = run.prompt(600)
    run.serve(a, AtomRequest("first", p))
    run.stored(a, p)
    run.serve(a, AtomRequest("short", p[:300]))
    run.serve(a, AtomRequest("other", run.prompt(600)))
    run.serve(a, AtomRequest("again", p))
    run.end(a)


def dsv4_hbm_pressure(run: AtomRun) -> None:
    """``hbm_pressure`` on a DeepSeek-V4 server with ATOM's HBM prefix cache on and a
    pool of 8 PAGE units: a 600-token prompt (lmcache holds 512 tokens of PAGE units
    and the SLOT sidecar at 512; HBM a checkpoint at 512 only), another that evicts
    that checkpoint and the first's second block, then the first prompt again. HBM
    still holds its first block's pages but no state to resume from there: ATOM's hit
    is 0, and it loads PAGE units of 512 tokens and the SLOT from lmcache."""
    a, _ = _dsv4_reuse_once(run, {**HYBRID_HBM, "num_blocks": 8}, between="other")
    run.end(a)


def dsv4_checkpoint_dropped(run: AtomRun) -> None:
    """A state checkpoint ATOM drops for want of PAGE units, on a DeepSeek-V4 server
    with its HBM prefix cache on and a pool of 8 PAGE units (two SLOT staging rows, so
    both prompts' sidecar saves, dispatched in one step, commit): two 600-token prompts
    at once, prefilled together to 512 (their six blocks leave two free units, one
    image's worth): the first's checkpoint at 512 takes them, the second's finds no free
    unit and no image it may evict (the first's is still copying) and is dropped. Then
    the second again, while HBM still holds its pages at 512 but no state there: ATOM
    must not resume from HBM; it loads PAGE units of 512 tokens and the SLOT from
    lmcache. Then the first again."""
    a = run.server(
        "A",
        **{**HYBRID_HBM, "num_blocks": 8, "max_num_batched_tokens": 1200, "slot_staging_rows": 2},
    )
    p, q = run.prompt(600), run.prompt(600)
    run.serve(a, AtomRequest("first", p), AtomRequest("second", q))
    run.stored(a, p)
    run.stored(a, q)
    run.serve(a, AtomRequest("second-again", q))
    run.serve(a, AtomRequest("first-again", p))
    run.end(a)


def _resume_preempted(run: AtomRun, spec: dict, prompt: int, answer: int) -> None:
    """A ``prompt``-token prompt stored, then it again and another of its length at
    once, each answering ``answer`` tokens, on one server of ``spec`` whose pool cannot
    hold both as they decode: ATOM preempts a request, finds it in lmcache and resumes
    it with a load. Every answer must be its cold run's."""
    a = run.server("A", **spec)
    p = run.prompt(prompt)
    run.serve(a, AtomRequest("first", p))
    run.stored(a, p)
    run.serve(
        a,
        AtomRequest("again", p, max_tokens=answer),
        AtomRequest("other", run.prompt(prompt), max_tokens=answer),
    )
    run.end(a)


def resume_preempted(run: AtomRun) -> None:
    """A request preempted and resumed from the tier, on a dense server without an HBM
    prefix cache and with a pool of 30 blocks: 200-token prompts answering 200 tokens
    each; ATOM preempts them in turn and resumes each with a load of its prompt."""
    _resume_preempted(run, {"prefix_caching": False, "num_blocks": 30}, 200, 200)


def dsv4_resume_preempted(run: AtomRun) -> None:
    """A request preempted and resumed from the tier, on a DeepSeek-V4 server with its
    HBM prefix cache on and a pool of 7 PAGE units: 600-token prompts answering 300
    tokens each (the first resent resumes from its HBM checkpoint); ATOM preempts the
    other prompt and resumes it with a load of 512 tokens of PAGE units and the SLOT."""
    _resume_preempted(
        run, {**HYBRID_HBM, "num_blocks": 7, "max_num_batched_tokens": 1200}, 600, 300
    )


def dsv4_fp8_prefix_reuse(run: AtomRun) -> None:
    """``dsv4_prefix_reuse`` with an fp8 KV cache (ATOM's fp8 "2buff" DSV4 layout, on
    the gfx950 the tier's aiter answers): two KV planes (fp8 NoPE rows, bf16 RoPE rows),
    so three PAGE regions a block and two SLOT regions a request, where bf16 has two
    and one."""
    _prefix_reuse(run, {**HYBRID, "kv_cache_dtype": "fp8"}, 600, 100)


def dsv4_tp2_prefix_reuse(run: AtomRun) -> None:
    """``dsv4_prefix_reuse`` on a DeepSeek-V4 server of two tensor-parallel ranks: each
    rank's worker stores its own copy of the PAGE units (DSV4's compressed KV is not
    split across ranks) and its own SLOT sidecar in its own lmcache engine, rank 0's
    engine alone answers the lookups, ATOM's scheduler commits a sidecar boundary only
    once every rank reported it stored, and a load is done when ATOM's aggregator has
    both ranks' completions."""
    _prefix_reuse(run, {**HYBRID, "tp_size": 2}, 600, 100)


def dsv4_concurrent_loads(run: AtomRun) -> None:
    """``concurrent_loads`` on a DeepSeek-V4 server: a 600-token prompt stored, another
    prompt, then four requests at once that extend the first: four loads of PAGE
    units and a SLOT each in flight together, through the connector's SLOT staging
    (one row unless configured, ``OFFLOAD_SLOT_STAGING_SLOTS``), each into its own
    state group (the server has four)."""
    a = run.server("A", **HYBRID)
    p = run.prompt(600)
    run.serve(a, AtomRequest("first", p))
    run.stored(a, p)
    run.serve(a, AtomRequest("between", run.prompt(600)))
    run.serve(a, *[AtomRequest(f"ext{i}", p + run.prompt(30 + 10 * i)) for i in range(4)])
    run.end(a)


def dsv4_lookup_reply_lost(run: AtomRun) -> None:
    """``dsv4_prefix_reuse`` on a server whose lmcache lookup client waits
    ``LOST_SOCKET_TIMEOUT_MS`` for a reply: a fault may lose the reply to the lookup
    that finds the prompt (``again``), which lmcache pinned before replying, or take the
    lookup socket's path away at the second lookup (``between``, a miss) and lose that
    reply (``lookup_after_socket_loss`` on the hybrid server)."""
    _prefix_reuse(run, {**HYBRID, "lookup_timeout_ms": LOST_SOCKET_TIMEOUT_MS}, 600, 100)


def dsv4_load_beside_decode(run: AtomRun) -> None:
    """``unaligned_handoff``'s timing on a DeepSeek-V4 server whose runner defers its
    output: a 600-token prompt stored, another prompt, then the first again together
    with a 20-token prompt answered with 100 tokens. The resent prompt is parked for
    its load of PAGE units and the SLOT while the decoding request's forwards run (a
    slowed retrieve keeps it parked); its first output after the load must be the cold
    run's. (The hybrid connector takes no HBM part: the rows run with ATOM's prefix
    cache off, and ATOM's version 1 skips a stateful load above a nonzero HBM floor.)"""
    a = run.server("A", **{**HYBRID, "deferred_output": True})
    p = run.prompt(600)
    run.serve(a, AtomRequest("first", p))
    run.stored(a, p)
    run.serve(a, AtomRequest("between", run.prompt(600)))
    run.serve(a, AtomRequest("busy", run.prompt(20), max_tokens=100), AtomRequest("again", p))
    run.end(a)


def dsv4_store_then_reuse(run: AtomRun) -> None:
    """``tp_store_then_reuse``'s story on a DeepSeek-V4 server: a 600-token prompt,
    right after its answer another prompt (its pages and state where the first's
    were, unless the first's save still holds them), then, once the tier holds the
    first prompt, the first again from lmcache. A request's blocks may be freed only
    once its save has read them (a fault may slow the store)."""
    _store_then_reuse(run, HYBRID, 600)


def dsv4_two_loads_behind_one(run: AtomRun) -> None:
    """``two_loads_behind_one`` on a DeepSeek-V4 server: two 600-token prompts stored,
    then both again at once: two loads of PAGE units and a SLOT, which ATOM's DSV4
    worker runs one after another on its load thread (a fault may hang the first and
    abort its request)."""
    _two_loads_behind_one(run, HYBRID, 600)


def dsv4_hung_then_later_loads(run: AtomRun) -> None:
    """``hung_then_later_load`` on a DeepSeek-V4 server, then a fresh prompt: two
    600-token prompts stored, the first sent again alone (a fault may hang its load and
    abort its request), the host waiting until no load is left (at most
    ``SAVE_SETTLE_S``), the second again in a later batch, then a third prompt stored,
    another prompt, and the third again: a load of PAGE units and a SLOT after the
    first's."""
    a = _hung_then_later_load(run, HYBRID, 600, answered_later=True)
    s = run.prompt(600)
    run.serve(a, AtomRequest("third", s), until_answered=True)
    run.stored(a, s)
    run.serve(a, AtomRequest("between", run.prompt(600)), until_answered=True)
    run.serve(a, AtomRequest("again3", s), until_answered=True)
    run.end(a)


def dsv4_reuse_once(run: AtomRun) -> None:
    """The hybrid faults' story (``reuse_once`` on a DeepSeek-V4 server): a 600-token
    prompt stored, another prompt served (its pages and state where the first's
    were, and the first's save reported done meanwhile), then the first again: one
    load of 512 tokens of PAGE units and the SLOT."""
    a, _ = _dsv4_reuse_once(run)
    run.end(a)


def _dsv4_reuse_once(
    run: AtomRun, spec: dict[str, Any] = HYBRID, between: str = "between"
) -> tuple[Server, tuple[int, ...]]:
    """``dsv4_reuse_once``'s requests on a server of ``spec`` (the one between the
    store and the reuse named ``between``), its server and prompt."""
    a = run.server("A", **spec)
    p = run.prompt(600)
    run.serve(a, AtomRequest("first", p))
    run.stored(a, p)
    run.serve(a, AtomRequest(between, run.prompt(600)))
    run.serve(a, AtomRequest("again", p))
    return a, p


def dsv4_recompute_then_reuse(run: AtomRun) -> None:
    """``recompute_then_reuse`` on a DeepSeek-V4 server: a 600-token prompt (whose save
    a fault may lose), another prompt, the first again (it recomputes and saves
    again), then, once the tier holds the prompt and another prompt has run, the
    prompt a third time: it loads what the recompute stored."""
    _dsv4_recompute_then_reuse(run)


def dsv4_slot_lost_then_reuse(run: AtomRun) -> None:
    """``dsv4_recompute_then_reuse`` for a fault that loses the first request's SLOT
    and keeps its PAGE units: judged without ``efficiency`` (its account counts the
    PAGE units lmcache holds as a hit; ATOM's hybrid hit needs the SLOT too)."""
    _dsv4_recompute_then_reuse(run)


def dsv4_tp2_slot_lost_then_reuse(run: AtomRun) -> None:
    """``dsv4_slot_lost_then_reuse`` on a DeepSeek-V4 server of two tensor-parallel
    ranks, for a fault that loses one rank's SLOT sidecar and keeps every PAGE unit:
    each rank stores its own PAGE units and sidecar, ATOM commits a sidecar boundary
    only once every rank reported it stored, and a load is done only when both ranks
    loaded theirs."""
    _dsv4_recompute_then_reuse(run, {**HYBRID, "tp_size": 2})


def _dsv4_recompute_then_reuse(run: AtomRun, spec: dict[str, Any] = HYBRID) -> None:
    a = run.server("A", **spec)
    p = run.prompt(600)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("between", run.prompt(600)))
    run.serve(a, AtomRequest("again", p))
    run.stored(a, p)
    run.serve(a, AtomRequest("between2", run.prompt(600)))
    run.serve(a, AtomRequest("third", p))
    run.end(a)


def dsv4_reuse_after_abort(run: AtomRun) -> None:
    """``reuse_after_abort`` on a DeepSeek-V4 server: ``dsv4_reuse_once`` (its
    resent request is the one a fault may abort while it loads), then, once the
    server has settled (``AtomRun.settle``), the prompt a third time."""
    a, p = _dsv4_reuse_once(run)
    run.end(a)
    run.settle(a)
    run.serve(a, AtomRequest("third", p))
    run.end(a)


# The lookup timeout of ``lookup_after_socket_loss``'s server: lmcache's default is
# 3000 ms; each lookup that meets a lost socket waits this long (the row measures it).
LOST_SOCKET_TIMEOUT_MS = 1000


def lookup_after_socket_loss(run: AtomRun) -> None:
    """``prefix_reuse`` on a server whose lmcache lookup client waits
    ``LOST_SOCKET_TIMEOUT_MS`` for a reply: a fault takes the lookup socket's path away
    at the second lookup (``between``, a miss) and that reply is lost, so lmcache's
    client reconnects, to a path that no longer leads to the worker. ``again`` and
    ``longer`` find the prompt in the tier only if a lookup reaches it: otherwise each
    waits the timeout, is told 0, and ATOM recomputes; every request must still be
    answered right."""
    _prefix_reuse(run, {"prefix_caching": False, "lookup_timeout_ms": LOST_SOCKET_TIMEOUT_MS})


def reuse_once(run: AtomRun) -> None:
    """The faults' story: one server without an HBM prefix cache stores a 200-token
    prompt and serves it once more (one save, one load of 3 chunks, one more save)."""
    a = run.server("A", prefix_caching=False)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("again", p))
    run.end(a)


def tp_reuse_once(run: AtomRun) -> None:
    """``reuse_once`` on a server of two tensor-parallel ranks (a fault may hit one
    rank's worker only): the load of the resent prompt is one load per rank, done when
    ATOM's aggregator has both ranks' completions, failed when either failed."""
    a = run.server("A", prefix_caching=False, tp_size=2)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("again", p))
    run.end(a)


def pp_reuse_once(run: AtomRun) -> None:
    """``reuse_once`` on a server of two pipeline stages (a fault may hit one stage's
    worker only): the load of the resent prompt is one load per stage, done when ATOM's
    ``PPKVAggregator`` has both stages' completions, failed when either failed."""
    a = run.server("A", prefix_caching=False, pp_size=2, tp_size=1)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("again", p))
    run.end(a)


def tp4_reuse_once(run: AtomRun) -> None:
    """``reuse_once`` on a server of four tensor-parallel ranks (the wider model; a
    fault may hit one rank's worker only): the load of the resent prompt is one load per
    rank, done when ATOM's aggregator has all four ranks' completions, failed when any
    failed. Then the host lets the workers settle before the server is judged: a rank's
    load a fault slowed ends (and records its fault) even where ATOM answered without
    waiting for it."""
    a = run.server("A", prefix_caching=False, tp_size=4, pp_size=1, **WIDE)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("again", p))
    run.settle(a)
    run.end(a)


def tp_store_then_reuse(run: AtomRun) -> None:
    """A server of two tensor-parallel ranks without an HBM prefix cache: a 200-token
    prompt, right after its answer another prompt (the blocks the first gave back are
    poisoned before its first step), then, once both ranks' engines hold the first
    prompt (at most ``SAVE_SETTLE_S``), the first again from lmcache. A request's blocks
    may be freed only when both ranks' saves have read them (a fault may slow one
    rank's store)."""
    _store_then_reuse(run, {"prefix_caching": False, "tp_size": 2})


def pp_store_then_reuse(run: AtomRun) -> None:
    """``tp_store_then_reuse`` on a server of two pipeline stages (TP 1): a request's
    blocks may be freed only when both stages' saves have read their layers (a fault
    may slow one stage's store)."""
    _store_then_reuse(run, {"prefix_caching": False, "pp_size": 2, "tp_size": 1})


def _store_then_reuse(run: AtomRun, spec: dict[str, Any], prompt: int = 200) -> None:
    """The ``tp_store_then_reuse`` story on a server of ``spec`` with
    ``prompt``-token prompts."""
    a = run.server("A", **spec)
    p = run.prompt(prompt)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("between", run.prompt(prompt)))
    run.stored(a, p)
    run.serve(a, AtomRequest("again", p))
    run.end(a)


def recompute_then_reuse(run: AtomRun) -> None:
    """``reuse_once``, then, once the tier holds the prompt (the second request's save
    has landed), the prompt a third time: it loads what the recompute stored. The
    third request also makes the engine step again, so the second request's save is
    reported however its store raced that request's last steps: an ATOM whose idle
    engine stops polling (before its 5d771f7, row 20 of history.md; ``one_token``
    proves that fix) reported it only when the store beat them, so ``store_failure``
    on ``reuse_once`` passed or failed on identical runs at 31dadf0^ and 31dadf0."""
    _recompute_then_reuse(run)


def tp_recompute_then_reuse(run: AtomRun) -> None:
    """``recompute_then_reuse`` on a server of two tensor-parallel ranks (a fault may
    hit one rank's worker only): the prompt is stored only where both ranks' engines
    hold their shards, and a load is done only when both ranks loaded theirs."""
    _recompute_then_reuse(run, tp_size=2)


def pp_recompute_then_reuse(run: AtomRun) -> None:
    """``recompute_then_reuse`` on a server of two pipeline stages (TP 1; a fault may
    hit one stage's worker only): the prompt is stored only where both stages' engines
    hold their layers, and a load is done only when both stages loaded theirs."""
    _recompute_then_reuse(run, pp_size=2, tp_size=1)


def _recompute_then_reuse(run: AtomRun, **spec: Any) -> None:
    a = run.server("A", prefix_caching=False, **spec)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("again", p))
    run.stored(a, p)
    run.serve(a, AtomRequest("third", p))
    run.end(a)


def reuse_after_abort(run: AtomRun) -> None:
    """``reuse_once`` (its second request is the one a fault may abort), then, once
    the load it left has ended and nothing stepped meanwhile (``AtomRun.settle``: an
    ATOM that stops stepping when idle reports nothing of it), the prompt a third
    time: the engine steps again, and what the abort left must be released by then."""
    a = run.server("A", prefix_caching=False)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("again", p))
    run.end(a)
    run.settle(a)
    run.serve(a, AtomRequest("third", p))
    run.end(a)


def two_loads_behind_one(run: AtomRun) -> None:
    """One server without an HBM prefix cache stores two 200-token prompts, then gets
    both again at once: two loads, which ATOM's worker runs one after another on its
    one load thread (a fault may hang the first and abort its request)."""
    _two_loads_behind_one(run, {"prefix_caching": False}, 200)


def _two_loads_behind_one(run: AtomRun, spec: dict[str, Any], prompt: int) -> None:
    """The ``two_loads_behind_one`` story on a server of ``spec`` with
    ``prompt``-token prompts."""
    a = run.server("A", **spec)
    p, q = run.prompt(prompt), run.prompt(prompt)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("second", q))
    run.stored(a, q)
    run.serve(a, AtomRequest("again", p), AtomRequest("again2", q))
    run.end(a)


def hung_then_later_load(run: AtomRun) -> None:
    """``two_loads_behind_one`` in two batches: two 200-token prompts stored, the
    first sent again alone (a fault may hang its load and abort its request), the host
    waiting until no load is left (at most ``SAVE_SETTLE_S``), then the second again:
    a load dispatched in a later batch than the first's."""
    a = _hung_then_later_load(run, {"prefix_caching": False}, 200, answered_later=False)
    run.end(a)


def _hung_then_later_load(
    run: AtomRun, spec: dict[str, Any], prompt: int, answered_later: bool
) -> Server:
    """The ``hung_then_later_load`` story on a server of ``spec`` with
    ``prompt``-token prompts (the later batch served ``until_answered`` where
    ``answered_later``); its server."""
    a = run.server("A", **spec)
    p, q = run.prompt(prompt), run.prompt(prompt)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("second", q))
    run.stored(a, q)
    run.serve(a, AtomRequest("again", p), until_answered=True)
    run.settle(a)
    run.serve(a, AtomRequest("again2", q), until_answered=answered_later)
    return a


def concurrent_loads(run: AtomRun) -> None:
    """One server without an HBM prefix cache stores a 200-token prompt, then gets four
    requests at once that extend it: four loads in flight together (ATOM's worker has
    one load thread), each followed by its own suffix and save."""
    a = run.server("A", prefix_caching=False)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, *[AtomRequest(f"ext{i}", p + run.prompt(30 + 10 * i)) for i in range(4)])
    run.end(a)


def chunk_aligned(run: AtomRun) -> None:
    """A prompt of exactly 4 chunks (256 tokens), sent twice to a server without an HBM
    prefix cache: the second finds the whole prompt in lmcache."""
    a = run.server("A", prefix_caching=False)
    p = run.prompt(256)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("again", p))
    run.end(a)


def hbm_pressure(run: AtomRun) -> None:
    """One server with an HBM prefix cache of 40 blocks: a 300-token prompt, three
    others that push its blocks out of HBM, then the first prompt again (its chunks are
    in lmcache, few or none of its blocks in HBM)."""
    a = run.server("A", num_blocks=40)
    p = run.prompt(300)
    run.serve(a, AtomRequest("first", p))
    for i in range(3):
        run.serve(a, AtomRequest(f"other{i}", run.prompt(300)))
    run.serve(a, AtomRequest("again", p))
    run.end(a)


def hbm_partial(run: AtomRun) -> None:
    """One server with an HBM prefix cache of 30 blocks: a 300-token prompt, one other
    that evicts the tail of its blocks, then the first prompt again: HBM still holds 176
    of its tokens (off the 64-token chunk grid), lmcache 256. ATOM computes up to the
    chunk boundary (192) and loads the rest (its unaligned handoff)."""
    _partial_handoff(run, deferred=False)


def _partial_handoff(
    run: AtomRun,
    deferred: bool,
    alongside: Callable[[], list[AtomRequest]] = list,
) -> None:
    """``hbm_partial``'s story; the resent prompt goes with what ``alongside`` draws
    (after the first two prompts, so a seed's prompts do not move)."""
    # ATOM's runner defers output with one pipeline stage only.
    pp = {"pp_size": 1} if deferred else {}
    a = run.server("A", num_blocks=30, deferred_output=deferred, **pp)
    p = run.prompt(300)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("other", run.prompt(300)))
    run.serve(a, *alongside(), AtomRequest("again", p))
    run.end(a)


def hbm_partial_deferred(run: AtomRun) -> None:
    """``hbm_partial`` on a server whose runner defers its output, as ATOM's does with
    one pipeline stage: the resent prompt's head, computed up to the chunk boundary, is
    a partial prefill parked for the load of the rest, alone (a batch of middle chunks:
    ATOM's runner samples nothing for it). Its first output after the load must be the
    cold run's (ATOM's #1807, 7427e05: before, the park dropped it)."""
    _partial_handoff(run, deferred=True)


def unaligned_handoff(run: AtomRun) -> None:
    """``hbm_partial_deferred`` with a long decode alongside: the resent prompt and a
    20-token prompt answered with 100 tokens arrive together; the decoding request's
    forwards run while the other is parked for its load, so the head's sampled token
    is gone when it resumes, and its first output after it must be kept (ATOM's #1807,
    7427e05: before, the park dropped it)."""
    _partial_handoff(run, True, lambda: [AtomRequest("busy", run.prompt(20), max_tokens=100)])


def reload_twice(run: AtomRun) -> None:
    """hbm_pressure, then the first prompt a third time: its second send restored it
    from lmcache into HBM, and nothing ran since, so the third must find it in HBM
    instead of loading it again (ATOM's #1725, 9acb084)."""
    a = run.server("A", num_blocks=40)
    p = run.prompt(300)
    run.serve(a, AtomRequest("first", p))
    for i in range(3):
        run.serve(a, AtomRequest(f"other{i}", run.prompt(300)))
    run.serve(a, AtomRequest("again", p))
    run.serve(a, AtomRequest("third", p))
    run.end(a)


def resend_at_defaults(run: AtomRun) -> None:
    """ATOM's offload defaults (``OFFLOAD_MIN_LOAD_TOKENS`` 8192, lmcache chunks of 256
    tokens, no partial chunk saved) on a server without an HBM prefix cache: a
    1024-token prompt stored, then sent three times more. Each resend's lookup hits 1024
    tokens, fewer than the minimum load, so ATOM recomputes instead of loading; every
    lookup pin must still be released."""
    a = run.server("A", prefix_caching=False, chunk_size=256, min_load_tokens=8192,
                   num_blocks=160, max_num_batched_tokens=1024)  # fmt: skip
    p = run.prompt(1024)
    run.serve(a, AtomRequest("first", p))
    run.stored(a, p)
    for i in range(3):
        run.serve(a, AtomRequest(f"again{i}", p))
    run.end(a)


def tier_hit_burst(run: AtomRun) -> None:
    """One server admitting 2 requests at a time, without an HBM prefix cache: three
    prompts stored, then each served again from lmcache, one after another. More
    finished loads than ``max_num_seqs`` must not stop admission (ATOM's 1754771 counted
    every parked load and never uncounted a finished one; 7427e05 fixed it)."""
    a = run.server("A", prefix_caching=False, max_num_seqs=2)
    prompts = [run.prompt(200) for _ in range(3)]
    for i, p in enumerate(prompts):
        run.serve(a, AtomRequest(f"first{i}", p))
    for i, p in enumerate(prompts):
        run.serve(a, AtomRequest(f"again{i}", p))
    run.end(a)


def one_token(run: AtomRun) -> None:
    """A 200-token prompt answered with one token, on a server without an HBM prefix
    cache: the request finishes in the step that dispatches its save, so only the
    engine's idle polling reports that save and frees its blocks (ATOM's 5d771f7 made
    ``is_finished`` wait for deferred frees). Then the prompt again, from lmcache."""
    a = run.server("A", prefix_caching=False)
    p = run.prompt(200)
    run.serve(a, AtomRequest("first", p, max_tokens=1))
    run.end(a)
    run.serve(a, AtomRequest("again", p, max_tokens=1))
    run.end(a)


def decode_pressure(run: AtomRun) -> None:
    """Three prompts at once on a 17-block HBM without a prefix cache: ``first`` (40
    tokens, under one lmcache chunk: nothing to save) and ``second`` (206 tokens, three
    chunks saved) take 3 and 13 blocks and decode; ``third`` (200) waits for room.
    ``second`` crosses a block boundary first and takes the last free block, so when
    ``first`` needs one ATOM must preempt one of the two while ``second``'s save may
    still be copying. Then ``second``'s prompt again, restored from lmcache: what its
    save read must have been its own KV (ATOM's 5d771f7 made a request with a save in
    flight unpreemptable)."""
    a = run.server("A", prefix_caching=False, num_blocks=17)
    p, q, r = run.prompt(40), run.prompt(206), run.prompt(200)
    run.serve(
        a,
        AtomRequest("first", p, max_tokens=12),
        AtomRequest("second", q, max_tokens=12),
        AtomRequest("third", r),
    )
    run.end(a)
    # ATOM before 5d771f7 stops stepping while saves are still copying (it reports
    # them with the next request): let the saves slowed by the tier land in it first.
    run.settle(a)
    run.serve(a, AtomRequest("again", q))
    run.end(a)


def shutdown_after_answer(run: AtomRun) -> None:
    """A 200-token prompt answered with one token on a server without an HBM prefix
    cache, and the server shut down as soon as it is answered: the save that answer's
    step dispatched is still in flight when ATOM's engine loop exits, and what ATOM does
    on its way out must report it and free its blocks (ATOM's 4d0b15f drains at exit)."""
    a = run.server("A", prefix_caching=False)
    run.serve(a, AtomRequest("first", run.prompt(200), max_tokens=1), until_answered=True)
    a.shut_down()


# A CPU pool of lmcache's for about 13 of the toy model's 8 KiB chunks, and a disk for
# all of them: six 3-chunk prompts push the first out of the CPU pool.
SPILL_CPU_GIB = 0.0001
SPILL_DISK_GIB = 0.01
SPILL_OTHERS = 5


def _spill(run: AtomRun, disk_size_gib: float) -> None:
    a = run.server(
        "A",
        prefix_caching=False,
        # A rank's chunk at TP N is 1/N of the bytes: the same count of chunks. So is a
        # stage's at PP N, but ATOM gives each stage N times its layers' share of the
        # budget (``scale_cpu_size_for_pp``: the whole budget, at an even split).
        cpu_cache_gib=SPILL_CPU_GIB / (run.tp_size * run.pp_size),
        local_disk=True,
        disk_size_gib=disk_size_gib,
    )
    first = run.prompt(200)
    run.serve(a, AtomRequest("first", first))
    for i in range(SPILL_OTHERS):
        run.serve(a, AtomRequest(f"other{i}", run.prompt(200)))
    # The others' saves done before the first comes again: a save still queued under
    # load left the first's chunks in the CPU pool, and a missing disk did not show.
    run.settle(a)
    run.serve(a, AtomRequest("again", first))
    run.end(a)


# The hybrid server's spill: a CPU pool for about two of its 600-token prompts (each
# 2 PAGE chunks of 16.5 KiB and SLOT sidecars of 92 KiB), a disk for all of them.
DSV4_SPILL_CPU_GIB = 0.0004


def dsv4_disk_spill(run: AtomRun) -> None:
    """``disk_spill`` on a DeepSeek-V4 server: a 600-token prompt, five others that push
    its PAGE units and SLOT sidecar out of lmcache's CPU pool onto its local disk, then
    the first prompt again, its PAGE units and SLOT read back from the disk."""
    _dsv4_spill(run, HYBRID)


def dsv4_fp8_disk_spill(run: AtomRun) -> None:
    """``dsv4_disk_spill`` with an fp8 KV cache (``dsv4_fp8_prefix_reuse``'s two-plane
    layout): the first prompt's PAGE units (three regions a block) and SLOT sidecar
    (two regions) pushed out of lmcache's CPU pool onto its local disk, then read back
    from it."""
    _dsv4_spill(run, {**HYBRID, "kv_cache_dtype": "fp8"})


def _dsv4_spill(run: AtomRun, spec: dict[str, Any]) -> None:
    a = run.server(
        "A", **spec, cpu_cache_gib=DSV4_SPILL_CPU_GIB, local_disk=True,
        disk_size_gib=SPILL_DISK_GIB,
    )  # fmt: skip
    first = run.prompt(600)
    run.serve(a, AtomRequest("first", first))
    for i in range(SPILL_OTHERS):
        run.serve(a, AtomRequest(f"other{i}", run.prompt(600)))
    run.serve(a, AtomRequest("again", first))
    run.end(a)


def disk_spill(run: AtomRun) -> None:
    """One server without an HBM prefix cache, with lmcache's local disk behind a CPU
    pool too small for the story: a 200-token prompt, five others that push its chunks
    out of the CPU pool (the disk keeps them), then the first prompt again, from the
    disk."""
    _spill(run, SPILL_DISK_GIB)


def disk_without_size(run: AtomRun) -> None:
    """``disk_spill`` configured as users got it wrong (ATOM's #1851, 15ebe26): a disk
    path and no disk size. The server must refuse to start; one that runs has silently
    no disk, and the first prompt's chunks are gone when it comes again."""
    _spill(run, 0.0)


# What B's KV differs by from A's for the same tokens (another head size computes other
# bytes): the fake model folds it in like a picture's digest; ATOM is not told (mm off).
LAYOUT_B = 0x1A7B


def shared_tier_two_layouts(run: AtomRun) -> None:
    """Two servers of one model on two machines sharing one lmcache remote tier (a
    directory both workers' lmcache engines use), A with KV heads of 8 and B of 16: A
    stores a 200-token prompt, and once the remote tier holds it B gets the same
    prompt. B's KV for it is not A's (other bytes), so B must not find A's chunks
    (ATOM's #1880, 5d771f7, put the KV layout into the lmcache namespace)."""
    a = run.server("A", prefix_caching=False, shared_tier=True)
    b = run.server("B", prefix_caching=False, shared_tier=True, head_dim=16, machine="m2")
    p = run.prompt(200)
    run.serve(a, AtomRequest("A-first", p))
    # B's lookup is to meet A's chunks in the remote tier, however fast it comes: one
    # that comes before lmcache's background write misses whatever the namespace.
    run.stored(a, p, shared_tier=True)
    run.serve(b, AtomRequest("B-same", p, cache_seed=LAYOUT_B))
    run.end(a, b)


def shared_tier_kv_dtype(run: AtomRun) -> None:
    """``shared_tier_two_layouts`` with one KV layout and two KV cache dtypes: A's
    bf16, B's fp8 (one byte a value: other bytes for the same tokens). B must not find
    A's chunks (ATOM's page namespace carries ``kv_cache_dtype``, lmcache's key the
    torch dtype)."""
    a = run.server("A", prefix_caching=False, shared_tier=True)
    b = run.server("B", prefix_caching=False, shared_tier=True, kv_cache_dtype="fp8", machine="m2")
    p = run.prompt(200)
    run.serve(a, AtomRequest("A-first", p))
    run.stored(a, p, shared_tier=True)  # as in shared_tier_two_layouts
    run.serve(b, AtomRequest("B-same", p, cache_seed=LAYOUT_B))
    run.end(a, b)


def shared_tier_tp_sizes(run: AtomRun) -> None:
    """``shared_tier_two_layouts`` with one layout and two tensor-parallel sizes: A
    runs one worker rank, B two (each rank's shard is one of the two KV heads: other
    bytes under a chunk's key than A's whole block). A stores a 200-token prompt; once
    the remote tier holds it B gets the same prompt and must not find A's chunks
    (ATOM's page namespace carries its TP size, lmcache's key the world size and worker
    id ATOM gives it)."""
    a = run.server("A", prefix_caching=False, shared_tier=True, tp_size=1)
    b = run.server("B", prefix_caching=False, shared_tier=True, tp_size=2, machine="m2")
    p = run.prompt(200)
    run.serve(a, AtomRequest("A-first", p))
    run.stored(a, p, shared_tier=True)  # as in shared_tier_two_layouts
    run.serve(b, AtomRequest("B-same", p, cache_seed=LAYOUT_B))
    run.end(a, b)


def shared_tier_tp_pp(run: AtomRun) -> None:
    """``shared_tier_two_layouts`` with one model on two parallel layouts of one world
    size: A at TP 2 (each rank: both layers, one KV head), B at PP 2 (each stage: one
    layer, both heads; B's requests carry another media seed, as the layouts row's do).
    A stores a 200-token prompt; once the remote tier holds it B gets the same prompt
    and must not find A's chunks: ATOM's page namespace carries the replica's world
    size (PP x TP, 2 for both) and lmcache's key worker ids 0 and 1 for both."""
    a = run.server("A", prefix_caching=False, shared_tier=True, tp_size=2, pp_size=1)
    b = run.server("B", prefix_caching=False, shared_tier=True, tp_size=1, pp_size=2, machine="m2")
    p = run.prompt(200)
    run.serve(a, AtomRequest("A-first", p))
    run.stored(a, p, shared_tier=True)  # as in shared_tier_two_layouts
    run.serve(b, AtomRequest("B-same", p, cache_seed=LAYOUT_B))
    run.end(a, b)


def shared_tier_reuse(run: AtomRun) -> None:
    """Two servers of one model and one layout on two machines sharing lmcache's remote
    tier (its file-system connector on one directory): A stores a 200-token prompt;
    once B's lmcache finds it there, B gets the same prompt and loads A's chunks from
    the remote tier (B's own CPU pool is empty); then B gets it once more."""
    _shared_tier_reuse(run)


def shared_tier_pp_reuse(run: AtomRun) -> None:
    """``shared_tier_reuse`` with two servers of two pipeline stages each: A's stages
    store their layers in the remote tier under worker ids 0 and 1; once B's lmcache
    finds the prompt there (both stages' engines), B gets it and each of B's stages
    loads its own layers, not the other stage's; then B gets it once more."""
    _shared_tier_reuse(run, pp_size=2, tp_size=1)


def shared_tier_pp_tp_reuse(run: AtomRun) -> None:
    """``shared_tier_pp_reuse`` with two servers of two pipeline stages of two TP ranks
    each (the wider model: each worker holds two layers and two KV heads of four): A's
    four workers store their shards in the remote tier under worker ids 0 to 3; once
    B's lmcache finds the prompt there (every worker's engine), B gets it and each of
    B's workers loads its own stage's layers and its own heads; then B gets it once
    more."""
    _shared_tier_reuse(run, pp_size=2, tp_size=2, **WIDE)


def dsv4_shared_tier_reuse(run: AtomRun) -> None:
    """``shared_tier_reuse`` with two DeepSeek-V4 servers of one spec: A stores a
    600-token prompt's PAGE units and SLOT sidecars in the remote tier; once B's
    lmcache finds its PAGE units there, B gets the prompt, then gets it once more.
    ATOM's hybrid hit needs a SLOT sidecar committed in the scheduler's own session
    (version 1, ``hybrid/dsv4/connector.py:1922-1936``), so B's first request
    recomputes; its second loads what the tier holds at the boundary B committed."""
    _shared_tier_reuse(run, prompt=600, **HYBRID)


def dsv4_shared_tier_kv_dtype(run: AtomRun) -> None:
    """``shared_tier_kv_dtype`` on two DeepSeek-V4 servers: A's KV cache bf16 (one KV
    plane), B's fp8 (two planes: other PAGE and SLOT bytes for the same tokens). A
    stores a 600-token prompt's PAGE units and SLOT sidecar in the shared remote tier;
    once the tier holds them B gets the prompt, then once more. B must not find A's
    PAGE units: B's first request recomputes and commits its own sidecar, and its
    second loads B's own bytes, not A's (B's requests carry another media seed, as
    the dense row's: the fake model's pages do not depend on the dtype)."""
    spec = {**HYBRID, "prefix_caching": False, "shared_tier": True}
    a = run.server("A", **spec)
    b = run.server("B", **spec, kv_cache_dtype="fp8", machine="m2")
    p = run.prompt(600)
    run.serve(a, AtomRequest("A-first", p))
    run.stored(a, p, shared_tier=True)  # as in shared_tier_two_layouts
    run.serve(b, AtomRequest("B-same", p, cache_seed=LAYOUT_B))
    run.serve(b, AtomRequest("B-again", p, cache_seed=LAYOUT_B))
    run.end(a, b)


def dsv4_shared_tier_spill(run: AtomRun) -> None:
    """``dsv4_shared_tier_reuse`` with B's lmcache CPU pool the size of
    ``dsv4_disk_spill``'s: after B's first request (which recomputes and commits its
    own sidecar) B serves five other prompts, which push the prompt's PAGE units and
    SLOT sidecar out of B's CPU pool; B's second request reads them from the remote
    tier."""
    _shared_tier_reuse(
        run, prompt=600, others=SPILL_OTHERS, b_cpu_cache_gib=DSV4_SPILL_CPU_GIB, **HYBRID
    )


def _shared_tier_reuse(
    run: AtomRun,
    prompt: int = 200,
    others: int = 0,
    b_cpu_cache_gib: float | None = None,
    **spec: Any,
) -> None:
    """A stores a prompt in the shared tier; B gets it, ``others`` other prompts, then
    it again (B's CPU pool ``b_cpu_cache_gib`` GiB when given)."""
    spec = {"prefix_caching": False, "shared_tier": True, **spec}
    a = run.server("A", **spec)
    b_pool = {} if b_cpu_cache_gib is None else {"cpu_cache_gib": b_cpu_cache_gib}
    b = run.server("B", machine="m2", **spec, **b_pool)
    p = run.prompt(prompt)
    run.serve(a, AtomRequest("A-first", p))
    run.stored(b, p)
    run.serve(b, AtomRequest("B-same", p))
    for i in range(others):
        run.serve(b, AtomRequest(f"B-other{i}", run.prompt(prompt)))
    run.serve(b, AtomRequest("B-again", p))
    run.end(a, b)


def _two(run: AtomRun, a_spec: dict, b_spec: dict, prompt: int = 200, stored: bool = False) -> None:
    """A and B each get a ``prompt``-token prompt, then it again; with ``stored``, each
    server's "again" waits until its tier holds its prompt."""
    a = run.server("A", **{"prefix_caching": False, **a_spec})
    b = run.server("B", **{"prefix_caching": False, **b_spec})
    p, q = run.prompt(prompt), run.prompt(prompt)
    run.serve(a, AtomRequest("A-first", p))
    run.serve(b, AtomRequest("B-first", q))
    if stored:
        run.stored(a, p)
        run.stored(b, q)
    run.serve(a, AtomRequest("A-again", p))
    run.serve(b, AtomRequest("B-again", q))
    run.end(a, b)


def two_servers(run: AtomRun) -> None:
    """Two servers on one host, each storing a prompt and serving it again; B starts
    after A. Both leave the engine ``--port`` at ATOM's default 8006 and are DP rank 0,
    as two servers started from ATOM's recipes (which set only ``--server-port``) are."""
    _two(run, {}, {})


def dsv4_two_servers(run: AtomRun) -> None:
    """``two_servers`` with two DeepSeek-V4 servers (ATOM's hybrid connector; engine
    ``--port`` 8006 and DP rank 0 each): each stores a 600-token prompt (PAGE units and
    SLOT sidecar) and, once its tier holds the prompt's whole chunks, serves it again."""
    _two(run, HYBRID, HYBRID, prompt=600, stored=True)


def two_dp_ranks(run: AtomRun) -> None:
    """Two DP ranks of one server on one host (port 8000, ranks 0 and 1; B is A's
    replica), each storing a prompt and serving it again."""
    _two(run, {"port": 8000, "dp_rank": 0}, {"port": 8000, "dp_rank": 1, "replica_of": "A"})


def restart(run: AtomRun) -> None:
    """A server stores a prompt, restarts (its lmcache CPU pool lives in its worker and
    goes with it), and serves the prompt again; then once more from the new tier."""
    _restart(run, {"prefix_caching": False}, 200)


def dsv4_restart(run: AtomRun) -> None:
    """``restart`` on a DeepSeek-V4 server whose lmcache tier outlives it (the remote
    ``fs://`` tier): a 600-token prompt's PAGE units and SLOT sidecar stored there, the
    server restarted, the prompt again: lmcache finds its PAGE units, but ATOM's new
    scheduler session committed no sidecar (version 1: commits are session-local),
    so it recomputes; then once more."""
    _restart(run, {**HYBRID, "shared_tier": True}, 600, stored=True)


def _restart(run: AtomRun, spec: dict[str, Any], prompt: int, stored: bool = False) -> None:
    """``restart``'s requests on a server of ``spec``; with ``stored``, the restart
    waits until the tier holds the first prompt."""
    a = run.server("A", **spec)
    p = run.prompt(prompt)
    run.serve(a, AtomRequest("first", p))
    if stored:
        run.stored(a, p)
    run.end(a)
    a = run.host.restart(a)
    run.serve(a, AtomRequest("after-restart", p))
    run.serve(a, AtomRequest("again", p))
    run.end(a)


# -- pictures: a multimodal request whose prompt shares a prefix with another ----------
# A picture of 32 placeholders at tokens 128 to 160: past the first two 64-token chunks,
# inside the third. ATOM's runner merges a picture only over the placeholders in the
# tokens a forward computes, and only in the first forward that schedules the request.
PICTURE_AT, PICTURE_TOKENS = 128, 32


def _with_picture(text: tuple[int, ...], at: int = PICTURE_AT) -> tuple[int, ...]:
    """``text`` with its tokens from ``at`` on replaced by a picture's placeholders."""
    return text[:at] + (PICTURE_TOKEN,) * PICTURE_TOKENS + text[at + PICTURE_TOKENS :]


def picture_tier_suffix(run: AtomRun) -> None:
    """One server without an HBM prefix cache: a 200-token text prompt, stored; another
    prompt; then a prompt with the same first 128 tokens and a picture from there on
    (its placeholders at 128 to 160). lmcache holds the shared 2 chunks: ATOM loads
    them and computes the rest, the picture in the part it computes."""
    a = run.server("A", prefix_caching=False)
    p = run.prompt(200)
    run.serve(a, AtomRequest("text", p))
    run.stored(a, p)
    run.serve(a, AtomRequest("other", run.prompt(200)))
    run.serve(a, AtomRequest("pictured", _with_picture(p), picture=run.picture()))
    run.end(a)


def picture_hbm_suffix(run: AtomRun) -> None:
    """A server with ATOM's HBM prefix cache (its default) and room for both prompts:
    a 200-token text prompt, then one with the same first 48 tokens and a picture from
    there on (placeholders at 48 to 80, inside the first chunk, so lmcache holds none
    of it): HBM holds the shared 3 blocks, the picture lies in the part ATOM
    computes."""
    a = run.server("A")
    p = run.prompt(200)
    run.serve(a, AtomRequest("text", p))
    run.serve(a, AtomRequest("pictured", _with_picture(p, 48), picture=run.picture()))
    run.end(a)


def two_images_partial(run: AtomRun) -> None:
    """One server without an HBM prefix cache: a 200-token prompt with picture X at
    tokens 128 to 160, stored; another prompt; then the same token ids with picture Y.
    Only the first 128 tokens' KV is the same for both (the tokens before the
    picture); ATOM's lmcache keys are token ids, so the second prompt's lookup finds
    the first's 3 chunks, the third of them holding picture X's KV."""
    a = run.server("A", prefix_caching=False)
    q = _with_picture(run.prompt(200))
    run.serve(a, AtomRequest("dog", q, picture=run.picture()))
    run.stored(a, q)
    run.serve(a, AtomRequest("other", run.prompt(200)))
    run.serve(a, AtomRequest("cat", q, picture=run.picture()))
    run.end(a)


def picture_handoff(run: AtomRun) -> None:
    """``hbm_partial`` with a picture in the part still to compute: a 300-token text
    prompt, one other that evicts the tail of its blocks, then the first prompt's 256
    tokens and a picture after them (placeholders at 256 to 288). HBM holds 176 of its
    tokens (off the 64-token chunk grid), lmcache 256: ATOM's unaligned handoff
    computes up to the chunk boundary (192) first, loads the rest, then computes the
    picture's part."""
    a = run.server("A", num_blocks=30)
    p = run.prompt(300)
    run.serve(a, AtomRequest("first", p))
    run.serve(a, AtomRequest("other", run.prompt(300)))
    run.serve(a, AtomRequest("again", _with_picture(p, 256), picture=run.picture()))
    run.end(a)


def picture_resend(run: AtomRun) -> None:
    """A server with ATOM's HBM prefix cache (its default): a 200-token prompt with a
    picture at tokens 128 to 160, then the same prompt and picture again (a user asking
    the same question of the same image). HBM holds the first's blocks."""
    a = run.server("A")
    q, x = _with_picture(run.prompt(200)), run.picture()
    run.serve(a, AtomRequest("first", q, picture=x))
    run.serve(a, AtomRequest("again", q, picture=x))
    run.end(a)
