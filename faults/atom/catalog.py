"""What the ``atom`` tier runs: its rows (scenarios and faults), the properties each is
judged by, how each must end, and why the rest of kvfault's catalog does not apply.

Plain data built here and nowhere else. A row names its story
(``kvfault.faults.atom.scenarios``), the faults its servers carry (``FaultSpec``) and the
injector names that must fire. The tier's declaration reads three views of it: its
``Row``s (``kvfault.faults.atom.tier.rows``), its scenario catalog (``SCENARIOS``: each story
with the properties that judge it and how it must end) and its fault catalog
(``FAULTS``: each fault row, whose ``factory`` builds the ``ServerFault`` a run carries
to its servers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvfault.faults.atom import scenarios as s
from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.properties.names import Prop
from kvfault.faults.runs import Expect, finishes, refuses
from kvfault.faults.tiers.row_fault import RowFault

# In the order a row's detail names the first violation: what the story is about first.
_ONE = (
    Prop.CORRECTNESS,
    Prop.USAGE,
    Prop.KEYS,
    Prop.LIVENESS,
    Prop.NO_FALSE_STOP,
    Prop.EFFICIENCY,
    Prop.LOAD_FAILURES,
    Prop.EXACTLY_ONCE,
    Prop.RESOURCES,
)
_MANY = (
    Prop.IDENTITY,
    Prop.CORRECTNESS,
    Prop.USAGE,
    Prop.KEYS,
    Prop.LIVENESS,
    Prop.NO_FALSE_STOP,
    Prop.EXACTLY_ONCE,
    Prop.RESOURCES,
)

# A lookup that cannot reach the worker answers 0 while the tier holds the prompt: the
# recompute is the ending a user can rely on, so efficiency's "silent miss" is the
# fault's cost, not a violation; liveness and the rest judge that every request ends,
# right, with nothing held.
_UNREACHABLE = tuple(p for p in _ONE if p != Prop.EFFICIENCY)


# A DeepSeek-V4 request resumable from HBM below its tier hit: ATOM's DSV4 connector
# declines the tier load above a nonzero HBM floor for a request with state, by design
# (``hybrid/dsv4/connector.py:2137-2140``, "version 1", a correctness guard in its
# offload README), and computes the rest. Efficiency's loadable rule counts lmcache's
# PAGE units as a hit to load, so the recompute is that design's cost, not a miss.
_STATEFUL_HBM_FLOOR = tuple(p for p in _ONE if p != Prop.EFFICIENCY)


@dataclass(frozen=True)
class AtomRow:
    """One row of the atom campaign."""

    kind: str  # "scenario" or "fault"
    name: str
    description: str
    story: s.Story
    properties: tuple[str, ...]
    expect: Expect = field(default_factory=finishes)
    faults: FaultSpec = field(default_factory=FaultSpec)
    # Injector names whose firing counts as the row's, besides its own name (a worker
    # fault records its own injector's name: ``retrieve_failure``).
    fires: tuple[str, ...] = ()
    faulted: tuple[str, ...] = ()  # servers that carry the faults (empty: all)
    spec_changes: tuple[tuple[str, object], ...] = ()
    kills_server: bool = False  # no atom fault restarts what the tier opened
    # How many thread schedules one case of the row tells its story on (a row that
    # exists for a race): ``faults.atom.executor`` keeps the first that violates.
    schedules: int = 1

    @property
    def scenario(self) -> str:
        return self.story.__name__

    def factory(self, seed: int) -> ServerFault:
        """The fault as a run carries it (``kvfault.faults.tiers.TierFault``)."""
        return ServerFault(self, seed)


class ServerFault(RowFault[AtomRow]):
    """A fault row in a run's ``RunContext.injectors``: it wraps nothing in the
    campaign process; the executor hands its row's faults to the server processes and
    sets ``fired`` to how often they recorded it firing."""


@dataclass(frozen=True)
class AtomScenario:
    """A story as the campaign names it (``kvfault.faults.tiers.Tier.scenarios``): the
    properties that judge it, how it must end; it runs at one size."""

    name: str
    description: str
    story: s.Story
    properties: tuple[str, ...]
    expect: Expect = field(default_factory=finishes)
    scales: str = ""
    schedules: int = 1  # its scenario row's (``AtomRow.schedules``)


def _scenario(
    name: str,
    story: s.Story,
    props: tuple[str, ...],
    description: str,
    expect: Expect | None = None,
    schedules: int = 1,
) -> AtomRow:
    return AtomRow(
        "scenario", name, description, story, props, expect=expect or finishes(),
        schedules=schedules,
    )  # fmt: skip


def _fault(
    name: str,
    story: s.Story,
    props: tuple[str, ...],
    description: str,
    faults: FaultSpec = FaultSpec(),
    schedules: int = 1,
    **changes: object,
) -> AtomRow:
    return AtomRow(
        "fault",
        name,
        description,
        story,
        props,
        faults=faults,
        fires=(name,),
        spec_changes=tuple(sorted(changes.items())),
        schedules=schedules,
    )


def _files_fault(
    name: str,
    how: str,
    story: s.Story,
    props: tuple[str, ...],
    description: str,
    faulted: tuple[str, ...] = (),
) -> AtomRow:
    """A fault row that leaves lmcache's files ``how`` (``removed``, ``truncated``,
    ``chunks_truncated``: ``FaultSpec.tier_files``)
    right before the first retrieve of the prompt they hold, on the servers ``faulted``
    names (empty: every one)."""
    faults = FaultSpec(tier_files=(how, "retrieve", 1))
    return replace(_fault(name, story, props, description, faults), faulted=faulted)


def _rank_fault(
    name: str, description: str, faults: FaultSpec, fires: str, story: s.Story = s.tp_reuse_once
) -> AtomRow:
    """A fault row (on ``tp_reuse_once`` unless told) whose fault one TP rank's worker
    carries (``FaultSpec.rank``); it fires under the worker injector's own name."""
    return AtomRow("fault", name, description, story, _ONE, faults=faults, fires=(fires,))


