"""The atom tier at tensor parallelism 2 and 4: two (four) worker processes, each
ATOM's connector worker half over its own shard of the KV heads and its own lmcache
engine; rank 0's alone serves lookups; every completion goes through ATOM's
``KVOutputAggregator`` over every rank. The TP 4 rows run a wider model (4 KV heads, 4
layers), so each rank holds a head of its own.

Each TP row earns its place: a bug planted by hand in a scratch clone of ATOM (one or
two lines each) fails it while the checkout as it is passes it.

- The aggregator takes rank 0's answer only: the scheduler uses a load that rank 1
  failed, or has not finished, and computes over rank 1's poisoned blocks
  (``tp2_rank1_retrieve_failure``, ``tp2_rank1_late_load``: ``correctness``); or frees
  a request's blocks while rank 1's save has not read them, so rank 1 stores the
  sentinel and a later load restores it (``tp2_rank1_late_save``: ``correctness``).
- The aggregator completes an operation on the first rank's report: rank 1's late
  load is used before its shard landed (``tp2_rank1_late_load``).
- Rank 1 reports its saves done without storing (rank 0's engine, which answers the
  lookups, holds the prompt; rank 1's does not): ATOM's all-or-nothing load fails on
  rank 1 and recomputes, which only what rank 1's retrieve returned shows
  (``tp2_prefix_reuse``: ``load_failures``). Where rank 1's store failed by an injected
  fault (``tp2_rank1_store_failure``) the same load failure is explained and the row
  passes; an aggregator of rank 0's answers alone uses the half-loaded KV there too,
  and an ATOM whose ``load_failed`` keeps its save floor never stores the recompute,
  so the third request's load fails on rank 1 again (``load_failures``).
- At TP 4: an aggregator whose quorum is two (the right quorum at TP 2, so no row whose
  servers are all TP 2 can see it) delivers rank 3's late failed load as done; so does
  one that reads three of four ranks (``tp4_rank3_retrieve_failure``: ``correctness``).
  Rank 3 reporting its saves done without storing fails ``tp4_prefix_reuse``
  (``load_failures``).
- ATOM's page namespace without its TP size: ``shared_tier_tp_sizes``'s two servers
  look their prompt up under one lookup key (``keys``; lmcache's own key still tells
  them apart by world size, so no data crosses). With lmcache's key also given one
  world size for every server, the TP 2 server's rank 0 loads the TP 1 server's
  chunks (``correctness``) and stores under its key (``keys``)."""

from __future__ import annotations

from pathlib import Path

from atom_planted import KEEPS_SAVE_FLOOR, planted, stores_only_where

from cpu_tests.atom.test_atom_blind_spots import (
    _assert_failed_load_fails_again,
    _assert_unstored_load_fails,
    _props,
    _violations,
)

AGGREGATOR = "atom/kv_transfer/disaggregation/aggregator.py"
CONNECTOR = "atom/kv_transfer/offload/dense/connector.py"
RANK0_ONLY = (
    ("        for worker_idx, output in enumerate(worker_outputs):",
     "        for worker_idx, output in enumerate(worker_outputs[:1]):"),
    ("            if len(reports) < self._world_size:", "            if len(reports) < 1:"),
)  # fmt: skip
FIRST_REPORT = (("            if len(reports) < self._world_size:", "            if not reports:"),)
RANK1_STORES_NOTHING = stores_only_where("self._rank == 0")
CONFIG = "atom/kv_transfer/offload/config.py"
NO_TP_IN_NAMESPACE = (
    ('"tp_size": _strict_integer("PAGE TP size", world_size, minimum=1),', '"tp_size": 1,'),
)
ONE_WORLD_SIZE_KEY = (("        world_size=world_size,\n", "        world_size=2,\n"),)
# At TP 4 (the rows' wider model): an aggregator that completes an operation once two
# ranks reported (a quorum fixed at a TP 2 deployment's: the right one at TP 2); one
# that reads three of four ranks (the last one's reports dropped, a quorum of three).
QUORUM_OF_TWO = (
    ("            if len(reports) < self._world_size:", "            if len(reports) < 2:"),
)
THREE_OF_FOUR = (
    ("        for worker_idx, output in enumerate(worker_outputs):",
     "        for worker_idx, output in enumerate(worker_outputs[:-1]):"),
    ("            if len(reports) < self._world_size:",
     "            if len(reports) < self._world_size - 1:"),
)  # fmt: skip
RANK3_STORES_NOTHING = stores_only_where("self._rank != 3")
ROWS = [
    "tp2_prefix_reuse",
    "tp2_rank1_retrieve_failure",
    "tp2_rank1_late_load",
    "tp2_rank1_late_save",
    "tp2_rank1_store_failure",
    "shared_tier_tp_sizes",
    "tp4_prefix_reuse",
    "tp4_rank3_retrieve_failure",
]
# The rows whose one-rank fault an aggregator of rank 0's answers alone gets wrong.
ONE_RANK = ROWS[1:5]


