"""ATOM's hybrid (DeepSeek-V4) offload connector starts on a CPU with the tier's fakes
(``faults/atom/dsv4_boundary.py``): its worker half registers the PAGE and SLOT
regions that ATOM's own DSV4 attention builder allocates and describes
(``faults/atom/dsv4_runner.py``), with the CPU twin as its Triton staging, starts its
lmcache engine and lookup server, and ATOM's codec moves PAGE blocks and a SLOT
through the twin; its scheduler half starts and connects its lookup client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.atom

HELPER = Path(__file__).with_name("dsv4_start.py")


@pytest.fixture(scope="module")
def started(atom_src, tmp_path_factory):
    host_dir = tmp_path_factory.mktemp("dsv4")
    proc = subprocess.run(
        [sys.executable, str(HELPER), atom_src, str(host_dir)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("DSV4 ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("DSV4 ") :])


def test_both_halves_of_the_hybrid_connector_start(started):
    assert started["worker"] == "DSV4OffloadConnector"
    assert started["scheduler"] == "DSV4OffloadScheduler"
    assert started["lookup_server"] and started["lookup_client"]


def test_the_codec_runs_on_the_twin_over_host_memory(started):
    assert started["fused_staging"]  # ATOM's check that refuses a start without staging
    assert started["codec_device"] == ["cpu", True]  # allocates on the host, reads as cuda


def test_the_regions_are_atoms_dsv4_layout(started):
    # ATOM's builder: one compressed PAGE plane (bf16: no RoPE plane), the CSA layer's
    # indexer, and one full-request SLOT region per plane.
    assert started["page_regions"] == ["dsv4.main_kv.nope", "dsv4.csa_indexer.layer_0"]
    assert started["slot_regions"] == ["dsv4.main_kv.nope"]
    assert (started["num_blocks"], started["num_slots"]) == (24, 4)


def test_atoms_codec_moves_page_blocks_and_a_slot(started):
    assert started["page_moved"] == [True, True]
    assert started["slot_moved"] == [True]