def _hybrid_fault(
    name: str,
    story: s.Story,
    description: str,
    faults: FaultSpec,
    fires: str,
    props: tuple[str, ...] = _ONE,
    schedules: int = 1,
) -> AtomRow:
    """A dense fault row's fault on a DeepSeek-V4 server's story (ATOM's hybrid
    connector); it fires under the worker injector's own name."""
    return AtomRow(
        "fault", name, description, story, props, faults=faults, fires=(fires,),
        schedules=schedules,
    )  # fmt: skip


ROWS: dict[str, AtomRow] = {
    r.name: r
    for r in (
        _scenario(
            "prefix_reuse", s.prefix_reuse, _ONE, "a prompt stored, then served twice from lmcache"
        ),
        _scenario(
            "dsv4_prefix_reuse",
            s.dsv4_prefix_reuse,
            _ONE,
            "prefix_reuse on a DeepSeek-V4 model, ATOM's hybrid connector: PAGE units and "
            "the SLOT checkpoint stored, then loaded",
        ),
        _scenario(
            "dsv4_fp8_prefix_reuse",
            s.dsv4_fp8_prefix_reuse,
            _ONE,
            "dsv4_prefix_reuse with an fp8 KV cache: two KV planes (fp8 NoPE, bf16 RoPE), "
            "each with its PAGE and SLOT regions",
        ),
        _scenario(
            "dsv4_tp2_prefix_reuse",
            s.dsv4_tp2_prefix_reuse,
            _ONE,
            "dsv4_prefix_reuse at TP 2: each rank stores and loads its own PAGE units and "
            "SLOT sidecar, rank 0 answers the lookups",
        ),
        _scenario(
            "dsv4_hbm_pressure",
            s.dsv4_hbm_pressure,
            _ONE,
            "a DeepSeek-V4 prompt whose pages HBM keeps without a state checkpoint: ATOM "
            "resumes at 0 and loads PAGE units and the SLOT from lmcache",
        ),
        _scenario(
            "resume_preempted",
            s.resume_preempted,
            _ONE,
            "a request preempted while it decodes and resumed from lmcache: its answer "
            "must be its cold run's",
        ),
        _scenario(
            "dsv4_resume_preempted",
            s.dsv4_resume_preempted,
            _ONE,
            "a DeepSeek-V4 request preempted while it decodes and resumed from lmcache "
            "(512 tokens of PAGE units and the SLOT): its answer must be its cold run's",
        ),
        _scenario(
            "dsv4_checkpoint_dropped",
            s.dsv4_checkpoint_dropped,
            _ONE,
            "a DeepSeek-V4 state checkpoint ATOM's block manager drops for want of PAGE "
            "units: the resent prompt must not resume from HBM there; it loads from lmcache",
        ),
        _scenario(
            "dsv4_hbm_partial",
            s.dsv4_hbm_partial,
            _STATEFUL_HBM_FLOOR,
            "a DeepSeek-V4 prompt resumable from ATOM's HBM prefix cache at 256 (a paged "
            "state checkpoint), lmcache holding 512: the state restored from HBM, the "
            "rest computed",
        ),
        _scenario(
            "concurrent_loads",
            s.concurrent_loads,
            _ONE,
            "four requests extending a stored prompt arrive at once: four loads in flight",
            schedules=3,
        ),
        _scenario(
            "dsv4_concurrent_loads",
            s.dsv4_concurrent_loads,
            _ONE,
            "concurrent_loads on a DeepSeek-V4 model: four loads of PAGE units and a SLOT "
            "each in flight at once",
        ),
        _scenario(
            "chunk_aligned",
            s.chunk_aligned,
            _ONE,
            "a 4-chunk prompt sent twice: the whole prompt hits",
        ),
        _scenario("hbm_pressure", s.hbm_pressure, _ONE, "a prompt pushed out of HBM, then resent"),
        _scenario(
            "hbm_partial",
            s.hbm_partial,
            _ONE,
            "a prompt partly in HBM (off the chunk grid), the rest in lmcache",
        ),
        _scenario(
            "picture_tier_suffix",
            s.picture_tier_suffix,
            _ONE,
            "a prompt with a picture after a prefix lmcache holds: the picture in the part "
            "ATOM computes",
        ),
        _scenario(
            "picture_hbm_suffix",
            s.picture_hbm_suffix,
            _ONE,
            "a prompt with a picture after a prefix HBM holds: the picture in the part "
            "ATOM computes",
        ),
        _scenario(
            "two_images_partial",
            s.two_images_partial,
            _ONE,
            "one prompt's token ids with picture X, then with picture Y (after the first "
            "2 chunks): lmcache holds X's chunks",
        ),
        _scenario(
            "picture_handoff",
            s.picture_handoff,
            _ONE,
            "hbm_partial with a picture after the chunk boundary: the unaligned handoff "
            "splits a multimodal prefill",
        ),
        _scenario(
            "picture_resend",
            s.picture_resend,
            _ONE,
            "a prompt with a picture sent twice to a server with ATOM's HBM prefix cache",
        ),
        _scenario(
            "hbm_partial_deferred",
            s.hbm_partial_deferred,
            _ONE,
            "hbm_partial with deferred output: the parked partial prefill's first token",
        ),
        _scenario(
            "reload_twice",
            s.reload_twice,
            _ONE,
            "a prompt restored from lmcache into HBM, then sent again: HBM serves it",
        ),
        _scenario(
            "resend_at_defaults",
            s.resend_at_defaults,
            # Not efficiency: ATOM recomputes a tier hit below OFFLOAD_MIN_LOAD_TOKENS by
            # design (its setting), which that property's loadable rule does not know.
            tuple(p for p in _ONE if p != Prop.EFFICIENCY),
            "ATOM's offload defaults (min load 8192, chunk 256): a 1024-token prompt resent "
            "three times, each tier hit below the minimum load",
        ),
        _scenario(
            "tier_hit_burst",
            s.tier_hit_burst,
            _ONE,
            "more loads from lmcache than requests admitted at once (max_num_seqs 2)",
        ),
        _scenario(
            "one_token",
            s.one_token,
            _ONE,
            "a one-token answer: its save ends after the request does",
            schedules=2,
        ),
        _scenario(
            "shutdown_after_answer",
            s.shutdown_after_answer,
            _ONE,
            "the server shut down right after its last answer, its save still in flight",
            schedules=2,
        ),
        _scenario(
            "disk_spill",
            s.disk_spill,
            _ONE,
            "a prompt pushed out of lmcache's CPU pool onto its local disk, then resent",
        ),
        _scenario(
            "disk_without_size",
            s.disk_without_size,
            _ONE,
            "a local disk path without a disk size: the server must refuse to start",
            # ATOM's config check raises ValueError in the worker's connector.
            refuses("ValueError"),
        ),
        _scenario(
            "shared_tier_two_layouts",
            s.shared_tier_two_layouts,
            _MANY,
            "two KV layouts of one model (heads of 8 and 16) share a remote lmcache tier",
        ),
        _scenario(
            "shared_tier_kv_dtype",
            s.shared_tier_kv_dtype,
            _MANY,
            "two KV cache dtypes of one model (bf16 and fp8) share a remote lmcache tier",
        ),
        _scenario(
            "shared_tier_tp_sizes",
            s.shared_tier_tp_sizes,
            _MANY,
            "two TP sizes of one model (one worker rank and two) share a remote lmcache tier",
        ),
        _scenario(
            "shared_tier_tp_pp",
            s.shared_tier_tp_pp,
            _MANY,
            "one model at TP 2 and at PP 2 (one world size, other bytes per worker) shares "
            "a remote lmcache tier",
        ),
        _scenario(
            "shared_tier_pp_reuse",
            s.shared_tier_pp_reuse,
            _MANY,
            "two PP 2 servers on two machines share a remote lmcache tier: each of B's "
            "stages loads the layers A's same stage stored",
        ),
        _scenario(
            "shared_tier_pp2_tp2_reuse",
            s.shared_tier_pp_tp_reuse,
            _MANY,
            "two PP 2 x TP 2 servers (4 KV heads, 4 layers) on two machines share a remote "
            "lmcache tier: each of B's four workers loads the shard A's same worker stored",
        ),
        _scenario(
            "shared_tier_reuse",
            s.shared_tier_reuse,
            _MANY,
            "two servers of one layout on two machines share a remote lmcache tier: B loads "
            "what A stored",
        ),
        _scenario(
            "two_servers",
            s.two_servers,
            _MANY,
            "two servers on one host (engine --port 8006, ATOM's default, and DP rank 0 each)",
        ),
        _scenario("two_dp_ranks", s.two_dp_ranks, _MANY, "two DP ranks of one server on one host"),
        _scenario(
            "dsv4_two_servers",
            s.dsv4_two_servers,
            _MANY,
            "two_servers with two DeepSeek-V4 servers on one host (engine --port 8006 and "
            "DP rank 0 each)",
        ),
        _scenario(
            "restart",
            s.restart,
            # Not efficiency: the restarted worker's CPU pool is empty, as it should be.
            tuple(p for p in _ONE if p != Prop.EFFICIENCY),
            "a server restarts between storing a prompt and serving it again",
        ),
        _scenario(
            "tp2_prefix_reuse",
            s.tp_prefix_reuse,
            _ONE,
            "prefix_reuse at TP 2: both ranks store and load their shards, rank 0 alone "
            "answers lookups",
        ),
        _scenario(
            "tp4_prefix_reuse",
            s.tp4_prefix_reuse,
            _ONE,
            "prefix_reuse at TP 4 (a model of 4 KV heads and 4 layers): four ranks store and "
            "load their shards, rank 0 alone answers lookups, ATOM's aggregator over four",
        ),
        _scenario(
            "pp2_tp2_prefix_reuse",
            s.pp_tp_prefix_reuse,
            _ONE,
            "prefix_reuse at PP 2 x TP 2 (a model of 4 KV heads and 4 layers): four workers, "
            "worker 0 alone answers lookups, ATOM's aggregator over each stage's two ranks, "
            "then its PPKVAggregator over the stages",
        ),
        _scenario(
            "pp2_prefix_reuse",
            s.pp_prefix_reuse,
            _ONE,
            "prefix_reuse at PP 2: each stage stores and restores its own layer, stage 0 "
            "alone answers lookups, ATOM's PPKVAggregator completes each load",
        ),
        _fault(
            "slow_first_forward",
            s.reuse_once,
            _ONE,
            "the worker's first forward takes 2 s: a save dispatched before that forward "
            "computed its blocks would store them unwritten",
            FaultSpec(slow_first_forward_s=2.0),
        ),
        _fault(
            "hung_retrieve",
            s.two_loads_behind_one,
            _ONE,
            "lmcache's first retrieve never answers and the client aborts its request: "
            "the other request's load waits behind it on ATOM's one load thread",
            FaultSpec(hang_retrieve=1, abort_loading=1),
        ),
        AtomRow(
            "fault",
            "hung_retrieve_later_batch",
            "hung_retrieve with the second load in a later batch: lmcache's first "
            "retrieve never answers and the client aborts its request; a stored prompt "
            "sent again afterwards has its load wait behind it on ATOM's one load thread",
            s.hung_then_later_load,
            _ONE,
            faults=FaultSpec(hang_retrieve=1, abort_loading=1),
            fires=("hung_retrieve",),  # the worker injector's own name
        ),
        _fault(
            "duplicate_completion",
            s.reuse_once,
            _ONE,
            "the first finished load is reported in two polls",
            FaultSpec(duplicate_finished=("load", 1)),
        ),
        _fault(
            "hash_order_shuffle",
            s.reuse_once,
            _ONE,
            "scheduler and worker run with different PYTHONHASHSEED (0 and 1)",
            scheduler_hash_seed=0,
            worker_hash_seed=1,
        ),
        _fault(
            "lost_lookup_reply",
            s.reuse_once,
            _ONE,
            "the worker's lookup server drops its first reply; the next lookup must hit",
            FaultSpec(drop_lookup_reply=1),
        ),
        _fault(
            "slow_save",
            s.decode_pressure,
            _ONE,
            "every lmcache store waits 1 s before it reads the blocks; two decoding "
            "requests outgrow HBM meanwhile",
            FaultSpec(slow_save_s=1.0),
            schedules=2,
        ),
        _fault(
            "abort_during_load",
            s.reuse_after_abort,
            _ONE,
            "every lmcache retrieve waits 1 s; the client aborts the request loading meanwhile",
            FaultSpec(slow_retrieve_s=1.0, abort_loading=1),
            schedules=2,
        ),
        _fault(
            "slow_retrieve",
            s.unaligned_handoff,
            _ONE,
            "every lmcache retrieve waits 0.3 s, so a decoding request's forwards run "
            "while the handoff's head is parked for its load (deferred output)",
            FaultSpec(slow_retrieve_s=0.3),
            schedules=2,
        ),
        _fault(
            "retrieve_failure",
            s.reuse_once,
            _ONE,
            "lmcache's first retrieve raises",
            FaultSpec(fail_retrieve=1),
        ),
        _fault(
            "store_failure",
            s.recompute_then_reuse,
            _ONE,
            # ATOM's finished save promises freed blocks, not stored data: the row
            # judges that the failure frees, answers right and recomputes (no silent
            # miss is claimed for chunks lmcache never held).
            "lmcache's first store raises: its blocks are freed, the next request recomputes "
            "right, and the one after loads what it stored",
            FaultSpec(fail_store=1),
        ),
        _fault(
            "pin_timeout_during_load",
            s.reuse_once,
            _ONE,
            "lmcache's PinMonitor force-unpins the lookup's chunks (pin timeout 1 s) while "
            "every retrieve waits 2.5 s; then ATOM's own unpin",
            FaultSpec(slow_retrieve_s=2.5, pin_timeout_s=1),
        ),
        _fault(
            "copy_out_failure",
            s.recompute_then_reuse,
            _ONE,
            "the first store's copy out of the KV blocks (ATOM's BlockGPUConnector, "
            "lmcache's gpu_connector) raises after lmcache allocated its chunks (a failed "
            "GPU-to-host copy): no chunk may stay allocated outside lmcache's CPU pool",
            FaultSpec(fail_copy_out=1),
        ),
        _rank_fault(
            "tp2_rank1_retrieve_failure",
            "at TP 2, rank 1's lmcache retrieve raises while rank 0's loads its shard: the "
            "load must not be used half-loaded (ATOM reports it failed and recomputes)",
            FaultSpec(fail_retrieve=1, rank=1),
            "retrieve_failure",
        ),
        _rank_fault(
            "tp2_rank1_late_load",
            "at TP 2, rank 1's lmcache retrieve waits 1 s, so rank 1 reports its load "
            "finished polls after rank 0: the request must wait for both shards",
            FaultSpec(slow_retrieve_s=1.0, rank=1),
            "slow_retrieve",
        ),
        _rank_fault(
            "pp2_stage1_retrieve_failure",
            "at PP 2, stage 1's lmcache retrieve raises while stage 0 loads its layer: "
            "ATOM's PPKVAggregator must report the load failed once both stages reported, "
            "and the request recompute, never use the half-loaded KV",
            FaultSpec(fail_retrieve=1, rank=1),
            "retrieve_failure",
            story=s.pp_reuse_once,
        ),
        _rank_fault(
            "pp2_stage1_late_load",
            "at PP 2, stage 1's lmcache retrieve waits 1 s, so stage 1 reports its load "
            "finished polls after stage 0: the request must wait for both stages' layers",
            FaultSpec(slow_retrieve_s=1.0, rank=1),
            "slow_retrieve",
            story=s.pp_reuse_once,
        ),
        _rank_fault(
            "pp2_stage1_store_failure",
            "at PP 2, stage 1's first lmcache store raises while stage 0 stores its layer: "
            "the save is reported finished, stage 0's engine answers the lookup, stage 1's "
            "retrieve misses, and the request recomputes right",
            FaultSpec(fail_store=1, rank=1),
            "store_failure",
            story=s.pp_recompute_then_reuse,
        ),
        _rank_fault(
            "pp2_stage1_late_save",
            "at PP 2, stage 1's lmcache store waits 1 s before it reads the blocks, so stage "
            "1 reports its save finished after stage 0: the blocks must stay until both "
            "stages read them",
            FaultSpec(slow_save_s=1.0, rank=1),
            "slow_save",
            story=s.pp_store_then_reuse,
        ),
        _rank_fault(
            "tp4_rank3_retrieve_failure",
            "at TP 4, rank 3's first lmcache retrieve raises 1 s late, after ranks 0 to 2 "
            "loaded their shards: ATOM's aggregator over four must report the load failed "
            "and the request recompute, never use the three-quarters-loaded KV",
            FaultSpec(fail_retrieve=1, slow_retrieve_s=1.0, rank=3),
            "retrieve_failure",
            story=s.tp4_reuse_once,
        ),
        _fault(
            "lookup_socket_removed",
            s.lookup_after_socket_loss,
            _UNREACHABLE,
            "the lookup socket's path is removed (a cleanup) and one lookup reply is lost: "
            "lmcache's client reconnects to nothing; each later lookup waits its timeout, "
            "answers 0, and ATOM recomputes",
            FaultSpec(remove_lookup_socket=2, drop_lookup_reply=2),
        ),
        _fault(
            "lookup_socket_stolen",
            s.lookup_after_socket_loss,
            _UNREACHABLE,
            "another socket that never answers is bound at the lookup path (a stale "
            "process) and one lookup reply is lost: lmcache's client reconnects to it; "
            "each later lookup waits its timeout, answers 0, and ATOM recomputes",
            FaultSpec(steal_lookup_socket=2, drop_lookup_reply=2),
        ),
        _fault(
            "lost_hit_reply",
            s.lookup_after_socket_loss,
            _UNREACHABLE,
            "the reply to the first lookup that found the prompt (and pinned its chunks) "
            "is lost: ATOM is told 0 and recomputes; the pin must still be released",
            FaultSpec(drop_hit_reply=1),
        ),
        # lmcache's save_unfull_chunk on (lmcache's default is off and ATOM's recipes
        # do not set it; a reused vLLM lmcache config might): ATOM's own saves stop at
        # the chunk grid (dense/connector.py's build_connector_meta), so lmcache then
        # only keys a partial last chunk in lookups and retrieves, which always miss it.
        _fault(
            "unfull_prefix_reuse",
            s.prefix_reuse,
            _ONE,
            "prefix_reuse (prompts of 200 and 240 tokens: partial last chunks) with "
            "LMCACHE_SAVE_UNFULL_CHUNK=True",
            save_unfull_chunk=True,
        ),
        _fault(
            "unfull_hbm_partial",
            s.hbm_partial,
            _ONE,
            "hbm_partial (the unaligned handoff, a 300-token prompt) with "
            "LMCACHE_SAVE_UNFULL_CHUNK=True",
            save_unfull_chunk=True,
        ),
        _fault(
            "unfull_chunk_aligned",
            s.chunk_aligned,
            _ONE,
            "chunk_aligned (a whole 4-chunk hit, claimed one token short) with "
            "LMCACHE_SAVE_UNFULL_CHUNK=True",
            save_unfull_chunk=True,
        ),
        _files_fault(
            "remote_tier_removed",
            "removed",
            s.shared_tier_reuse,
            _MANY,
            "the shared remote tier's directory is removed right before B's first "
            "retrieve (B's lookup found A's chunks there)",
            faulted=("B",),
        ),
        _files_fault(
            "remote_tier_truncated",
            "truncated",
            s.shared_tier_reuse,
            _MANY,
            "each chunk file of the shared remote tier is cut to half its bytes right "
            "before B's first retrieve (a file shortened after it was written)",
            faulted=("B",),
        ),
        _files_fault(
            "disk_removed",
            "removed",
            s.disk_spill,
            _ONE,
            "lmcache's local disk directory is removed right before the retrieve of the "
            "prompt it holds (its CPU pool no longer does)",
        ),
        _files_fault(
            "disk_truncated",
            "truncated",
            s.disk_spill,
            _ONE,
            "each file of lmcache's local disk is cut to half its bytes right before the "
            "retrieve of the prompt it holds (a file shortened after lmcache wrote and "
            "indexed it)",
        ),
        _rank_fault(
            "tp2_rank1_late_save",
            "at TP 2, rank 1's lmcache store waits 1 s before it reads the blocks, so rank 1 "
            "reports its save finished after rank 0: the blocks must stay until both read them",
            FaultSpec(slow_save_s=1.0, rank=1),
            "slow_save",
            s.tp_store_then_reuse,
        ),
        _rank_fault(
            "tp2_rank1_store_failure",
            "at TP 2, rank 1's first lmcache store raises while rank 0's stores its shard: "
            "the save is reported finished (its blocks freed), rank 0's engine answers "
            "the lookup, rank 1's retrieve misses, and the request recomputes right",
            FaultSpec(fail_store=1, rank=1),
            "store_failure",
            s.tp_recompute_then_reuse,
        ),
        AtomRow(
            "fault",
            "dsv4_tp2_rank1_slot_put_refused",
            "at TP 2 on a DeepSeek-V4 server, rank 1's first SLOT sidecar put is refused "
            "while rank 0's lands (every PAGE unit stored): ATOM must not commit that "
            "boundary, so the resend recomputes and the one after loads on both ranks",
            s.dsv4_tp2_slot_lost_then_reuse,
            _UNREACHABLE,
            faults=FaultSpec(fail_slot_put=1, rank=1),
            fires=("slot_put_refused",),
        ),
        _fault(
            "evict_after_lookup",
            s.reuse_once,
            _ONE,
            "right after the first lookup with a hit, every key lmcache holds is removed, forced "
            "(lmcache's own eviction never removes a chunk a lookup pinned)",
            FaultSpec(evict_after_lookup=1),
        ),
        _hybrid_fault(
            "dsv4_retrieve_failure",
            s.dsv4_reuse_once,
            "retrieve_failure on a DeepSeek-V4 model (the hybrid connector): lmcache's first "
            "PAGE retrieve raises; ATOM must fail the load and recompute",
            FaultSpec(fail_retrieve=1),
            "retrieve_failure",
        ),
        _hybrid_fault(
            "dsv4_store_failure",
            s.dsv4_recompute_then_reuse,
            "store_failure on a DeepSeek-V4 model: lmcache's first PAGE store raises; the "
            "resent prompt recomputes right and the one after loads what it stored",
            FaultSpec(fail_store=1),
            "store_failure",
        ),
        _hybrid_fault(
            "dsv4_abort_during_load",
            s.dsv4_reuse_after_abort,
            "abort_during_load on a DeepSeek-V4 model: every lmcache retrieve waits 1 s; the "
            "client aborts the request loading PAGE and SLOT meanwhile",
            FaultSpec(slow_retrieve_s=1.0, abort_loading=1),
            "abort_during_load",
        ),
        _hybrid_fault(
            "dsv4_corrupt_slot",
            s.dsv4_recompute_then_reuse,
            "the first SLOT sidecar a load reads back has a byte flipped: ATOM must find it "
            "corrupt (its checksum), fail the load and recompute; the third request loads "
            "the sidecar the recompute stored again",
            FaultSpec(corrupt_slot=1),
            "corrupt_slot",
        ),
        AtomRow(
            "fault",
            "dsv4_slot_put_refused",
            # lmcache holds the first request's PAGE units and no SLOT: ATOM's hybrid
            # hit needs both, so the resent prompt recomputes, which is its promise.
            # Declared without efficiency while it counted PAGE units alone as loadable.
            "the first SLOT sidecar put is refused (lmcache holds the PAGE units, no SLOT): "
            "the resent prompt must not load PAGE without its SLOT (ATOM recomputes), and "
            "the one after loads what the recompute stored",
            s.dsv4_slot_lost_then_reuse,
            _UNREACHABLE,
            faults=FaultSpec(fail_slot_put=1),
            fires=("slot_put_refused",),
        ),
        AtomRow(
            "fault",
            "dsv4_lost_hit_reply",
            "lost_hit_reply on a DeepSeek-V4 model: the reply to the lookup that found the "
            "prompt (and pinned it) is lost; ATOM is told 0 and recomputes, and the pin must "
            "still be released",
            s.dsv4_lookup_reply_lost,
            _UNREACHABLE,
            faults=FaultSpec(drop_hit_reply=1),
            fires=("lost_hit_reply",),
        ),
        _hybrid_fault(
            "dsv4_copy_out_failure",
            s.dsv4_recompute_then_reuse,
            "copy_out_failure on a DeepSeek-V4 model: the first PAGE store's copy out of "
            "ATOM's regions raises after lmcache allocated its chunks: no chunk may stay "
            "allocated outside lmcache's CPU pool",
            FaultSpec(fail_copy_out=1),
            "copy_out_failure",
        ),
        _hybrid_fault(
            "dsv4_pin_timeout_during_load",
            s.dsv4_reuse_once,
            "pin_timeout_during_load on a DeepSeek-V4 model: lmcache's PinMonitor force-unpins "
            "the lookup's PAGE chunks (pin timeout 1 s) while every retrieve waits 2.5 s; then "
            "ATOM's own unpin",
            FaultSpec(slow_retrieve_s=2.5, pin_timeout_s=1),
            "pin_timeout_during_load",
        ),
        _hybrid_fault(
            "dsv4_duplicate_completion",
            s.dsv4_reuse_once,
            "duplicate_completion on a DeepSeek-V4 model: the first finished load is reported "
            "in two polls",
            FaultSpec(duplicate_finished=("load", 1)),
            "duplicate_completion",
        ),
        _hybrid_fault(
            "dsv4_slow_retrieve",
            s.dsv4_load_beside_decode,
            "slow_retrieve on a DeepSeek-V4 model (deferred output): every lmcache PAGE "
            "retrieve waits 0.3 s, so a decoding request's forwards run while the resent "
            "prompt is parked for its PAGE and SLOT load",
            FaultSpec(slow_retrieve_s=0.3),
            "slow_retrieve",
            schedules=2,
        ),
        _hybrid_fault(
            "dsv4_slow_save",
            s.dsv4_store_then_reuse,
            "slow_save on a DeepSeek-V4 model: every lmcache PAGE store waits 1 s before it "
            "reads ATOM's regions while another prompt runs: the blocks must stay the "
            "request's until its save read them",
            FaultSpec(slow_save_s=1.0),
            "slow_save",
            schedules=2,
        ),
        _hybrid_fault(
            "dsv4_slow_first_forward",
            s.dsv4_reuse_once,
            "slow_first_forward on a DeepSeek-V4 model: the forward of the stored prompt's "
            "first 512 tokens takes 2 s; a PAGE save dispatched before it computed them "
            "would store them unwritten",
            FaultSpec(slow_first_forward_s=2.0),
            "slow_first_forward",
        ),
        _hybrid_fault(
            "dsv4_hung_retrieve",
            s.dsv4_two_loads_behind_one,
            "hung_retrieve on a DeepSeek-V4 model: lmcache's first PAGE retrieve never "
            "answers and the client aborts its request: the other request's load waits "
            "behind it on ATOM's one load thread",
            FaultSpec(hang_retrieve=1, abort_loading=1),
            "hung_retrieve",
        ),
        _hybrid_fault(
            "dsv4_hung_retrieve_later",
            s.dsv4_hung_then_later_loads,
            "hung_retrieve on a DeepSeek-V4 model, then later batches: lmcache's first "
            "PAGE retrieve never answers and the client aborts its request; a stored "
            "prompt sent again in a later batch, and a prompt stored after the hang and "
            "sent again",
            FaultSpec(hang_retrieve=1, abort_loading=1),
            "hung_retrieve",
        ),
        _hybrid_fault(
            "dsv4_lookup_socket_stolen",
            s.dsv4_lookup_reply_lost,
            "lookup_socket_stolen on a DeepSeek-V4 model: a socket that never answers is "
            "bound at the lookup path and one lookup reply is lost; each later lookup "
            "waits its timeout, answers 0, and ATOM recomputes",
            FaultSpec(steal_lookup_socket=2, drop_lookup_reply=2),
            "lookup_socket_stolen",
            _UNREACHABLE,
        ),
        _hybrid_fault(
            "dsv4_lookup_socket_removed",
            s.dsv4_lookup_reply_lost,
            "lookup_socket_removed on a DeepSeek-V4 model: the lookup socket's path is "
            "removed and one lookup reply is lost; each later lookup waits its timeout, "
            "answers 0, and ATOM recomputes",
            FaultSpec(remove_lookup_socket=2, drop_lookup_reply=2),
            "lookup_socket_removed",
            _UNREACHABLE,
        ),
        _scenario(
            "dsv4_disk_spill",
            s.dsv4_disk_spill,
            _ONE,
            "disk_spill on a DeepSeek-V4 model: a prompt's PAGE units and SLOT sidecar "
            "pushed out of lmcache's CPU pool onto its local disk, then loaded from it",
        ),
        _scenario(
            "dsv4_fp8_disk_spill",
            s.dsv4_fp8_disk_spill,
            _ONE,
            "dsv4_disk_spill with an fp8 KV cache: the two-plane PAGE units and SLOT "
            "sidecar pushed onto lmcache's local disk, then loaded from it",
        ),
        replace(
            _files_fault(
                "dsv4_disk_removed",
                "removed",
                s.dsv4_disk_spill,
                _ONE,
                "disk_removed on a DeepSeek-V4 model: lmcache's local disk directory is "
                "removed right before the PAGE retrieve of the prompt only the disk holds",
            ),
            fires=("disk_removed",),
        ),
        replace(
            _files_fault(
                "dsv4_disk_truncated",
                "truncated",
                s.dsv4_disk_spill,
                _ONE,
                "disk_truncated on a DeepSeek-V4 model: each file of lmcache's local disk "
                "(PAGE units and SLOT sidecars) is cut to half its bytes right before the "
                "PAGE retrieve of the prompt only the disk holds",
            ),
            fires=("disk_truncated",),
        ),
        replace(
            _files_fault(
                "dsv4_disk_page_truncated",
                "chunks_truncated",
                s.dsv4_disk_spill,
                _ONE,
                "dsv4_disk_truncated with the PAGE chunks alone cut: each local disk file "
                "of the chunks the PAGE retrieve asks for is cut to half its bytes right "
                "before it; the SLOT sidecars stay whole",
            ),
            fires=("disk_chunks_truncated",),
        ),
        _scenario(
            "dsv4_shared_tier_reuse",
            s.dsv4_shared_tier_reuse,
            _MANY,
            "shared_tier_reuse with two DeepSeek-V4 servers of one spec: B recomputes "
            "(ATOM's SLOT commits are per scheduler session), then loads from the tier",
        ),
        _scenario(
            "dsv4_shared_tier_kv_dtype",
            s.dsv4_shared_tier_kv_dtype,
            _MANY,
            "shared_tier_kv_dtype on two DeepSeek-V4 servers (bf16 and fp8 KV) sharing a "
            "remote lmcache tier: B must not load A's PAGE units or SLOT sidecar",
        ),
        _hybrid_fault(
            "dsv4_lost_lookup_reply",
            s.dsv4_reuse_once,
            "lost_lookup_reply on a DeepSeek-V4 model: the worker's lookup server drops its "
            "first reply; the next lookup must hit",
            FaultSpec(drop_lookup_reply=1),
            "lost_lookup_reply",
        ),
        _fault(
            "dsv4_hash_order_shuffle",
            s.dsv4_reuse_once,
            _ONE,
            "hash_order_shuffle on a DeepSeek-V4 model: scheduler and worker run with "
            "different PYTHONHASHSEED (0 and 1)",
            scheduler_hash_seed=0,
            worker_hash_seed=1,
        ),
        replace(
            _files_fault(
                "dsv4_remote_tier_removed",
                "removed",
                s.dsv4_shared_tier_spill,
                _MANY,
                "remote_tier_removed on DeepSeek-V4 servers: the shared remote tier's "
                "directory is removed right before B's first retrieve (B's CPU pool no "
                "longer holds the prompt's PAGE units and SLOT sidecar)",
                faulted=("B",),
            ),
            fires=("remote_tier_removed",),
        ),
        replace(
            _files_fault(
                "dsv4_remote_tier_truncated",
                "truncated",
                s.dsv4_shared_tier_spill,
                _MANY,
                "remote_tier_truncated on DeepSeek-V4 servers: each chunk file of the "
                "shared remote tier (PAGE units and SLOT sidecars) is cut to half its bytes "
                "right before B's first retrieve (B's CPU pool no longer holds them)",
                faulted=("B",),
            ),
            fires=("remote_tier_truncated",),
        ),
        _scenario(
            "dsv4_restart",
            s.dsv4_restart,
            tuple(p for p in _ONE if p != Prop.EFFICIENCY),
            "restart on a DeepSeek-V4 model whose remote tier outlives the server: its "
            "PAGE units are found after the restart, its SLOT commit is gone",
        ),
        _hybrid_fault(
            "dsv4_evict_after_lookup",
            s.dsv4_reuse_once,
            "evict_after_lookup on a DeepSeek-V4 model: right after the lookup that hit, "
            "every key lmcache holds (PAGE units and SLOT sidecars) is removed, forced",
            FaultSpec(evict_after_lookup=1),
            "evict_after_lookup",
        ),
    )
}

