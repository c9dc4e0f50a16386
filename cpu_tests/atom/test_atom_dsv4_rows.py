"""The hybrid (DeepSeek-V4) connector's rows, run through the tier's executor: ATOM's
DSV4 connector stores and loads PAGE units and the SLOT checkpoint, and the row passes
at the checkout; a bug planted by hand in a scratch clone (a SLOT not restored, PAGE
units not restored) fails it on ``correctness``; a load that failed reported done
fails ``dsv4_retrieve_failure``; a SLOT sidecar read without checking its CRC fails
``dsv4_corrupt_slot``; a PAGE hit taken without its SLOT fails
``dsv4_slot_put_refused``; a lookup put on the step's unpin list only once it hit (the
dense copy's order) fails ``dsv4_lost_hit_reply``. With ATOM's HBM prefix cache on,
``dsv4_hbm_partial`` resumes a request from a paged state checkpoint in HBM and
computes the rest; the checkpoint's restore dropped, or the connector's guard against
a tier load above a stateful HBM floor removed, fails it on ``correctness``; a block
manager that resumes from HBM pages without their state checkpoint fails
``dsv4_hbm_pressure`` on ``correctness``; in ``dsv4_checkpoint_dropped`` ATOM drops a
checkpoint store for want of PAGE units (recorded) and the resent prompt loads from
lmcache, and a dropped store whose boundary is still indexed (to the image another
store kept) fails it on ``correctness``. A region
map that describes the NoPE plane alone (the bf16 layout's one plane) fails
``dsv4_fp8_prefix_reuse`` and ``dsv4_fp8_disk_spill`` (two planes) and not
``dsv4_prefix_reuse``. Neither ATOM's page namespace, lmcache's key nor the SLOT
fingerprint telling bf16 from fp8 fails ``dsv4_shared_tier_kv_dtype`` on ``keys``; a
shared-tier server whose lmcache runs without its remote tier does not start. A load reported
done whatever it restored fails ``dsv4_evict_after_lookup``, ``dsv4_disk_removed``,
``dsv4_remote_tier_removed`` and ``dsv4_remote_tier_truncated``; a SLOT sidecar read
without checking its CRC fails ``dsv4_disk_truncated`` (lmcache's local disk reads the
cut PAGE chunks and sidecar as whole; the sidecar's CRC is what fails the load), and
with the PAGE chunks alone cut (``dsv4_disk_page_truncated``) the load is done with wrong
pages unless lmcache checks what it read (an lmcache lead); a load reported
done when it is submitted fails ``dsv4_slow_retrieve``; a request's blocks freed while its
save waits fail ``dsv4_slow_save``; a sidecar looked for in the CPU
pool only fails ``dsv4_disk_spill`` and ``dsv4_fp8_disk_spill``; a PAGE hit taken without its SLOT fails
``dsv4_shared_tier_reuse`` and ``dsv4_restart``; a lookup timeout past the run's limit fails
``dsv4_lookup_socket_removed``. An lmcache broken by hand (a ``sitecustomize``)
whose lookup client keeps its sockets after a timeout fails ``dsv4_lost_lookup_reply``,
and one that keys tokens with Python's seeded ``str`` hash fails
``dsv4_hash_order_shuffle``. The eviction removes what the lookup found, on both
connectors. At TP 2 (``dsv4_tp2_prefix_reuse``) both ranks store and load their own
PAGE units and SLOT; a rank 1 that stores no PAGE units never lets ATOM commit a
sidecar boundary (every rank must report it), so every resend recomputes what rank 0's
engine holds: ``efficiency``. Rank 1's SLOT sidecar put refused
(``dsv4_tp2_rank1_slot_put_refused``): ATOM commits no boundary and the resend
recomputes; an aggregator that commits a sidecar boundary on rank 0's report alone
lets the resend load what rank 1 never stored, and the load fails on rank 1:
``load_failures``."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from atom_planted import planted

from cpu_tests.atom.test_atom_tier_files import _runs
from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.atom.scenarios import LOST_SOCKET_TIMEOUT_MS
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.campaign.execute import run_case
from kvfault.faults.campaign.kinds import scenario_target
from kvfault.faults.verdicts import Verdict
from kvfault.reference.trace import Ev

CONNECTOR = "atom/kv_transfer/offload/hybrid/dsv4/connector.py"
CODEC = "atom/kv_transfer/offload/hybrid/dsv4/codec.py"
SLOT_NOT_RESTORED = (
    "                slot_codec.scatter_slot(row, destination_group, stream=stream)\n",
    "                pass  # planted: the SLOT is not restored\n",
)
FAILED_LOAD_DONE = (
    "                    load_error_type,\n                )\n            loaded = False\n"
    "        finally:\n",
    "                    load_error_type,\n                )\n            loaded = True  # planted\n"
    "        finally:\n",
)
CRC_NOT_CHECKED = (
    "    if actual_crc32 != payload_crc32:\n",
    "    if False and actual_crc32 != payload_crc32:  # planted\n",
)
PAGE_HIT_WITHOUT_SLOT = (
    "        self._hit_save_floors[sid] = self._chunk_floor(hit)\n"
    '        if bool(getattr(seq, "has_per_req_cache", False)):\n',
    "        self._hit_save_floors[sid] = self._chunk_floor(hit)\n"
    "        if False:  # planted: a PAGE hit needs no SLOT\n",
)
UNPIN_ONLY_HITS = (
    (
        "        if sid not in self._lookup_in_step:\n"
        "            self._lookup_in_step.append(sid)\n"
        "        try:\n"
        "            hit = self._lookup_client.lookup(token_ids, lookup_id=sid)\n",
        "        try:\n            hit = self._lookup_client.lookup(token_ids, lookup_id=sid)\n",
    ),
    (
        "        hit = int(hit)\n        if hit == num_prompt:",
        "        hit = int(hit)\n        self._lookup_in_step.append(sid)  # planted\n"
        "        if hit == num_prompt:",
    ),
)
LOAD_ALWAYS_DONE = (
    "            self._complete_load(req, succeeded=loaded)\n",
    "            self._complete_load(req, succeeded=True)  # planted\n",
)
LOAD_DONE_AT_SUBMIT = (
    "                    self._do_load_req,\n                    req,\n"
    "                    reservation,\n                )\n",
    "                    self._do_load_req,\n                    req,\n"
    "                    reservation,\n                )\n"
    "                self._complete_load(req, succeeded=True)  # planted\n",
)
SAVE_DOES_NOT_HOLD_BLOCKS = (
    "        if not self._do_save:\n            return False\n        sid = str(seq.id)\n",
    "        if True:  # planted: a save in flight does not hold the blocks\n"
    "            return False\n        sid = str(seq.id)\n",
)
SIDECAR_CPU_ONLY = (
    "                cache_key, search_range=self._retrieve_locations, pin=False\n",
    '                cache_key, search_range=["LocalCPUBackend"], pin=False  # planted\n',
)
CHECKPOINT = "atom/model_engine/page_unit_checkpoint.py"
CHECKPOINT_RESTORES_DROPPED = (
    "        return tuple(stores), self.store.take_restore_ops()\n",
    "        self.store.take_restore_ops()  # planted: the restores are dropped\n"
    "        return tuple(stores), ()\n",
)
BLOCK_MANAGER = "atom/model_engine/block_manager.py"
# The gate and the attach of a paged checkpoint planted as for a model without state:
# an HBM hit needs no checkpoint, and a request resumes from the pages alone.
HIT_WITHOUT_CHECKPOINT = (
    "            if assume_checkpointed or self.store.contains(block_hashes[i]):\n",
    "            if True:  # planted: an HBM hit needs no state checkpoint\n",
)
ATTACH_WITHOUT_CHECKPOINT = (
    "                self.state.release(dst)\n                raise RuntimeError(\n"
    '                    "gated PAGE checkpoint disappeared before state attach"\n'
    "                )\n",
    "                pass  # planted: resume from the pages alone\n",
)
FLOOR_GUARD_REMOVED = (
    '        if bool(getattr(seq, "has_per_req_cache", False)) and hbm > 0:\n'
    '            return False, "stateful_nonzero_hbm_floor", hbm, lmc, need, chunk\n',
    "",
)
# A checkpoint store dropped for want of units whose boundary is indexed anyway, to the
# image the last store kept: a dropped store still recorded as a checkpoint.
DROPPED_STORE_INDEXED = (
    "            if op is None:\n                self.checkpoints_dropped += 1\n"
    "                continue\n",
    "            if op is None:\n                self.checkpoints_dropped += 1\n"
    "                if self.store._inflight_stores:  # planted\n"
    "                    self.store.hash_to_checkpoint[h] = self.store._inflight_stores[-1]\n"
    "                continue\n",
)
ATTENTION = "atom/model_ops/attentions/deepseek_v4_attn.py"
NOPE_PLANE_ONLY = (
    "                strict=True,\n            )\n        )\n"
    "        for plane, row_bytes, role in planes:\n            block_regions.append(",
    "                strict=True,\n            )\n        )\n"
    "        planes = planes[:1]  # planted: the region map knows the NoPE plane only\n"
    "        for plane, row_bytes, role in planes:\n            block_regions.append(",
)
RANK1_STORES_NO_PAGE = (
    "                self._engine.store(\n",
    "                (self._engine.store if self._rank == 0 else (lambda *a, **k: None))(\n",
)
PAGE_NOT_RESTORED = (
    "        self.scatter(device_buf, self.page_plan(flattened), stream=stream)\n",
    "        return  # planted: PAGE units are not restored\n",
)


def _violations(src: str, name: str) -> list[str]:
    row = catalog.ROWS[name]
    faults = [row.factory(0)] if row.kind == "fault" else []
    with atom_executor(src) as executor:
        res = run_case(row.scenario, 0, injectors=lambda: faults, executor=executor)
    if row.kind == "fault":
        assert any(res.fired.get(n) for n in (row.name, *row.fires)), res.fired  # it ran
    return [f"{v.prop}: {v.message}" for v in res.violations]


def _planted_violations(atom_src: str, dest: Path, row: str, *edits, file: str) -> list[str]:
    """``row``'s violations on a clone of ``atom_src`` at ``dest`` with ``edits`` made
    to ``file``."""
    return _violations(planted(atom_src, dest, *edits, file=file), row)


def _passing_events(atom_src: str, scenario: str) -> list:
    """The trace events of ``scenario``'s run at the checkout, which must pass."""
    with atom_executor(atom_src) as executor:
        out = CaseRunner(keep_runs="all", executor=executor).run(
            Case(scenario_target(scenario, "atom"), 0)
        )
    assert out.verdict == Verdict.PASS, out.signature
    return out.fixed_result.run.trace.events


