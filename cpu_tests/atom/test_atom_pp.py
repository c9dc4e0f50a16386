"""The atom tier at pipeline parallelism 2, and at PP 2 x TP 2: one worker process per
stage (per TP rank of a stage), each ATOM's connector worker half over its stage's
layers (ATOM's split of the model's) with its own lmcache engine under worker id ``stage x TP + TP rank``; stage 0's engine alone
answers lookups; the head engine core is ATOM's ``PPEngineCoreProc`` (its head step,
its ``PPKVAggregator`` over the stages' completions), each downstream stage ATOM's
``_downstream_busy_loop``.

Each PP row earns its place: a bug planted by hand in a scratch clone of ATOM (one line
each) fails it while the checkout as it is passes it.

- Worker ids without the stage (``pp_aware_rank_and_world`` returning the TP rank): a
  PP 2 server's two stages store their layers under one key in a shared tier, and the
  other server's stages restore one stage's layers into both
  (``shared_tier_pp_reuse``: ``correctness``).
- Stage 1 reports its saves done without storing: the load fails on stage 1 and
  ATOM recomputes, which only what stage 1's retrieve returned shows
  (``pp2_prefix_reuse``: ``load_failures``).
- ``PPKVAggregator`` completes a load on the first stage's report: stage 1's late load
  is used before its layer landed (``pp2_stage1_late_load``: ``correctness``).
- ``PPKVAggregator`` counts a stage's failed load as loaded: the request uses stage 0's
  layer and stage 1's poisoned blocks (``pp2_stage1_retrieve_failure``:
  ``correctness``).
- ``PPKVAggregator`` calls a save done on the first stage's report: the blocks are freed
  while stage 1's slow store has not read them, stage 1 stores the sentinel and the
  load restores it (``pp2_stage1_late_save``: ``correctness``).
- ATOM's ``load_failed`` keeps its save floor: after stage 1's failed store the
  recompute is never saved again, and the third request's load fails on stage 1 again
  (``pp2_stage1_store_failure``: ``load_failures``).
- At PP 2 x TP 2 (the rows' wider model: 4 KV heads, 4 layers): worker ids that add the
  stage to the TP rank (right at PP 2 x TP 1 and at PP 1: the PP-only and TP-only rows
  pass it) file two workers' other bytes under one key in a shared tier
  (``shared_tier_pp2_tp2_reuse``: ``correctness``); worker 3 reporting its saves done
  without storing fails ``pp2_tp2_prefix_reuse`` (``load_failures``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from atom_planted import KEEPS_SAVE_FLOOR, planted, stores_only_where

from cpu_tests.atom.test_atom_blind_spots import (
    _assert_failed_load_fails_again,
    _assert_unstored_load_fails,
    _props,
    _violations,
)

COMMON = "atom/kv_transfer/offload/_offload_common.py"
PP_AGGREGATOR = "atom/kv_transfer/disaggregation/pp_kv_aggregator.py"
CONNECTOR = "atom/kv_transfer/offload/dense/connector.py"
NO_STAGE_IN_WORKER_ID = (
    ("    return pp_rank * tp.world_size + tp.rank_in_group, pp_size * tp.world_size",
     "    return tp.rank_in_group, pp_size * tp.world_size"),
)  # fmt: skip
STAGE1_STORES_NOTHING = stores_only_where("self._rank == 0")
FIRST_STAGE_DONE = (
    ("            rid for rid, stages in self._loading.items() if len(stages) >= self._pp_size",
     "            rid for rid, stages in self._loading.items() if len(stages) >= 1"),
)  # fmt: skip
# A stage's failed load counted as loaded: the load is delivered done once every stage
# reported, whatever one reported.
FAILED_COUNTS_AS_LOADED = (
    ("            self._failed_loading.setdefault(rid, set()).add(pp_rank)",
     "            self._loading.setdefault(rid, set()).add(pp_rank)"),
)  # fmt: skip
# A save done on the first stage's report: stage 0's finished save frees the blocks
# while stage 1's slow store has not read them.
FIRST_STAGE_SAVED = (
    ("            rid for rid, stages in self._saving.items() if len(stages) >= self._pp_size",
     "            rid for rid, stages in self._saving.items() if len(stages) >= 1"),
)  # fmt: skip
# Worker ids that add the stage instead of stacking it over the TP ranks: right at PP 2
# x TP 1 and at PP 1 (every PP-only and TP-only row passes it); at PP 2 x TP 2 stage 0's
# rank 1 and stage 1's rank 0 are both worker 1 and file other bytes under one key.
STAGE_ADDED_TO_TP_RANK = (
    ("    return pp_rank * tp.world_size + tp.rank_in_group, pp_size * tp.world_size",
     "    return pp_rank + tp.rank_in_group, pp_size * tp.world_size"),
)  # fmt: skip
# Worker 3 (stage 1's TP rank 1 at PP 2 x TP 2) reports its saves done without storing.
WORKER3_STORES_NOTHING = stores_only_where("self._rank != 3")
ROWS = [
    "pp2_prefix_reuse",
    "pp2_stage1_retrieve_failure",
    "pp2_stage1_late_load",
    "pp2_stage1_store_failure",
    "pp2_stage1_late_save",
    "shared_tier_pp_reuse",
    "pp2_tp2_prefix_reuse",
    "shared_tier_pp2_tp2_reuse",
]


def test_the_checkout_as_it_is_passes_the_pp_rows(atom_src):
    assert _violations(atom_src, ROWS) == {r: [] for r in ROWS}


@pytest.mark.parametrize(
    ("edits", "file", "row"),
    [
        pytest.param(
            NO_STAGE_IN_WORKER_ID, COMMON, "shared_tier_pp_reuse",
            id="worker_ids_without_the_stage_fail_shared_tier_pp_reuse",
        ),
        pytest.param(
            FAILED_COUNTS_AS_LOADED, PP_AGGREGATOR, "pp2_stage1_retrieve_failure",
            id="an_aggregator_that_counts_a_failed_stage_as_loaded_fails",
        ),
        pytest.param(
            FIRST_STAGE_DONE, PP_AGGREGATOR, "pp2_stage1_late_load",
            id="an_aggregator_done_on_the_first_stage_fails_the_late_load",
        ),
        pytest.param(
            FIRST_STAGE_SAVED, PP_AGGREGATOR, "pp2_stage1_late_save",
            id="an_aggregator_saved_on_the_first_stage_fails_the_late_save",
        ),
        pytest.param(
            STAGE_ADDED_TO_TP_RANK, COMMON, "shared_tier_pp2_tp2_reuse",
            id="worker_ids_that_add_the_stage_fail_shared_tier_pp2_tp2_reuse",
        ),
    ],
)  # fmt: skip
def test_a_planted_bug_fails_its_row_on_correctness(atom_src, tmp_path: Path, edits, file, row):
    src = planted(atom_src, tmp_path / "atom", *edits, file=file)
    found = _violations(src, [row])[row]
    assert "correctness" in _props(found), found


def test_a_stage_that_stores_nothing_fails_pp2_prefix_reuse(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *STAGE1_STORES_NOTHING, file=CONNECTOR)
    _assert_unstored_load_fails(src, "pp2_prefix_reuse")


def test_worker_ids_that_add_the_stage_pass_every_pp_or_tp_only_row(atom_src, tmp_path: Path):
    """Stage plus TP rank is the right worker id at PP 2 x TP 1 and at PP 1: only a PP x
    TP row can see it (``shared_tier_pp2_tp2_reuse``, above)."""
    src = planted(atom_src, tmp_path / "atom", *STAGE_ADDED_TO_TP_RANK, file=COMMON)
    rows = ["shared_tier_pp_reuse", "shared_tier_tp_sizes"]
    assert _violations(src, rows) == {r: [] for r in rows}


def test_a_store_failure_never_saved_again_fails_pp2_stage1(atom_src, tmp_path: Path):
    """Stage 1's store failed, so its load of the prompt fails (explained by the fault);
    an ATOM that keeps its save floor then never stores the recompute, and the third
    request's load fails on stage 1 again: unexplained."""
    src = planted(atom_src, tmp_path / "atom", *KEEPS_SAVE_FLOOR)
    _assert_failed_load_fails_again(src, "pp2_stage1_store_failure")