# The long matrix: rows a run of every row leaves out unless `kvfault run --full`
# (docs/atom/tier.md, "Which rows run by default"), each with the row of the default
# set that runs its feature or fault class. The rule: every row that FAILs at ATOM's
# main (a finding's or a lead's) runs by default, and so does one row of each class of
# the coverage table that PASSes there (a row that already fails shows no new break of
# its class), the cheapest; a row joins this list only with that row. A row not listed
# runs by default; named, every row runs.
LONG_MATRIX: dict[str, str] = {
    # variants of a class a default row already runs
    "hbm_pressure": "hbm_partial",  # a prompt partly or wholly out of ATOM's HBM cache
    "hbm_partial_deferred": "slow_retrieve",  # the parked handoff with deferred output
    "picture_hbm_suffix": "picture_tier_suffix",  # a picture in the part ATOM computes
    "remote_tier_removed": "disk_removed",  # storage files gone before a retrieve
    "remote_tier_truncated": "disk_removed",
    "shared_tier_pp_reuse": "pp2_prefix_reuse",  # each stage's own layers restored
    "lookup_socket_removed": "lookup_socket_stolen",  # a lost lookup socket
    "lost_lookup_reply": "lookup_socket_stolen",  # which drops a lookup's reply too
    # lmcache namespace fields on a shared remote tier: one layout field varied
    "shared_tier_kv_dtype": "shared_tier_two_layouts",
    "shared_tier_tp_sizes": "shared_tier_two_layouts",
    # LMCACHE_SAVE_UNFULL_CHUNK=True: one range with a partial tail
    "unfull_hbm_partial": "unfull_prefix_reuse",
    # TP 2 and PP 2: the plain reuse and one fault on one rank
    "tp2_rank1_late_load": "tp2_rank1_retrieve_failure",
    "tp2_rank1_late_save": "tp2_rank1_retrieve_failure",
    "tp2_rank1_store_failure": "tp2_rank1_retrieve_failure",
    "dsv4_tp2_rank1_slot_put_refused": "tp2_rank1_retrieve_failure",
    "pp2_stage1_late_load": "pp2_prefix_reuse",
    "pp2_stage1_retrieve_failure": "pp2_prefix_reuse",
    "pp2_stage1_store_failure": "pp2_prefix_reuse",
    "pp2_stage1_late_save": "pp2_prefix_reuse",
    # TP 4 and PP 2 x TP 2 (a wider model): the same paths over more workers
    "tp4_prefix_reuse": "tp2_prefix_reuse",
    "tp4_rank3_retrieve_failure": "tp2_rank1_retrieve_failure",
    "pp2_tp2_prefix_reuse": "pp2_prefix_reuse",
    "shared_tier_pp2_tp2_reuse": "pp2_prefix_reuse",
    # the hybrid connector: its reuse row; its faults are the dense rows' faults
    "dsv4_retrieve_failure": "dsv4_prefix_reuse",
    "dsv4_store_failure": "dsv4_prefix_reuse",
    "dsv4_abort_during_load": "dsv4_prefix_reuse",
    "dsv4_duplicate_completion": "dsv4_prefix_reuse",
    "dsv4_concurrent_loads": "dsv4_prefix_reuse",
    "dsv4_corrupt_slot": "dsv4_prefix_reuse",
    "dsv4_slot_put_refused": "dsv4_prefix_reuse",
    "dsv4_lost_hit_reply": "dsv4_prefix_reuse",
    "dsv4_copy_out_failure": "dsv4_prefix_reuse",
    "dsv4_pin_timeout_during_load": "dsv4_prefix_reuse",
    "dsv4_slow_retrieve": "dsv4_prefix_reuse",
    "dsv4_slow_save": "dsv4_prefix_reuse",
    "dsv4_slow_first_forward": "dsv4_prefix_reuse",
    "dsv4_lookup_socket_stolen": "dsv4_prefix_reuse",
    "dsv4_lookup_socket_removed": "dsv4_prefix_reuse",
    "dsv4_disk_spill": "dsv4_prefix_reuse",
    "dsv4_disk_removed": "dsv4_prefix_reuse",
    "dsv4_disk_truncated": "dsv4_prefix_reuse",
    "dsv4_shared_tier_reuse": "dsv4_prefix_reuse",
    "dsv4_evict_after_lookup": "dsv4_prefix_reuse",
    "dsv4_lost_lookup_reply": "dsv4_prefix_reuse",
    "dsv4_hash_order_shuffle": "dsv4_prefix_reuse",
    "dsv4_remote_tier_removed": "dsv4_prefix_reuse",
    "dsv4_remote_tier_truncated": "dsv4_prefix_reuse",
    "dsv4_restart": "dsv4_prefix_reuse",
    # dsv4_hung_retrieve FAILs at ATOM's main (the hybrid copy of hung_retrieve's
    # path: one load thread), so it runs by default; so does dsv4_disk_page_truncated
    # (disk_truncated's lmcache lead on the hybrid connector).
    "dsv4_hbm_partial": "dsv4_prefix_reuse",  # ATOM's HBM prefix cache on: paged checkpoints
    "dsv4_fp8_prefix_reuse": "dsv4_prefix_reuse",  # fp8 KV: a second KV plane
    "dsv4_fp8_disk_spill": "dsv4_prefix_reuse",  # fp8's two planes through the disk
    "dsv4_shared_tier_kv_dtype": "dsv4_prefix_reuse",  # bf16 and fp8 on one remote tier
    "dsv4_tp2_prefix_reuse": "dsv4_prefix_reuse",  # TP 2: per-rank PAGE and sidecar
    "dsv4_hbm_pressure": "dsv4_prefix_reuse",  # HBM pages kept, their checkpoint evicted
    "dsv4_checkpoint_dropped": "dsv4_prefix_reuse",  # HBM pages kept, their checkpoint dropped
}

