"""Candidate fixes for the atom tier's findings (``kvfault run --tier atom --atom-fix
NAME``): each changes ATOM's behaviour at one named place by wrapping it, in the
server processes (an ATOM function, or lmcache's lookup client as ATOM's scheduler
reads it), so a finding's row can be run with and without its fix on the
same ATOM commit. Each is written fresh here; none copies an ATOM function body.

A fix has two hooks: ``before_build`` (in both server processes, before ATOM builds
its scheduler or worker connector: module functions it reads while building) and
``scheduler`` (the built scheduler side: wrappers on its objects). Runs only
inside server processes, except ``FIXES``' names and descriptions, which the campaign
process reads (no ATOM import at module level).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

Hook = Callable[[Any], None]


def _nothing(_: Any) -> None:
    pass


@dataclass(frozen=True)
class AtomFix:
    """One candidate fix, named for the finding's row: the ATOM function it changes,
    what it does, and its hooks: ``before_build(role)`` (``"scheduler"`` or
    ``"worker"``, before ATOM builds that side) and ``scheduler(side)`` (the built
    ``SchedulerProcess``)."""

    name: str
    target: str
    description: str
    before_build: Callable[[str], None] = _nothing
    scheduler: Hook = _nothing


# -- two_servers: the lmcache engine id names the server, not only its DP rank ---------
# The fixed ATOM draws a token once per server where its main process builds the
# ``Config`` (``Config.instance_id``); that one Config is pickled to every EngineCore and
# ModelRunner of the server, so its scheduler's lookup client and its workers' lookup
# servers read one token, and another server's differs. Not the engine ``--port``:
# nothing binds it, and two servers from ATOM's recipes both leave it at 8006.
def _engine_id_with_instance(role: str) -> None:
    from atom.kv_transfer.offload import config as offcfg

    inner = offcfg.lmcache_engine_id
    if getattr(inner, "kvfault_fix", False):
        return

    def engine_id(config: Any) -> str:
        token = getattr(config, "instance_id", "")
        if not token:
            raise RuntimeError("the two_servers fix needs Config.instance_id; this one has none")
        # ATOM's id keeps its DP rank last: "atom-offload-<token>-dp<rank>".
        head, _, rank = inner(config).rpartition("-")
        return f"{head}-{token}-{rank}"

    engine_id.kvfault_fix = True  # type: ignore[attr-defined]
    offcfg.lmcache_engine_id = engine_id


# -- chunk_aligned: a whole-prompt hit claims up to the last whole chunk -----------------
def _claim_on_the_grid(side: Any) -> None:
    impl = side.impl
    client = getattr(impl, "_lookup_client", None)
    if client is None:
        return
    lookup, chunk = client.lookup, int(impl.chunk_size)

    def lookup_on_grid(token_ids: Any, *args: Any, **kwargs: Any) -> Any:
        hit = lookup(token_ids, *args, **kwargs)
        n = len(token_ids)
        if hit and int(hit) >= n:
            # One token must be recomputed; the claim stays on lmcache's chunk grid
            # (a partial last chunk is a key nobody stored).
            return (n - 1) // chunk * chunk
        return hit

    client.lookup = lookup_on_grid


# -- reload_twice: a lookup cleared before the step's metadata is still unpinned ---------
def _unpin_cleared_lookups(side: Any) -> None:
    impl = side.impl
    clear = getattr(impl, "_clear_pending_load", None)
    if clear is None or not hasattr(impl, "_lookup_in_step"):
        return

    def clear_keeping_lookup(sid: str) -> None:
        looked_up = sid in impl._lookup_in_step
        clear(sid)
        if looked_up and sid not in impl._lookup_in_step:
            # The worker unpins every lookup in the step's list that loads nothing.
            impl._lookup_in_step.append(sid)

    impl._clear_pending_load = clear_keeping_lookup


# -- two_images_partial: a multimodal prompt's tier hit ends before its picture ---------
def _hit_before_picture(side: Any) -> None:
    impl = side.impl
    match = getattr(impl, "get_num_new_matched_tokens", None)
    client = getattr(impl, "_lookup_client", None)
    if match is None or client is None:
        return
    from kvfault.faults.atom.pictures import PICTURE_TOKEN

    lookup = client.lookup
    cut: list[int | None] = [None]  # where the request being matched has its picture

    def matched(seq: Any) -> Any:
        ids = list(seq.token_ids[: seq.num_prompt_tokens])
        pictured = getattr(seq, "multimodal_data", None) is not None and PICTURE_TOKEN in ids
        cut[0] = ids.index(PICTURE_TOKEN) if pictured else None
        try:
            return match(seq)
        finally:
            cut[0] = None

    def lookup_before_picture(token_ids: Any, *args: Any, **kwargs: Any) -> Any:
        # ATOM's runner merges a picture only over a forward that computes all its
        # placeholders, and the keys are token ids: a hit may not reach the first one.
        # (The model's placeholder id; here the tier's.)
        if cut[0] is not None:
            token_ids = list(token_ids)[: cut[0]]
        return lookup(token_ids, *args, **kwargs)

    impl.get_num_new_matched_tokens = matched
    client.lookup = lookup_before_picture


# -- picture_handoff: no unaligned handoff for a request carrying a picture -------------
def _no_handoff_for_pictures(side: Any) -> None:
    impl = side.impl
    handoff = getattr(impl, "_maybe_start_unaligned_handoff", None)
    if handoff is None:
        return

    def maybe_handoff(seq: Any, *args: Any, **kwargs: Any) -> bool:
        # The handoff computes up to the chunk boundary, then loads the rest: it splits
        # the prefill, and ATOM's runner merges a picture only over one forward that
        # computes all its placeholders. Declined, the request computes its prompt
        # after the HBM hit in one piece (the tier's part is recomputed).
        if getattr(seq, "multimodal_data", None):
            return False
        return bool(handoff(seq, *args, **kwargs))

    impl._maybe_start_unaligned_handoff = maybe_handoff


# -- picture_resend: a multimodal prompt's HBM hit ends before its picture --------------
def _hbm_hit_before_picture(side: Any) -> None:
    bm = side.scheduler.block_manager
    inner = bm.can_allocate
    from kvfault.faults.atom.pictures import PICTURE_TOKEN

    def can_allocate(seq: Any) -> Any:
        hit = inner(seq)
        ids = seq.token_ids[: seq.num_prompt_tokens]
        if hit > 0 and getattr(seq, "multimodal_data", None) is not None and PICTURE_TOKEN in ids:
            # Block hashes are token ids: a hit may not reach the picture's first
            # placeholder (its block and every later one hold that picture's KV).
            return min(hit, ids.index(PICTURE_TOKEN) // bm.block_size)
        return hit

    bm.can_allocate = can_allocate


# -- shared_tier_tp_pp: the namespace document names the pipeline split ------------------
class _NamespaceDocument:
    """Stands in for ``json`` in ATOM's offload config module while one namespace is
    built: the page-namespace document it serialises, and so hashes, gets ``extra``."""

    def __init__(self, real: Any, extra: dict[str, Any]) -> None:
        self._real, self._extra = real, extra

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def dumps(self, obj: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(obj, dict) and obj.get("schema") == "atom-page-namespace":
            obj = {**obj, **self._extra}
        return str(self._real.dumps(obj, *args, **kwargs))


def _namespace_with_pp_split(role: str) -> None:
    from atom.kv_transfer.offload import config as offcfg
    from atom.models.utils import get_pp_indices

    inner = offcfg.build_page_namespace
    if getattr(inner, "kvfault_fix", False):
        return

    def namespace(config: Any, cfg: Any, world_size: int, **kwargs: Any) -> str:
        pp = int(getattr(config, "pipeline_parallel_size", 1) or 1)
        if pp == 1:
            # World size is TP here: the document, and every stored key, stay as they are.
            return inner(config, cfg, world_size, **kwargs)
        # Worker i of a TP 2 replica (every layer, its share of the KV heads) and of a
        # PP 2 one (its stage's layers, every head) hold other bytes under one world
        # size. The document names the split: real TP, the pipeline size and each
        # stage's [start, end) layers as ATOM's models cut them (so a
        # VLLM_PP_LAYER_PARTITION that moves a layer is another namespace). The whole
        # partition, not this rank's range: every stage and the scheduler, whose
        # lookups stage 0 answers, keep one namespace per replica, as now.
        layers = int(config.hf_config.num_hidden_layers)
        split = {
            "tp_size": int(world_size) // pp,
            "pp_size": pp,
            "pp_layer_partition": [list(get_pp_indices(layers, r, pp)) for r in range(pp)],
        }
        real = offcfg.json
        offcfg.json = _NamespaceDocument(real, split)
        try:
            return inner(config, cfg, world_size, **kwargs)
        finally:
            offcfg.json = real

    namespace.kvfault_fix = True  # type: ignore[attr-defined]
    offcfg.build_page_namespace = namespace


FIXES: dict[str, AtomFix] = {
    f.name: f
    for f in (
        AtomFix(
            "two_servers",
            "atom/kv_transfer/offload/config.py: lmcache_engine_id",
            "the lmcache engine id (and so the lookup socket path) carries a token drawn "
            "once per server where its main process builds the Config "
            "(Config.instance_id), which its scheduler and workers share: "
            "atom-offload-<token>-dp<rank>",
            before_build=_engine_id_with_instance,
        ),
        AtomFix(
            "chunk_aligned",
            "atom/kv_transfer/offload/dense/connector.py: get_num_new_matched_tokens, "
            "at its input: the wrapper is on lmcache's lookup client as that function "
            "reads it",
            "a whole-prompt hit claims up to the last whole chunk before the prompt's "
            "last token, not one token less than the prompt",
            scheduler=_claim_on_the_grid,
        ),
        AtomFix(
            "two_images_partial",
            "atom/kv_transfer/offload/dense/connector.py: get_num_new_matched_tokens",
            "a multimodal request's lmcache lookup sends its token ids up to its first "
            "placeholder: the hit ends before the picture",
            scheduler=_hit_before_picture,
        ),
        AtomFix(
            "picture_handoff",
            "atom/kv_transfer/offload/_offload_common.py: _maybe_start_unaligned_handoff",
            "a request carrying multimodal_data takes no unaligned handoff: its prefill "
            "after the HBM hit is not split (the tier's part is recomputed)",
            scheduler=_no_handoff_for_pictures,
        ),
        AtomFix(
            "picture_resend",
            "atom/model_engine/block_manager.py: BlockManager.can_allocate",
            "a multimodal request's HBM prefix hit ends at the block of its first "
            "placeholder (with two_images_partial's fix for the lmcache lookup)",
            scheduler=_hbm_hit_before_picture,
        ),
        AtomFix(
            "reload_twice",
            "atom/kv_transfer/offload/dense/connector.py: _clear_pending_load",
            "a pending load cleared before the step's metadata is built keeps its lookup "
            "id in the step's list, so the worker unpins it",
            scheduler=_unpin_cleared_lookups,
        ),
        AtomFix(
            "shared_tier_tp_pp",
            "atom/kv_transfer/offload/config.py: build_page_namespace",
            "at pipeline size over 1 the hashed page-namespace document carries the "
            "split: tp_size is real TP, with pp_size and each stage's [start, end) "
            "layers (ATOM's get_pp_indices), so a PP replica's worker ids do not share "
            "keys with a TP replica's of one world size, nor with another layer "
            "partition's; at PP 1 the document is unchanged",
            before_build=_namespace_with_pp_split,
        ),
    )
}


def fixes(names: tuple[str, ...]) -> list[AtomFix]:
    """The fixes named; ``KeyError`` with one line for an unknown name."""
    unknown = [n for n in names if n not in FIXES]
    if unknown:
        raise KeyError(f"--atom-fix {unknown[0]!r} is no fix; known: {', '.join(FIXES)}")
    return [FIXES[n] for n in names]
