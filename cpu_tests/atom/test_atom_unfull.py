"""``LMCACHE_SAVE_UNFULL_CHUNK=True`` (lmcache keys a range's partial last chunk too):
ATOM's saves stop at the chunk grid, so a prompt with a partial last chunk still hits
and loads its whole chunks (``unfull_prefix_reuse``, ``unfull_hbm_partial``), and the
whole-prompt hit of a chunk-aligned prompt fails its load as with the setting off
(``unfull_chunk_aligned``: 192 of 255 tokens retrieved; ``--atom-fix chunk_aligned``
passes it).

The rows see the setting: an ATOM planted (in a scratch clone) to save the partial
last chunk at the end of a prefill, as vLLM's lmcache adapter does with the setting on,
makes lmcache store it; the resent prompt's whole hit is then claimed one token short,
the retrieve keys a 7-token chunk never stored and the load fails. The unfull rows
FAIL; ``prefix_reuse`` (the setting off: lmcache drops the partial chunk) passes."""

from __future__ import annotations

from pathlib import Path

from atom_planted import planted

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.campaign.execute import run_case
from kvfault.reference.trace import Ev

SAVES_PARTIAL = (
    "            aligned = (computed // chunk) * chunk\n",
    "            aligned = computed if is_last_prefill else (computed // chunk) * chunk\n",
)


def _runs(src: str, names: list[str], fixes: tuple[str, ...] = ()) -> dict[str, object]:
    out = {}
    with atom_executor(src, atom_fix=fixes) as executor:
        for name in names:
            row = catalog.ROWS[name]
            faults = [row.factory(0)] if row.kind == "fault" else []
            out[name] = run_case(row.scenario, 0, injectors=lambda f=faults: f, executor=executor)
    return out


def _said(res) -> list[str]:
    return [f"{v.prop}: {v.message}" for v in res.violations]


def test_partial_chunk_prompts_load_their_whole_chunks(atom_src):
    runs = _runs(atom_src, ["unfull_prefix_reuse", "unfull_hbm_partial"])
    for name, res in runs.items():
        assert _said(res) == [], name
    lookups = {e.req_id: e.data for e in runs["unfull_prefix_reuse"].run.trace.of(Ev.LOOKUP)}
    assert lookups["again"]["claim"] == 192 and lookups["longer"]["claim"] == 192, lookups


def test_a_whole_aligned_hit_fails_its_load_as_with_the_setting_off(atom_src):
    bare = _runs(atom_src, ["unfull_chunk_aligned"])["unfull_chunk_aligned"]
    ends = [e.data for e in bare.run.trace.of(Ev.RETRIEVE_TERMINAL)]
    assert [(d["ok"], d.get("retrieved"), d.get("asked")) for d in ends] == [(False, 192, 255)]
    assert any(v.startswith("efficiency:") for v in _said(bare)), _said(bare)
    fixed = _runs(atom_src, ["unfull_chunk_aligned"], ("chunk_aligned",))
    assert _said(fixed["unfull_chunk_aligned"]) == []


def test_an_atom_saving_the_partial_chunk_fails_only_the_unfull_rows(atom_src, tmp_path):
    src = planted(atom_src, Path(tmp_path) / "atom", SAVES_PARTIAL)
    runs = _runs(src, ["prefix_reuse", "unfull_prefix_reuse"])
    assert _said(runs["prefix_reuse"]) == []
    ends = [e.data for e in runs["unfull_prefix_reuse"].run.trace.of(Ev.RETRIEVE_TERMINAL)]
    assert (False, 192, 199) in [(d["ok"], d.get("retrieved"), d.get("asked")) for d in ends]
    assert any(v.startswith("efficiency:") for v in _said(runs["unfull_prefix_reuse"]))