def test_dsv4_prefix_reuse_loads_page_and_slot_and_passes(atom_src):
    events = _passing_events(atom_src, "dsv4_prefix_reuse")
    kinds = [e.kind.value for e in events]
    assert kinds.count("dispatch") == 2 and kinds.count("copy_complete") == 2
    cached = {e.req_id: e.data["cached"] for e in events if e.kind.value == "output"}
    assert cached == {"first": 0, "between": 0, "again": 512, "longer": 512}


def test_dsv4_hbm_partial_resumes_from_an_hbm_checkpoint_and_passes(atom_src):
    events = _passing_events(atom_src, "dsv4_hbm_partial")
    again = [e.data for e in events if e.kind.value == "lookup" and e.req_id == "again"]
    # HBM resumes at 256 (a checkpoint there), lmcache holds 512: ATOM loads nothing.
    assert [(d["hbm_hit"], d["kv_hit"], d["claim"]) for d in again] == [(256, 512, 0)]
    assert not any(e.kind.value == "dispatch" for e in events)
    cached = {e.req_id: e.data["cached"] for e in events if e.kind.value == "output"}
    assert cached == {"first": 0, "short": 0, "other": 0, "again": 256}


def test_a_slot_not_restored_fails_dsv4_prefix_reuse(atom_src, tmp_path):
    found = _planted_violations(
        atom_src, tmp_path / "atom", "dsv4_prefix_reuse", SLOT_NOT_RESTORED, file=CONNECTOR
    )
    assert "correctness: output of again differs from its cold run" in found, found
    # The PAGE units were restored: only the answers, read from the state, are wrong.
    assert not any("restored pages differ" in v for v in found), found


