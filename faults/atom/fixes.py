"""Candidate fixes for the atom tier's findings (``kvfault run --tier atom --atom-fix
NAME``): each changes ATOM's behaviour at one named ATOM function by wrapping it,
in the server processes, so a finding's row can be run with and without its fix on the
same ATOM commit. Each is written fresh here; none copies an ATOM function body.

A fix has two hooks: ``before_build`` (in both server processes, before ATOM builds
its scheduler or worker connector: module functions it reads while building) and
``scheduler`` (the built scheduler side: wrappers on its objects). Runs only
inside server processes, except ``FIXES``' names and descriptions, which the campaign
process reads (no ATOM import at module level).
"""

from __future__ import annotations

import hashlib
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
def _engine_id_with_port(role: str) -> None:
    from atom.kv_transfer.offload import config as offcfg

    inner = offcfg.lmcache_engine_id
    if getattr(inner, "kvfault_fix", False):
        return

    def engine_id(config: Any) -> str:
        # The server's port is what tells two servers on one host apart; DP ranks of
        # one server share it and keep their rank in the id.
        return f"{inner(config)}-port{int(getattr(config, 'port', 0) or 0)}"

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


# -- two_images: prefix hashes include the request's multimodal inputs ------------------
def _media_digest(data: Any) -> int:
    """A stable 63-bit digest of a request's multimodal inputs."""
    return (
        int.from_bytes(hashlib.blake2b(repr(data).encode(), digest_size=8).digest(), "little") >> 1
    )


def _media_in_prefix_hashes(side: Any) -> None:
    impl, bm = side.impl, side.scheduler.block_manager
    digests: dict[str, int] = {}  # seq id -> media digest (ATOM clears the data once sent)

    def note(seq: Any) -> int | None:
        sid = str(seq.id)
        data = getattr(seq, "multimodal_data", None)
        if data and sid not in digests:
            digests[sid] = _media_digest(data)
        return digests.get(sid)

    # HBM: the first block's hash is seeded with the digest, so the chain differs.
    salt: list[int | None] = [None]
    compute = bm.compute_hash

    def compute_hash(token_ids: Any, prefix: int = -1) -> int:
        if prefix == -1 and salt[0] is not None:
            prefix = salt[0]
        return compute(token_ids, prefix)

    bm.compute_hash = compute_hash
    for method in ("can_allocate", "allocate", "hash_blocks", "publish_loaded_prefix",
                   "register_received_prefix"):  # fmt: skip
        inner = getattr(bm, method, None)
        if inner is None:
            continue

        def salted(seq: Any, *args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            salt[0] = note(seq)
            try:
                return _inner(seq, *args, **kwargs)
            finally:
                salt[0] = None

        setattr(bm, method, salted)

    # Offload: lmcache keys a chunk by the token ids ATOM sends; a request with media
    # sends them with the digest folded into the first token, in lookups, loads and
    # saves alike.
    def keyed(tokens: list[int], digest: int | None) -> list[int]:
        if digest is None or not tokens:
            return tokens
        return [tokens[0] ^ digest, *tokens[1:]]

    match = impl.get_num_new_matched_tokens
    client = getattr(impl, "_lookup_client", None)

    def matched(seq: Any) -> Any:
        note(seq)
        return match(seq)

    impl.get_num_new_matched_tokens = matched
    if client is not None:
        lookup = client.lookup

        def lookup_with_media(token_ids: Any, *args: Any, **kwargs: Any) -> Any:
            sid = str(kwargs.get("lookup_id", args[0] if args else ""))
            return lookup(keyed(list(token_ids), digests.get(sid)), *args, **kwargs)

        client.lookup = lookup_with_media
    build = impl.build_connector_meta

    def build_with_media(*args: Any, **kwargs: Any) -> Any:
        meta = build(*args, **kwargs)
        for req in getattr(meta, "requests", ()) or ():
            req.token_ids = keyed(list(req.token_ids), digests.get(str(req.req_id)))
        return meta

    impl.build_connector_meta = build_with_media


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


FIXES: dict[str, AtomFix] = {
    f.name: f
    for f in (
        AtomFix(
            "two_servers",
            "atom/kv_transfer/offload/config.py: lmcache_engine_id",
            "the lmcache engine id (and so the lookup socket path) carries the server's port",
            before_build=_engine_id_with_port,
        ),
        AtomFix(
            "chunk_aligned",
            "atom/kv_transfer/offload/dense/connector.py: get_num_new_matched_tokens "
            "(the lookup answer it reads)",
            "a whole-prompt hit claims up to the last whole chunk before the prompt's "
            "last token, not one token less than the prompt",
            scheduler=_claim_on_the_grid,
        ),
        AtomFix(
            "two_images",
            "atom/model_engine/block_manager.py: compute_hash (HBM) and "
            "dense/connector.py: the token ids sent to lmcache (offload)",
            "prefix hashes, in HBM and in lmcache, include a digest of the request's "
            "multimodal inputs",
            scheduler=_media_in_prefix_hashes,
        ),
        AtomFix(
            "reload_twice",
            "atom/kv_transfer/offload/dense/connector.py: _clear_pending_load",
            "a pending load cleared before the step's metadata is built keeps its lookup "
            "id in the step's list, so the worker unpins it",
            scheduler=_unpin_cleared_lookups,
        ),
    )
}


def fixes(names: tuple[str, ...]) -> list[AtomFix]:
    """The fixes named; ``KeyError`` with one line for an unknown name."""
    unknown = [n for n in names if n not in FIXES]
    if unknown:
        raise KeyError(f"--atom-fix {unknown[0]!r} is no fix; known: {', '.join(FIXES)}")
    return [FIXES[n] for n in names]
