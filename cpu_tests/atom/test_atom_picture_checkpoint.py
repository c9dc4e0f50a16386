"""A question the picture rows cannot ask (docs/atom/tier.md, "Pictures"): ATOM's only
models that take pictures (Kimi-K3, Qwen3.5) carry recurrent state, and their HBM hit
is gated by state checkpoints; the tier's model has none. Here ATOM's real
``Scheduler`` and ``BlockManager`` (no connector, no forward, no row) are driven with
a state setting as those models declare it (a one-token fork checkpoint, the GDN
builder's ``state_transfer``) and ATOM's defaults otherwise (prefix cache on, one
checkpoint every 8192 tokens): the gated hit records a checkpoint demand at the
shared prefix's last block, and the scheduler cuts the request's prefill there after
its no-split check (``Scheduler._finalize_prefill_chunk``), so the first batch
carries the picture without all its placeholders, and ATOM's own merge (Kimi-K3's,
compiled from the checkout) raises on it. The same requests without state: the
hit covers the shared prefix and the rest is one batch holding every placeholder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, os, sys
from types import SimpleNamespace
from kvfault.faults.atom import boundary
boundary.install_all(os.environ["KVFAULT_PROBE_SOCKET_DIR"])
import torch
from atom.model_engine.scheduler import Scheduler
from atom.model_engine.sequence import Sequence
from atom.model_engine.state_runtime import StateRuntime, StateTransfer
from atom.sampling_params import SamplingParams
from kvfault.faults.atom.pictures import PICTURE_TOKEN as P, multimodal_data
from kvfault.faults.atom.runner_rules import model_merge

stateful = sys.argv[1] == "stateful"
shape = sys.argv[2]
hf = SimpleNamespace(
    architectures=["Qwen3_5ForConditionalGeneration"], model_type="qwen3_5_text",
    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=64,
    hidden_size=128, sliding_window=None)
parallel = SimpleNamespace(data_parallel_rank=0, data_parallel_size=1, pipeline_parallel_rank=0)
config = SimpleNamespace(
    model="probe", port=1, hf_config=hf, kv_transfer_config=None, kv_events_config=None,
    kv_cache_block_size=16, num_kvcache_blocks=64, kv_cache_dtype="bf16",
    enable_prefix_caching=True, enable_chunked_prefill=True, max_num_seqs=4,
    max_num_batched_tokens=512, long_prefill_token_threshold=0, max_model_len=2048,
    decode_context_parallel_size=1, prefill_context_parallel_size=1,
    bos_token_id=1, eos_token_id=-1, stop_token_ids=[], scheduler_delay_factor=0.0,
    speculative_config=None, tensor_parallel_size=1, tp_world_size=1,
    pipeline_parallel_size=1, data_parallel_size=1, parallel_config=parallel,
    enforce_eager=True, state_checkpoint_interval_tokens=8192)
if stateful:
    # What the engine learns from the model runner for a model with one state group a
    # request (the pool sizes by hand: no GPU to size them on).
    config.pool_entries, config.pool_entries_per_req = {"state": 8}, {"state": 1}
    sched = Scheduler(config, state_runtime=StateRuntime(transfer=StateTransfer.fork(1)))
else:
    sched = Scheduler(config)
bm = sched.block_manager
text = list(range(3, 203))
picture = b"a cat on a mat"
if shape == "resend":
    # picture_resend: one prompt with a picture at 128 to 160, sent again, same picture.
    first = text[:128] + [P] * 32 + text[160:]
    first_mm = multimodal_data(tuple(first), picture)
    second = first
elif shape == "hbm_suffix":
    # picture_hbm_suffix: a text prompt, then one sharing its first 48 tokens with a
    # picture of 32 placeholders after them.
    first, first_mm = text, None
    second = text[:48] + [P] * 32 + text[80:]
else:
    # Two pictured requests sharing a 20-token template, each its own picture of the
    # same size (the same placeholder ids), then their own text.
    first = text[:20] + [P] * 32 + text[100:160]
    first_mm = multimodal_data(tuple(first), b"a dog on grass")
    second = text[:20] + [P] * 32 + text[160:200] + text[40:60]

def seq(ids, mm):
    return Sequence(list(ids), 16, SamplingParams(max_tokens=1),
                    has_per_req_cache=stateful, multimodal_data=mm)

# The first request computed whole and its blocks published, as after its prefill.
a = seq(first, first_mm)
hit = bm.can_allocate(a)
bm.allocate(a, hit)
bm.hash_blocks(a, len(first))
bm.deallocate(a)
b = seq(second, multimodal_data(tuple(second), picture))
sched.add(b)
batch, _ = sched.schedule()
start = int(batch.num_cached_tokens[0]) if hasattr(batch, "num_cached_tokens") else b.num_cached_tokens
n = int(batch.num_scheduled_tokens[0])
ids = torch.tensor(second[start:start + n])
try:
    model_merge(P)(ids, ids.view(-1, 1).clone(), torch.zeros(32, 1, dtype=torch.int64))
    raised = None
except ValueError as e:
    raised = str(e).splitlines()[0]
result = {
    "first_hit": hit, "start": start, "n": n, "demand": b.checkpoint_demand_pos,
    "picture": bool(batch.multimodal_data), "placeholders": int((ids == P).sum()),
    "raised": raised,
}
if shape == "resend":
    # The second send's first forward published, as its postprocess does; a third
    # send of the same prompt and picture then asks for its hit.
    bm.hash_blocks(b, n, start_tokens=start)
    c = seq(second, multimodal_data(tuple(second), picture))
    result["third_hit_blocks"] = bm.can_allocate(c)
print(json.dumps(result))
"""