@pytest.mark.parametrize(
    ("edit", "file", "row", "violation"),
    [
        pytest.param(
            PAGE_NOT_RESTORED, CODEC, "dsv4_prefix_reuse",
            "correctness: restored pages differ from recompute",
            id="page_units_not_restored_fail_dsv4_prefix_reuse",
        ),
        pytest.param(
            FAILED_LOAD_DONE, CONNECTOR, "dsv4_retrieve_failure",
            "correctness: restored pages differ from recompute",
            id="a_failed_load_reported_done_fails_dsv4_retrieve_failure",
        ),
        pytest.param(
            CHECKPOINT_RESTORES_DROPPED, CHECKPOINT, "dsv4_hbm_partial",
            "correctness: output of again differs from its cold run",
            id="a_checkpoint_restore_dropped_fails_dsv4_hbm_partial",
        ),
        pytest.param(
            # The tier load of [256, 512) and its SLOT at 512 land first; the HBM
            # checkpoint's restore (the state at 256) runs at the next forward over it.
            FLOOR_GUARD_REMOVED, CONNECTOR, "dsv4_hbm_partial",
            "correctness: output of again differs from its cold run",
            id="a_tier_load_above_a_stateful_hbm_floor_fails_dsv4_hbm_partial",
        ),
        pytest.param(
            CRC_NOT_CHECKED, CODEC, "dsv4_corrupt_slot",
            "correctness: output of again differs from its cold run",
            id="a_sidecar_crc_not_checked_fails_dsv4_corrupt_slot",
        ),
        pytest.param(
            LOAD_ALWAYS_DONE, CONNECTOR, "dsv4_evict_after_lookup",
            "correctness: restored pages differ from recompute",
            id="a_load_of_evicted_chunks_reported_done_fails_dsv4_evict_after_lookup",
        ),
        pytest.param(
            LOAD_ALWAYS_DONE, CONNECTOR, "dsv4_disk_removed",
            "correctness: restored pages differ from recompute",
            id="a_load_from_a_removed_disk_reported_done_fails_dsv4_disk_removed",
        ),
        pytest.param(
            LOAD_ALWAYS_DONE, CONNECTOR, "dsv4_remote_tier_removed",
            "correctness: restored pages differ from recompute",
            id="a_load_from_a_removed_remote_tier_reported_done_fails_dsv4_remote_tier_removed",
        ),
        pytest.param(
            # lmcache's local disk returns the cut PAGE chunks and sidecar as whole
            # (512 of 512); the sidecar's CRC is what fails the load.
            CRC_NOT_CHECKED, CODEC, "dsv4_disk_truncated",
            "correctness: output of again differs from its cold run",
            id="a_sidecar_crc_not_checked_fails_dsv4_disk_truncated",
        ),
        pytest.param(
            LOAD_ALWAYS_DONE, CONNECTOR, "dsv4_remote_tier_truncated",
            "correctness: restored pages differ from recompute",
            id="a_load_of_cut_remote_files_reported_done_fails_dsv4_remote_tier_truncated",
        ),
        pytest.param(
            LOAD_DONE_AT_SUBMIT, CONNECTOR, "dsv4_slow_retrieve",
            "correctness: restored pages differ from recompute",
            id="a_load_reported_done_when_submitted_fails_dsv4_slow_retrieve",
        ),
        pytest.param(
            # The fp8 PAGE units and sidecar come back from lmcache's local disk: a
            # region map without the RoPE plane stores and restores the NoPE plane only.
            NOPE_PLANE_ONLY, ATTENTION, "dsv4_fp8_disk_spill",
            "correctness: restored pages differ from recompute",
            id="a_region_map_of_the_nope_plane_alone_fails_dsv4_fp8_disk_spill",
        ),
        pytest.param(
            SAVE_DOES_NOT_HOLD_BLOCKS, CONNECTOR, "dsv4_slow_save",
            "correctness: restored pages differ from recompute",
            id="blocks_freed_while_their_save_waits_fail_dsv4_slow_save",
        ),
    ],
)  # fmt: skip
def test_a_planted_bug_fails_its_row(atom_src, tmp_path, edit, file, row, violation):
    found = _planted_violations(atom_src, tmp_path / "atom", row, edit, file=file)
    assert violation in found, found


