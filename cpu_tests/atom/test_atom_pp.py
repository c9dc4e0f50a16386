"""The atom tier at pipeline parallelism 2: one worker process per stage, each ATOM's
connector worker half over its stage's layer (ATOM's split of the model's two) with its
own lmcache engine under worker id ``stage x TP + TP rank``; stage 0's engine alone
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
  ``correctness``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from atom_planted import planted

from cpu_tests.atom.test_atom_blind_spots import _props, _violations

COMMON = "atom/kv_transfer/offload/_offload_common.py"
PP_AGGREGATOR = "atom/kv_transfer/disaggregation/pp_kv_aggregator.py"
CONNECTOR = "atom/kv_transfer/offload/dense/connector.py"
NO_STAGE_IN_WORKER_ID = (
    ("    return pp_rank * tp.world_size + tp.rank_in_group, pp_size * tp.world_size",
     "    return tp.rank_in_group, pp_size * tp.world_size"),
)  # fmt: skip
STAGE1_STORES_NOTHING = (
    (
        "        self._engine.store(",
        "        (self._engine.store if self._rank == 0 else (lambda *a, **k: None))(",
    ),
)
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
ROWS = [
    "pp2_prefix_reuse",
    "pp2_stage1_retrieve_failure",
    "pp2_stage1_late_load",
    "shared_tier_pp_reuse",
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
    ],
)  # fmt: skip
def test_a_planted_bug_fails_its_row_on_correctness(atom_src, tmp_path: Path, edits, file, row):
    src = planted(atom_src, tmp_path / "atom", *edits, file=file)
    found = _violations(src, [row])[row]
    assert "correctness" in _props(found), found


def test_a_stage_that_stores_nothing_fails_pp2_prefix_reuse(atom_src, tmp_path: Path):
    src = planted(atom_src, tmp_path / "atom", *STAGE1_STORES_NOTHING, file=CONNECTOR)
    found = _violations(src, ["pp2_prefix_reuse"])["pp2_prefix_reuse"]
    assert "load_failures" in _props(found), found
    assert any("lmcache returned 0 of" in v for v in found), found


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