_NO_MULTIMODAL = (
    "withdrawn: their prompt had no placeholder ids and the fake forward folded the picture "
    "into the first KV page, which ATOM's runner does not do (it merges a picture over the "
    "placeholders a forward computes); the picture rows are two_images_partial, "
    "picture_tier_suffix, picture_hbm_suffix and picture_handoff"
)
# Rows the tier ran once and refuses now, with why (``kvfault run --tier atom``).
DROPPED: dict[str, str] = {"two_images": _NO_MULTIMODAL, "two_images_hbm": _NO_MULTIMODAL}

# Why the rest of kvfault's catalog is not run here (``kvfault list --tier atom``).
NOT_HERE: dict[str, str] = {
    "two_images, two_images_hbm (multimodal prefix sharing)": _NO_MULTIMODAL,
    "regressions": "planted regressions swap the reference stack's rules; ATOM is judged as it is "
    "(use `kvfault prove` on two ATOM commits instead)",
    "grid, hybrid": "they run the reference stack's own state grid; ATOM's hybrid (DeepSeek-V4) "
    "connector runs in the dsv4_ rows, on the regions ATOM's DSV4 builder allocates",
    "determinism": "real processes in real time: the same seed need not give the same trace",
    "restart_burst, lost_completion_burst and other bound/deadline stories": "ATOM's offload "
    "has no transfer deadline or load bound to judge; a retrieve that never answers is the "
    "hung_retrieve row",
    "fence_failure, late_visibility, lost_save_completion, late_completion": "they wrap the "
    "reference stack's copy engine and completion channel, which ATOM does not have",
}


