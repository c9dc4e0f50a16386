"""lmcache's files under ATOM: its remote tier (the file-system connector two servers
share) and its local disk, removed or cut short right before the retrieve of a prompt
they hold. lmcache returns nothing for the chunks, ATOM fails the load and recomputes,
and every answer is right (``remote_tier_removed``, ``remote_tier_truncated``,
``disk_removed``); without the fault B loads A's chunks from the remote tier
(``shared_tier_reuse``).

``disk_truncated`` FAILs with lmcache 0.5.6: its local disk reads a file cut to half
as a whole chunk (``LocalDiskBackend.read_file`` keeps no count of what ``readinto``
read), the retrieve returns every token and ATOM restores wrong pages. An lmcache
hardening lead (its own ``fs://`` connector checks the count), not an ATOM finding.

The rows see ATOM's handling: an ATOM planted (in a scratch clone) to call every load
done whatever lmcache returned FAILs the three passing fault rows on correctness."""

from __future__ import annotations

from pathlib import Path

import pytest
from atom_planted import planted

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.campaign.execute import run_case
from kvfault.reference.trace import Ev

ALWAYS_LOADED = (
    "        loaded = bool(ret_mask[hbm:lmc].all().item())\n",
    "        loaded = True\n",
)
BROKEN = ("remote_tier_removed", "remote_tier_truncated", "disk_removed")
READS = {"shared_tier_reuse": "B-same", "remote_tier_removed": "B-same",
         "remote_tier_truncated": "B-same", "disk_removed": "again", "disk_truncated": "again"}  # fmt: skip


def _runs(src: str, names: tuple[str, ...]) -> dict[str, object]:
    out = {}
    with atom_executor(src) as executor:
        for name in names:
            row = catalog.ROWS[name]
            faults = [row.factory(0)] if row.kind == "fault" else []
            res = run_case(row.scenario, 0, injectors=lambda f=faults: f, executor=executor)
            out[name] = (res, faults[0].fired if faults else None)
    return out


def _said(res) -> list[str]:
    return [f"{v.prop}: {v.message}" for v in res.violations]


def _end(res, req: str) -> tuple[bool, int, int]:
    d = next(e.data for e in res.run.trace.of(Ev.RETRIEVE_TERMINAL) if e.op.req_id == req)
    return d["ok"], d.get("retrieved"), d.get("asked")


@pytest.fixture(scope="module")
def runs(atom_src: str) -> dict[str, object]:
    return _runs(atom_src, tuple(READS))


def test_b_loads_what_a_stored_in_the_remote_tier(runs):
    res, _ = runs["shared_tier_reuse"]
    assert _said(res) == []
    assert _end(res, "B-same") == (True, 192, 192)


@pytest.mark.parametrize("name", BROKEN)
def test_a_removed_or_short_tier_file_fails_the_load_and_ATOM_recomputes(runs, name):
    res, fired = runs[name]
    assert fired == 1 and _said(res) == []
    assert _end(res, READS[name]) == (False, 0, 192)


def test_lmcache_local_disk_reads_a_short_file_as_a_whole_chunk(runs):
    res, fired = runs["disk_truncated"]
    assert fired == 1
    assert _end(res, "again") == (True, 192, 192)
    assert any(v.startswith("correctness:") for v in _said(res)), _said(res)


def test_an_atom_that_ignores_what_lmcache_returned_fails_them(atom_src, tmp_path):
    src = planted(atom_src, Path(tmp_path) / "atom", ALWAYS_LOADED)
    for name, (res, _) in _runs(src, BROKEN).items():
        assert any(v.startswith("correctness:") for v in _said(res)), (name, _said(res))