def _probe(atom_src: str, state: str, shape: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(ROOT), atom_src)))
    # The probe's socket directory goes with it (a bare mkdtemp there was left in /tmp).
    with tempfile.TemporaryDirectory(prefix="kvfault-probe-") as sockets:
        env["KVFAULT_PROBE_SOCKET_DIR"] = sockets
        out = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_PROBE), state, shape],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "shape, demand, placeholders",
    [("hbm_suffix", 48, 0), ("shared_template", 48, 28)],
)
def test_a_checkpoint_demand_cuts_a_picture_prefill(atom_src, shape, demand, placeholders):
    got = _probe(atom_src, "stateful", shape)
    # The gated hit gives nothing and demands a checkpoint where the shared blocks end;
    # the first batch stops there and still takes the picture.
    assert (got["first_hit"], got["start"], got["n"]) == (0, 0, demand), got
    assert got["demand"] == demand and got["picture"], got
    assert got["placeholders"] == placeholders, got
    assert got["raised"].startswith(f"Kimi-K3 got 32 image embeddings for {placeholders} "), got


def test_a_resent_picture_reaches_the_hit_at_the_third_send(atom_src):
    """picture_resend's shape: the second send's gated hit is 0 and its prefill is cut
    at its demand, 192 (past the picture: every placeholder in that batch, the merge
    is fine) and files a checkpoint there; a third send then hits 12 blocks (192
    tokens, the picture's placeholders among them), so its first batch computes 192
    to 200 with the picture (read from the scheduler, as on the tier's stateless model
    at the second send: picture_resend)."""
    got = _probe(atom_src, "stateful", "resend")
    assert (got["first_hit"], got["start"], got["n"], got["demand"]) == (0, 0, 192, 192), got
    assert got["picture"] and got["placeholders"] == 32 and got["raised"] is None, got
    assert got["third_hit_blocks"] == 12, got


def test_without_state_the_hit_covers_the_shared_prefix_and_the_picture_is_whole(atom_src):
    got = _probe(atom_src, "stateless", "hbm_suffix")
    assert (got["start"], got["n"]) == (48, 152), got
    assert got["picture"] and got["placeholders"] == 32 and got["raised"] is None, got