def test_a_worker_3_that_stores_nothing_fails_pp2_tp2_prefix_reuse(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *WORKER3_STORES_NOTHING, file=CONNECTOR)
    _assert_unstored_load_fails(src, "pp2_tp2_prefix_reuse")


def _run(atom_src: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--atom-src",
         atom_src, "--scenario", "shared_tier_tp_pp", "--no-progress", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_tp_and_a_pp_replica_share_keys_until_the_namespace_names_pp(atom_src):
    """At ATOM's main a TP 2 and a PP 2 server of one model file their chunks under one
    key per worker id (one namespace: world size 2 for both), so the PP server restores
    the TP server's bytes; with the candidate fix (the namespace names the pipeline
    size, real TP and each stage's layers inside ATOM's hashed namespace document) it misses
    and recomputes."""
    base = _run(atom_src)
    assert base.returncode == 1, base.stdout[-2000:] + base.stderr[-2000:]
    assert "correctness:" in base.stdout and "keys: lookup key" in base.stdout, base.stdout
    fixed = _run(atom_src, "--atom-fix", "shared_tier_tp_pp")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


# ATOM's namespace for a TP 2, a PP 2 (ATOM's split, then layers 1+3 of 4) and a TP 1
# replica, at ffdf3bb5d and under the fix, and the ``json`` its module holds after.
_NAMESPACES = """
import json, os, types
from atom.kv_transfer.offload import config as offcfg
from kvfault.faults.atom.fixes import FIXES
hf = types.SimpleNamespace(num_hidden_layers=4, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=8, hidden_size=32)
def name(pp, tp, partition=None):
    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    if partition:
        os.environ["VLLM_PP_LAYER_PARTITION"] = partition
    config = types.SimpleNamespace(
        hf_config=hf, model="m", kv_cache_dtype="bf16", kv_cache_block_size=16,
        pipeline_parallel_size=pp, tensor_parallel_size=tp,
        decode_context_parallel_size=1, speculative_config=None, kv_transfer_config={})
    return offcfg.build_page_namespace(config, types.SimpleNamespace(chunk_size=64), pp * tp)
def names():
    return {"tp2": name(1, 2), "pp2": name(2, 1), "pp2_1_3": name(2, 1, "1,3"),
            "tp1": name(1, 1)}
result = {"base": names()}
FIXES["shared_tier_tp_pp"].before_build("worker")
result["fix"] = names()
result["json_restored"] = offcfg.json is json
print(json.dumps(result))
"""


def test_the_fix_names_the_split_inside_atoms_namespace_document(atom_src):
    """ATOM's namespace at ffdf3bb5d is one for a TP 2 and a PP 2 replica (and for two
    layer partitions); the fix, inside the hashed document, tells all three apart and
    leaves a PP 1 server's namespace, so its stored keys, as they were."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join((str(Path(__file__).resolve().parents[2]), atom_src))
    )
    out = subprocess.run(
        [sys.executable, "-c", _NAMESPACES], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    base, fix = got["base"], got["fix"]
    assert base["tp2"] == base["pp2"] == base["pp2_1_3"], base
    assert len({fix["tp2"], fix["pp2"], fix["pp2_1_3"]}) == 3, fix
    assert (fix["tp2"], fix["tp1"]) == (base["tp2"], base["tp1"]), (base, fix)
    assert got["json_restored"], got