@pytest.mark.parametrize("row", ["dsv4_disk_spill", "dsv4_fp8_disk_spill"])
def test_a_sidecar_looked_for_in_the_cpu_pool_only_fails_the_disk_spill(atom_src, tmp_path, row):
    # The SLOT sidecar, like the PAGE units, is on lmcache's local disk by the time
    # the prompt comes again: an ATOM that looks for it in the CPU pool alone fails
    # the load of data the tier holds and recomputes.
    found = _planted_violations(atom_src, tmp_path / "atom", row, SIDECAR_CPU_ONLY, file=CODEC)
    assert any(v.startswith("load_failures:") for v in found), found


@pytest.mark.parametrize(
    "row",
    [
        # B's scheduler never committed A's sidecars: an ATOM that takes B's PAGE hit
        # without one parks B's request for a SLOT load that never comes.
        pytest.param("dsv4_shared_tier_reuse", id="dsv4_shared_tier_reuse"),
        # At ffdf3bb5d that ATOM parks the resent request for a load that never comes.
        pytest.param("dsv4_slot_put_refused", id="dsv4_slot_put_refused"),
        # After the restart lmcache's remote tier still holds the PAGE units, and the
        # new scheduler session committed no sidecar: the same park.
        pytest.param("dsv4_restart", id="dsv4_restart"),
    ],
)
def test_a_page_hit_without_its_slot_fails(atom_src, tmp_path, row):
    found = _planted_violations(
        atom_src, tmp_path / "atom", row, PAGE_HIT_WITHOUT_SLOT, file=CONNECTOR
    )
    assert any(v.startswith(("correctness:", "liveness:")) for v in found), found


def test_a_lookup_unpinned_only_on_a_hit_fails_dsv4_lost_hit_reply(atom_src, tmp_path):
    found = _planted_violations(
        atom_src, tmp_path / "atom", "dsv4_lost_hit_reply", *UNPIN_ONLY_HITS, file=CONNECTOR
    )
    assert any(v.startswith("resources:") and "lookup_pins=1" in v for v in found), found


NEW_ROWS = (
    "dsv4_slow_retrieve",
    "dsv4_slow_save",
    "dsv4_lookup_socket_stolen",
    "dsv4_lookup_socket_removed",
    "dsv4_disk_spill",
    "dsv4_disk_removed",
    "dsv4_disk_truncated",
    "dsv4_shared_tier_reuse",
    "dsv4_evict_after_lookup",
    "evict_after_lookup",  # the dense row, on the same eviction
    "dsv4_lost_lookup_reply",
    "dsv4_hash_order_shuffle",
    "dsv4_remote_tier_removed",
    "dsv4_remote_tier_truncated",
    "dsv4_restart",
    "dsv4_fp8_disk_spill",
    "dsv4_shared_tier_kv_dtype",
)