def _scenarios() -> dict[str, AtomScenario]:
    """Each story the rows tell, judged as its rows are (rows that tell one story
    agree on its properties and ending)."""
    out: dict[str, AtomScenario] = {}
    for row in ROWS.values():
        doc = " ".join((row.story.__doc__ or "").split()).split(". ")[0]
        known = out.setdefault(
            row.scenario, AtomScenario(row.scenario, doc, row.story, row.properties, row.expect)
        )
        if row.kind == "scenario" and row.name == row.scenario:
            out[row.scenario] = known = replace(known, schedules=row.schedules)
        if (known.properties, known.expect) != (row.properties, row.expect):
            raise ValueError(f"atom rows on {row.scenario} disagree on how it is judged")
    return out


SCENARIOS: dict[str, AtomScenario] = _scenarios()
FAULTS: dict[str, AtomRow] = {n: r for n, r in ROWS.items() if r.kind == "fault"}


def rows(names: list[str] | None = None) -> list[AtomRow]:
    """The rows named (all, in catalog order, when ``names`` is empty); ``KeyError``
    with one line for an unknown name."""
    if not names:
        return list(ROWS.values())
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        raise KeyError(f"unknown atom row {unknown[0]!r}; known: {', '.join(ROWS)}")
    return [ROWS[n] for n in names]
