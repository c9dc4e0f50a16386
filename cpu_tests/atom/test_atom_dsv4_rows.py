"""The hybrid (DeepSeek-V4) connector's rows, run through the tier's executor: ATOM's
DSV4 connector stores and loads PAGE units and the SLOT checkpoint, and the row passes
at the checkout; a bug planted by hand in a scratch clone (a SLOT not restored, PAGE
units not restored) fails it on ``correctness``; a load that failed reported done
fails ``dsv4_retrieve_failure``; a SLOT sidecar read without checking its CRC fails
``dsv4_corrupt_slot``; a PAGE hit taken without its SLOT fails
``dsv4_slot_put_refused``; a lookup put on the step's unpin list only once it hit (the
dense copy's order) fails ``dsv4_lost_hit_reply``."""

from __future__ import annotations

import pytest
from atom_planted import planted

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.campaign.execute import run_case
from kvfault.faults.campaign.kinds import scenario_target
from kvfault.faults.verdicts import Verdict

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


def test_dsv4_prefix_reuse_loads_page_and_slot_and_passes(atom_src):
    with atom_executor(atom_src) as executor:
        out = CaseRunner(keep_runs="all", executor=executor).run(
            Case(scenario_target("dsv4_prefix_reuse", "atom"), 0)
        )
    assert out.verdict == Verdict.PASS, out.signature
    events = out.fixed_result.run.trace.events
    kinds = [e.kind.value for e in events]
    assert kinds.count("dispatch") == 2 and kinds.count("copy_complete") == 2
    cached = {e.req_id: e.data["cached"] for e in events if e.kind.value == "output"}
    assert cached == {"first": 0, "between": 0, "again": 512, "longer": 512}


def test_a_slot_not_restored_fails_dsv4_prefix_reuse(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", SLOT_NOT_RESTORED, file=CONNECTOR)
    found = _violations(src, "dsv4_prefix_reuse")
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
            CRC_NOT_CHECKED, CODEC, "dsv4_corrupt_slot",
            "correctness: output of again differs from its cold run",
            id="a_sidecar_crc_not_checked_fails_dsv4_corrupt_slot",
        ),
    ],
)  # fmt: skip
def test_a_planted_bug_fails_its_row(atom_src, tmp_path, edit, file, row, violation):
    src = planted(atom_src, tmp_path / "atom", edit, file=file)
    found = _violations(src, row)
    assert violation in found, found


def test_a_page_hit_without_its_slot_fails_dsv4_slot_put_refused(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", PAGE_HIT_WITHOUT_SLOT, file=CONNECTOR)
    found = _violations(src, "dsv4_slot_put_refused")
    # At ffdf3bb5d that ATOM parks the resent request for a load that never comes.
    assert any(v.startswith(("correctness:", "liveness:")) for v in found), found


def test_a_lookup_unpinned_only_on_a_hit_fails_dsv4_lost_hit_reply(atom_src, tmp_path):
    src = planted(atom_src, tmp_path / "atom", *UNPIN_ONLY_HITS, file=CONNECTOR)
    found = _violations(src, "dsv4_lost_hit_reply")
    assert any(v.startswith("resources:") and "lookup_pins=1" in v for v in found), found