@pytest.fixture(scope="module")
def new_rows(atom_src: str) -> dict[str, object]:
    """The hybrid twins of the dense rows' stories and faults, each run once at the
    checkout."""
    return _runs(atom_src, NEW_ROWS)


def _by_req(res, kind: Ev) -> dict[str, dict]:
    return {(e.op.req_id if e.op else e.req_id): e.data for e in res.run.trace.of(kind)}


@pytest.mark.parametrize("name", NEW_ROWS)
def test_the_new_hybrid_rows_pass_at_the_checkout(new_rows, name):
    res, fired = new_rows[name]
    assert [f"{v.prop}: {v.message}" for v in res.violations] == []
    assert fired is None or fired >= 1, fired  # a fault row fired


@pytest.mark.parametrize("name", ["dsv4_lookup_socket_stolen", "dsv4_lookup_socket_removed"])
def test_a_lost_socket_costs_the_hybrid_scheduler_a_timeout_per_lookup(new_rows, name):
    lookups = _by_req(new_rows[name][0], Ev.LOOKUP)
    for req in ("between", "again", "longer"):
        assert lookups[req]["kv_hit"] == 0, lookups[req]
        assert lookups[req]["unanswered_s"] >= 0.9 * LOST_SOCKET_TIMEOUT_MS / 1000, lookups[req]


def test_the_hybrid_disk_rows_read_the_disk(new_rows):
    spill = _by_req(new_rows["dsv4_disk_spill"][0], Ev.RETRIEVE_TERMINAL)["again"]
    assert (spill["ok"], spill["retrieved"], spill["asked"]) == (True, 512, 512)
    # The CPU pool no longer holds the prompt: with the disk gone lmcache returns none.
    gone = _by_req(new_rows["dsv4_disk_removed"][0], Ev.RETRIEVE_TERMINAL)["again"]
    assert (gone["ok"], gone["retrieved"]) == (False, 0), gone


@pytest.mark.parametrize(
    ("name", "req", "retrieved"),
    [
        # lmcache's local disk reads each cut file as a whole chunk: the PAGE retrieve
        # returns 512 of 512, and ATOM fails the load on the sidecar's CRC.
        ("dsv4_disk_truncated", "again", 512),
        # lmcache's fs:// connector finds the PAGE chunks short: 0 of 512, no SLOT read.
        ("dsv4_remote_tier_truncated", "B-again", 0),
    ],
)
def test_the_hybrid_truncated_rows_cut_page_chunks_and_sidecars(new_rows, name, req, retrieved):
    res = new_rows[name][0]
    sizes = next(e.data for e in res.run.trace.of(Ev.FAULT))["sizes"]
    page, slot = sorted(set(sizes))  # two sizes: PAGE chunks, and the larger SLOT sidecars
    assert sizes.count(page) == 2 * sizes.count(slot) > 0, sizes  # 2 PAGE chunks a prompt
    end = _by_req(res, Ev.RETRIEVE_TERMINAL)[req]
    assert (end["ok"], end["retrieved"], end["asked"]) == (False, retrieved, 512), end


@pytest.mark.parametrize(
    ("name", "hit"), [("dsv4_evict_after_lookup", 512), ("evict_after_lookup", 192)]
)
def test_the_eviction_removes_what_the_lookup_found(new_rows, name, hit):
    # lmcache's clear, which the rows used before, skips pinned chunks: the dense row's
    # load then still retrieved 192 of 192, and the fault evicted nothing it looked at.
    res = new_rows[name][0]
    fault = next(e.data for e in res.run.trace.of(Ev.FAULT))
    assert fault["hit"] == hit and fault["removed"] > 0, fault
    end = _by_req(res, Ev.RETRIEVE_TERMINAL)["again"]
    assert (end["ok"], end["retrieved"]) == (False, 0), end


@pytest.mark.parametrize(
    "name, first_hit",
    [
        # ATOM's version 1 commits SLOT sidecars per scheduler session: B's first lookup
        # finds A's PAGE units and claims none; B's second loads at the boundary B
        # committed.
        ("dsv4_shared_tier_reuse", 512),
        # B's lmcache (its remote tier connected: the worker checks) holds none of A's
        # chunks under B's keys: B recomputes and stores its own, then loads them.
        ("dsv4_shared_tier_kv_dtype", 0),
    ],
)
def test_b_recomputes_then_loads_its_own_boundary_from_the_shared_tier(new_rows, name, first_hit):
    res = new_rows[name][0]
    lookups = _by_req(res, Ev.LOOKUP)
    assert (lookups["B-same"]["kv_hit"], lookups["B-same"]["claim"]) == (first_hit, 0)
    assert lookups["B-again"]["claim"] == 512
    cached = {e.req_id: e.data["cached"] for e in res.run.trace.of(Ev.OUTPUT)}
    assert cached == {"A-first": 0, "B-same": 0, "B-again": 512}


