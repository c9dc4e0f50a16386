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
            "atom/kv_transfer/offload/dense/connector.py: get_num_new_matched_tokens, "
            "at its input: the wrapper is on lmcache's lookup client as that function "
            "reads it",
            "a whole-prompt hit claims up to the last whole chunk before the prompt's "
            "last token, not one token less than the prompt",
            scheduler=_claim_on_the_grid,
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