def test_the_checkout_as_it_is_passes_the_tp_rows(atom_src):
    assert _violations(atom_src, ROWS) == {r: [] for r in ROWS}


def test_an_aggregator_of_rank_0_alone_fails_the_one_rank_faults(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *RANK0_ONLY, file=AGGREGATOR)
    found = _violations(src, ONE_RANK)
    for name in ONE_RANK:
        assert "correctness" in _props(found[name]), (name, found[name])


def test_an_aggregator_done_on_the_first_report_fails_the_late_load(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *FIRST_REPORT, file=AGGREGATOR)
    found = _violations(src, ["tp2_rank1_late_load"])
    assert "correctness" in _props(found["tp2_rank1_late_load"]), found


def test_a_rank_that_stores_nothing_fails_tp2_prefix_reuse(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *RANK1_STORES_NOTHING, file=CONNECTOR)
    _assert_unstored_load_fails(src, "tp2_prefix_reuse")


def test_a_namespace_without_tp_size_fails_shared_tier_tp_sizes(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *NO_TP_IN_NAMESPACE, file=CONFIG)
    found = _violations(src, ["shared_tier_tp_sizes"])["shared_tier_tp_sizes"]
    assert any(v.startswith("keys: lookup key") for v in found), found


def test_one_key_for_two_tp_sizes_fails_shared_tier_tp_sizes(atom_src, tmp_path: Path):
    edits = (*NO_TP_IN_NAMESPACE, *ONE_WORLD_SIZE_KEY)
    src = planted(atom_src, tmp_path / "atom", *edits, file=CONFIG)
    found = _violations(src, ["shared_tier_tp_sizes"])["shared_tier_tp_sizes"]
    assert {"correctness", "keys"} <= _props(found), found
    assert any(v.startswith("keys: store key") for v in found), found


def test_a_failed_load_never_saved_again_fails_tp2_rank1_store_failure(atom_src, tmp_path: Path):
    """Rank 1's store failed, so its load of the prompt fails (explained by the fault);
    an ATOM that does not lower its save floor then never stores the recompute, and the
    third request's load fails on rank 1 again: unexplained."""
    src = planted(atom_src, tmp_path / "atom", *KEEPS_SAVE_FLOOR)
    _assert_failed_load_fails_again(src, "tp2_rank1_store_failure")


def test_an_aggregator_with_a_quorum_of_two_fails_only_at_tp_4(atom_src, tmp_path: Path):
    """A quorum of two is the right one at TP 2, so no TP 2 row can see it; at TP 4 it
    delivers rank 3's late failed load as done once ranks 0 to 2 loaded, and the
    request computes over rank 3's poisoned blocks."""
    src = planted(atom_src, tmp_path / "atom", *QUORUM_OF_TWO, file=AGGREGATOR)
    found = _violations(src, ["tp4_rank3_retrieve_failure", "tp2_rank1_retrieve_failure"])
    assert "correctness" in _props(found["tp4_rank3_retrieve_failure"]), found
    assert found["tp2_rank1_retrieve_failure"] == [], found


def test_an_aggregator_of_three_of_four_ranks_fails_tp4_rank3(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *THREE_OF_FOUR, file=AGGREGATOR)
    found = _violations(src, ["tp4_rank3_retrieve_failure"])["tp4_rank3_retrieve_failure"]
    assert "correctness" in _props(found), found


def test_a_rank_3_that_stores_nothing_fails_tp4_prefix_reuse(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *RANK3_STORES_NOTHING, file=CONNECTOR)
    _assert_unstored_load_fails(src, "tp4_prefix_reuse")