def test_the_fp8_disk_spill_loads_from_the_disk(new_rows):
    spill = _by_req(new_rows["dsv4_fp8_disk_spill"][0], Ev.RETRIEVE_TERMINAL)["again"]
    assert (spill["ok"], spill["retrieved"], spill["asked"]) == (True, 512, 512)


CONFIG = "atom/kv_transfer/offload/config.py"
# Neither ATOM's page namespace nor lmcache's key (the dtype ATOM gives it) nor the
# SLOT fingerprint tells bf16 from fp8.
ONE_KEY_FOR_TWO_KV_DTYPES = (
    ('"kv_cache_dtype": str(getattr(config, "kv_cache_dtype", "auto")),',
     '"kv_cache_dtype": "auto",  # planted'),
    ("kv_dtype = dtypes.d_dtypes[config.kv_cache_dtype]",
     'kv_dtype = dtypes.d_dtypes["bf16"]  # planted'),
)  # fmt: skip
SLOT_FINGERPRINT_WITHOUT_KV_DTYPE = (
    'kv_dtype=str(getattr(self._config, "kv_cache_dtype", "auto")),',
    'kv_dtype="auto",  # planted',
)


def test_one_key_for_two_kv_dtypes_fails_dsv4_shared_tier_kv_dtype(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", *ONE_KEY_FOR_TWO_KV_DTYPES, file=CONFIG)
    path = Path(src) / CONNECTOR  # the second file of the same clone
    old, new = SLOT_FINGERPRINT_WITHOUT_KV_DTYPE
    if path.read_text().count(old) != 1:
        pytest.skip(f"this ATOM's {CONNECTOR} is not the form the planted bug edits")
    path.write_text(path.read_text().replace(old, new))
    row = catalog.ROWS["dsv4_shared_tier_kv_dtype"]
    with atom_executor(src) as executor:
        res = run_case(row.scenario, 0, injectors=lambda: [], executor=executor)
    found = [f"{v.prop}: {v.message}" for v in res.violations]
    # B's lmcache finds A's PAGE units under B's keys (the worker's stores too, not only
    # the scheduler's lookups); ATOM takes no hybrid hit without a sidecar its own
    # session committed, so B recomputes, stores its own under the same keys and loads
    # those: the answers stay right, the keys do not.
    assert any(v.startswith("keys: store key") for v in found), found
    assert _by_req(res, Ev.LOOKUP)["B-same"]["kv_hit"] == 512


# lmcache broken by hand: its remote connector cannot be built. lmcache logs a warning
# and runs on without its remote tier.
NO_REMOTE_CONNECTOR = (
    "from lmcache.v1.storage_backend import remote_backend as r\n"
    "def _refuse(*a, **k):\n"
    "    raise AssertionError('planted: no remote connector')\n"
    "r.CreateConnector = _refuse\n"
)


def test_a_shared_tier_server_without_its_remote_tier_does_not_start(
    atom_src, tmp_path, monkeypatch
):
    # A shared-tier row on it would pass without a shared tier (the toy DSV4's fp8
    # PAGE unit once made lmcache's remote connector refuse it: 14784 bytes a 256-token
    # chunk, not a whole number a token). The tier's worker refuses to run so.
    (tmp_path / "sitecustomize.py").write_text(NO_REMOTE_CONNECTOR)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="lmcache's remote tier did not connect"):
        _violations(atom_src, "dsv4_shared_tier_kv_dtype")


def test_a_lookup_timeout_past_the_run_limit_fails_dsv4_lookup_socket_removed(atom_src):
    # The row judges the stall: with lmcache's client waiting 30 s per lookup, the
    # server neither finishes nor stops within the run's limit.
    row = dataclasses.replace(
        catalog.ROWS["dsv4_lookup_socket_removed"], spec_changes=(("lookup_timeout_ms", 30000),)
    )
    faults = [row.factory(0)]
    with atom_executor(atom_src) as executor:
        res = run_case(row.scenario, 0, injectors=lambda: faults, executor=executor)
    assert any(v.prop == "liveness" for v in res.violations), res.violations


def test_a_region_map_of_the_nope_plane_alone_fails_only_the_fp8_row(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", NOPE_PLANE_ONLY, file=ATTENTION)
    found = _violations(src, "dsv4_fp8_prefix_reuse")
    assert "correctness: restored pages differ from recompute" in found, found
    assert "correctness: output of again differs from its cold run" in found, found
    # bf16 has one KV plane: the same ATOM passes there.
    assert _violations(src, "dsv4_prefix_reuse") == []


def test_dsv4_tp2_prefix_reuse_loads_on_both_ranks_and_passes(atom_src):
    events = _passing_events(atom_src, "dsv4_tp2_prefix_reuse")
    loaded = sorted(
        (e.req_id, e.data.get("rank", 0), e.data["retrieved"])
        for e in events
        if e.kind.value == "retrieve_terminal"
    )
    assert loaded == [("again", 0, 512), ("again", 1, 512), ("longer", 0, 512), ("longer", 1, 512)]


def test_a_rank_that_stores_no_page_fails_dsv4_tp2_prefix_reuse(atom_src, tmp_path):
    found = _planted_violations(
        atom_src, tmp_path / "atom", "dsv4_tp2_prefix_reuse", RANK1_STORES_NO_PAGE, file=CONNECTOR
    )
    assert any(v.startswith("efficiency: again claims 0 tokens") for v in found), found


AGGREGATOR = "atom/kv_transfer/disaggregation/aggregator.py"
# An aggregator that takes rank 0's connector completions alone (that channel's
# quorum one, rank 1's reports dropped): a SLOT sidecar boundary commits once rank 0
# reports it stored. Loads and saves are still aggregated over both ranks.
SIDECAR_COMMITTED_ON_RANK_0 = (
    ("            for completion in output.connector_completions:\n",
     "            for completion in (output.connector_completions if worker_idx == 0 else ()):\n"),
    ("        self._connector_completions = _TPCompletionGroup[ConnectorCompletionKey](\n"
     "            world_size,\n",
     "        self._connector_completions = _TPCompletionGroup[ConnectorCompletionKey](\n"
     "            1,\n"),
)  # fmt: skip


def _row_events(src: str, name: str) -> tuple[list[str], dict[str, int], list[tuple]]:
    """``name``'s (a fault row's) violations on seed 0 at ``src``, each request's claim
    and every rank's retrieve (request, rank, tokens retrieved, ok)."""
    row = catalog.ROWS[name]
    faults = [row.factory(0)]
    with atom_executor(src) as executor:
        res = run_case(row.scenario, 0, injectors=lambda: faults, executor=executor)
    assert any(res.fired.get(n) for n in (row.name, *row.fires)), res.fired  # it ran
    events = res.run.trace.events
    claims = {e.req_id: e.data["claim"] for e in events if e.kind is Ev.LOOKUP}
    loads = sorted(
        (e.req_id, e.data.get("rank", 0), e.data["retrieved"], e.data["ok"])
        for e in events
        if e.kind is Ev.RETRIEVE_TERMINAL
    )
    return [f"{v.prop}: {v.message}" for v in res.violations], claims, loads


def test_dsv4_tp2_rank1_slot_put_refused_commits_no_boundary_and_passes(atom_src):
    found, claims, loads = _row_events(atom_src, "dsv4_tp2_rank1_slot_put_refused")
    assert found == []
    # Rank 0's engine holds the PAGE units and its sidecar (its lookup hits 512), but
    # rank 1 never stored its sidecar: ATOM commits no boundary and the resend claims
    # nothing; the recompute is stored on both ranks and the third request loads it.
    assert claims["again"] == 0 and claims["third"] == 512, claims
    assert loads == [("third", 0, 512, True), ("third", 1, 512, True)], loads


def test_a_sidecar_committed_on_rank_0_alone_fails_dsv4_tp2_rank1_slot_put_refused(
    atom_src, tmp_path
):
    src = planted(atom_src, tmp_path / "atom", *SIDECAR_COMMITTED_ON_RANK_0, file=AGGREGATOR)
    found, claims, loads = _row_events(src, "dsv4_tp2_rank1_slot_put_refused")
    # The resend takes the boundary rank 1 never stored: rank 1's PAGE units come back
    # whole, its SLOT does not, and ATOM fails the load and recomputes.
    assert claims["again"] == 512, claims
    assert ("again", 1, 512, False) in loads, loads
    assert any(v.startswith("load_failures: a load of data the tier holds failed") for v in found)
    # With no fault on a rank, every sidecar is stored on both: the plain TP 2 row passes.
    assert _violations(src, "dsv4_tp2_prefix_reuse") == []


def test_a_resume_without_its_state_checkpoint_fails_dsv4_hbm_pressure(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", HIT_WITHOUT_CHECKPOINT, file=CHECKPOINT)
    # The second file of the same clone (``planted`` clones, which would drop the first).
    path = Path(src) / BLOCK_MANAGER
    old, new = ATTACH_WITHOUT_CHECKPOINT
    if path.read_text().count(old) != 1:
        pytest.skip(f"this ATOM's {BLOCK_MANAGER} is not the form the planted bug edits")
    path.write_text(path.read_text().replace(old, new))
    found = _violations(src, "dsv4_hbm_pressure")
    assert "correctness: output of again differs from its cold run" in found, found


def test_dsv4_checkpoint_dropped_drops_a_store_loads_from_the_tier_and_passes(atom_src, tmp_path):
    record = tmp_path / "record"
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--atom-src", atom_src,
         "--scenario", "dsv4_checkpoint_dropped", "--atom-record-path", str(record),
         "--no-progress", "--artifacts", str(tmp_path / "artifacts")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    source = (Path(atom_src) / CHECKPOINT).read_text().splitlines()
    dropped = source.index("                self.checkpoints_dropped += 1") + 1
    ran = {
        (line[2], line[3])
        for line in json.loads((record / "dsv4_checkpoint_dropped-seed0.json").read_text())
        if line[0] == CHECKPOINT
    }
    assert (dropped, 1) in ran, "ATOM dropped no checkpoint store"
    events = _passing_events(atom_src, "dsv4_checkpoint_dropped")
    hits = {
        e.req_id: (e.data["hbm_hit"], e.data["claim"]) for e in events if e.kind.value == "lookup"
    }
    # Its pages at 512 are still in HBM, its state is not: lmcache's 512 tokens load.
    assert hits["second-again"] == (0, 512), hits


def test_a_dropped_checkpoint_store_still_indexed_fails_dsv4_checkpoint_dropped(atom_src, tmp_path):
    found = _planted_violations(
        atom_src, tmp_path / "atom", "dsv4_checkpoint_dropped", DROPPED_STORE_INDEXED,
        file=CHECKPOINT,
    )  # fmt: skip
    assert "correctness: output of second-again differs from its cold run" in found, found


# lmcache's local disk with the length check its fs:// connector has: a chunk file
# shorter than its chunk reads as a miss (the hardening disk_truncated's lead asks for).
WHOLE_READS = (
    "import os\n"
    "from lmcache.v1.storage_backend import local_disk_backend as d\n"
    "_read = d.LocalDiskBackend.read_file\n"
    "def _whole(self, key, buffer, path):\n"
    "    if os.path.getsize(path) < len(buffer):\n"
    "        raise RuntimeError('chunk file shorter than its chunk')\n"
    "    return _read(self, key, buffer, path)\n"
    "d.LocalDiskBackend.read_file = _whole\n"
)


@pytest.mark.parametrize(("checked", "ends"), [(False, (True, 512)), (True, (False, 0))])
def test_page_chunks_cut_alone_load_whole_unless_lmcache_checks_the_read(
    atom_src, tmp_path, monkeypatch, checked, ends
):
    # dsv4_disk_page_truncated: the two PAGE chunks of the prompt are cut, its SLOT
    # sidecar is whole. lmcache 0.5.6 reads them as whole chunks and ATOM restores
    # wrong pages (an lmcache lead); an lmcache that checks the read's length misses
    # them, and ATOM recomputes.
    if checked:
        (tmp_path / "sitecustomize.py").write_text(WHOLE_READS)
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    (res, fired) = _runs(atom_src, ("dsv4_disk_page_truncated",))["dsv4_disk_page_truncated"]
    fault = next(e.data for e in res.run.trace.of(Ev.FAULT))
    assert fired == 1 and fault["files"] == 2 and len(set(fault["sizes"])) == 1, fault
    end = _by_req(res, Ev.RETRIEVE_TERMINAL)["again"]
    assert (end["ok"], end["retrieved"]) == ends, end
    said = [f"{v.prop}: {v.message}" for v in res.violations]
    if checked:
        assert said == []
    else:
        assert "correctness: restored pages differ from recompute" in said, said


# Breaks of lmcache's own code, by hand: a ``sitecustomize`` on the tier processes'
# path (the tier's zygote keeps the caller's PYTHONPATH) patches the class it names.
NO_RECONNECT = (
    "from lmcache.v1.rpc import zmq_transport as z\n"
    "z.ZmqReqRepClientTransport._recreate_all_sockets = lambda self: None\n"
)
SEEDED_TOKEN_HASH = (
    "from lmcache.v1 import token_database as t\n"
    "t.TokenDatabase._get_vllm_hash_func = lambda self, name: (lambda x: hash(repr(x)))\n"
)


@pytest.mark.parametrize(
    ("patch", "row"),
    [
        # The lost reply's lookup timed out; a client that keeps its sockets reads
        # the late replies as the later lookups' answers, and the resend misses.
        pytest.param(NO_RECONNECT, "dsv4_lost_lookup_reply", id="no_reconnect"),
        # Keys hashed with Python's seeded str hash: the scheduler's lookup (seed 0)
        # and the worker's stores (seed 1) name the same tokens differently.
        pytest.param(SEEDED_TOKEN_HASH, "dsv4_hash_order_shuffle", id="seeded_token_hash"),
    ],
)
def test_an_lmcache_broken_by_hand_fails_its_hybrid_row(
    atom_src, tmp_path, monkeypatch, patch, row
):
    (tmp_path / "sitecustomize.py").write_text(patch)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    found = _violations(atom_src, row)
    assert any(v.startswith("efficiency: silent miss: again hit 0") for v in found), found
