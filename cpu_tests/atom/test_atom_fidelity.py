"""Each fake of the atom tier whose decision ATOM also makes, checked against ATOM's own
code at ``KVFAULT_ATOM_SRC`` (docs/atom/tier.md, "What is faked"). Each check runs in a
fresh interpreter with the tier's boundary fakes installed, as a server process has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _probe(atom_src: str, body: str) -> dict:
    """Run ``body`` (which sets ``result``) in a server-like interpreter on ATOM."""
    code = (
        textwrap.dedent(
            """
        import json, os, sys
        from kvfault.faults.atom import boundary
        boundary.install_all(os.environ["KVFAULT_PROBE_SOCKET_DIR"])
        """
        )
        + textwrap.dedent(body)
        + "\nprint(json.dumps(result))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(ROOT), atom_src)))
    # The probe's socket directory goes with it (a bare mkdtemp there was left in /tmp).
    with tempfile.TemporaryDirectory(prefix="kvfault-probe-") as sockets:
        env["KVFAULT_PROBE_SOCKET_DIR"] = sockets
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_RUNNER = """
import ast, functools, inspect, itertools
from types import SimpleNamespace
import numpy as np
from atom.model_engine.scheduler import ScheduledBatch
from kvfault.faults.atom.runner_rules import RUNNER_MODULE, pure_middle_chunk_rule
from kvfault.faults.atom.scheduler import SchedulerProcess
from kvfault.faults.atom.spec import AtomRequest, ServerSpec

rule = pure_middle_chunk_rule()

# 1. ATOM's ModelRunner.forward returns no tokens, before postprocess, exactly when
#    _is_pure_middle_chunk says so (read from its source: the module needs aiter).
import importlib.util
src = open(importlib.util.find_spec(RUNNER_MODULE).origin).read()
runner = next(c for c in ast.parse(src).body if isinstance(c, ast.ClassDef) and c.name == "ModelRunner")
forward = next(f for f in runner.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
early = []
for node in ast.walk(forward):
    if isinstance(node, ast.If) and "_is_pure_middle_chunk" in ast.unparse(node.test):
        for ret in ast.walk(node):
            if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Call):
                kw = {k.arg: ast.unparse(k.value) for k in ret.value.keywords}
                early.append(kw.get("token_ids"))

# 2. The tier's runner, on the same batches: what it returns and what it keeps deferred.
def batch(decode, final):
    ns = SimpleNamespace(total_seqs_num_decode=decode, is_final_chunk=final,
                         req_ids=[1, 2][: max(1, len(final or []))],
                         num_scheduled_tokens=[64] * max(1, len(final or [])),
                         num_cached_tokens=[0] * max(1, len(final or [])))
    ns.produces_output = functools.partial(ScheduledBatch.produces_output, ns)
    return ns

def fake(b):
    side = SimpleNamespace(
        spec=ServerSpec("A", deferred_output=True), pure_middle_chunk=rule,
        names={1: "r1", 2: "r2"},
        seqs={n: SimpleNamespace(num_prompt_tokens=300, num_cached_tokens=0, num_tokens=300,
                                 block_table=[0], id=i) for i, n in ((1, "r1"), (2, "r2"))},
        requests={n: AtomRequest(n, (5,) * 300) for n in ("r1", "r2")},
        link=SimpleNamespace(each=lambda *a: [[7] * len(a[1])]),
        sampled=(["held"], [(9,)]),
        _in_handoff=lambda seq: True, _lookup_event=lambda *a: None,
        _merge_pictures=lambda *a: None, content={},
    )
    side._forward_items = functools.partial(SchedulerProcess._forward_items, side)
    out = SchedulerProcess.forward(side, b)
    return list(out.token_ids), side.sampled == (["held"], [(9,)])

cases = []
for decode, final in itertools.product((0, 1), (None, [False], [True], [False, False], [False, True])):
    b = batch(decode, final)
    tokens, kept = fake(b)
    cases.append({"decode": decode, "final": final, "atom_skips": bool(rule(b)),
                  "fake_tokens": tokens, "fake_kept": kept})
result = {"early": early, "cases": cases}
"""


def test_runner_samples_nothing_for_a_batch_of_middle_chunks_as_atoms_does(atom_src):
    """ATOM's ``ModelRunner.forward`` returns ``token_ids=[]`` under
    ``_is_pure_middle_chunk`` (skipping ``postprocess``, so its deferred sample stays);
    the tier's runner does the same on exactly those batches, and samples (and defers)
    on every other."""
    got = _probe(atom_src, _RUNNER)
    assert got["early"] == ["[]"], got["early"]
    skipped = [c for c in got["cases"] if c["atom_skips"]]
    assert skipped, "no batch of middle chunks among the cases"
    for c in got["cases"]:
        if c["atom_skips"]:
            assert c["fake_tokens"] == [] and c["fake_kept"], c
        else:
            assert c["fake_tokens"] != [] and not c["fake_kept"], c


_PICTURES = """
import ast, importlib.util
from types import SimpleNamespace
from atom.model_engine.scheduler import ScheduledBatch
from atom.model_engine.sequence import Sequence
from kvfault.fakes.model import DeterministicModel
from kvfault.faults.atom.pictures import (
    PICTURE_TOKEN, MergeRaised, RunnerMerge, cold_content, multimodal_data)
from kvfault.faults.atom.runner_rules import RUNNER_MODULE, model_merge
from kvfault.reference.types import Geometry, Request

text = tuple(range(100, 300))
pictured = text[:128] + (PICTURE_TOKEN,) * 32 + text[160:]
x, y = b"a dog on grass", b"a cat on a mat"
merge = RunnerMerge(model_merge(PICTURE_TOKEN))

def batch(*reqs):
    return SimpleNamespace(multimodal_data={i: multimodal_data(p, pic) for i, p, pic in reqs})

def raised(inputs):
    try:
        merge.embed(batch((1, pictured, x)), inputs)
    except MergeRaised as e:
        return f"{e.error}: {e.message}"
    return None

result = {
    # the whole prompt in one forward (a cold run), alone and beside another picture
    "whole": merge.embed(batch((1, pictured, x)), [list(pictured)])
    == [list(cold_content(pictured, x))],
    "two": merge.embed(batch((1, pictured, x), (2, pictured, y)), [list(pictured)] * 2)
    == [list(cold_content(pictured, x)), list(cold_content(pictured, y))],
    "none": merge.embed(batch(), [list(pictured)]) == [list(pictured)],
    # a forward that computes none, or part, of the picture's placeholders
    "suffix": raised([list(pictured[192:])]),
    "part": raised([list(pictured[144:])]),
}

# The fake model's pages: a picture changes its placeholders' block and every later one.
model = DeterministicModel("dense", Geometry(block_size=16, chunk_size=64))
pages = {k: model.cold_pages(Request(k, cold_content(pictured, p) if p else text))
         for k, p in (("x", x), ("y", y), ("t", b""))}
def first_difference(a, b):
    return next(i for i, (p, q) in enumerate(zip(pages[a], pages[b])) if p != q)
result["x_vs_y"] = first_difference("x", "y")
result["x_vs_text"] = first_difference("x", "t")
result["all_after"] = all(p != q for p, q in zip(pages["x"][8:], pages["y"][8:]))

# ATOM's scheduler hands a request's picture to the first batch that schedules it,
# and takes it off the request there.
seq = Sequence(list(pictured), 16, multimodal_data=multimodal_data(pictured, x))
b1 = ScheduledBatch({seq.id: seq}, [16], 16, total_tokens_num_prefill=16, num_cached_tokens=[0])
b2 = ScheduledBatch({seq.id: seq}, [16], 16, total_tokens_num_prefill=16, num_cached_tokens=[16])
result["first_batch"] = list(b1.multimodal_data) == [seq.id]
result["later_batch"] = b2.multimodal_data == {}

# ATOM's runner merges, on a prefill batch with multimodal_data, over this forward's
# input_ids (its source; the module needs aiter).
src = open(importlib.util.find_spec(RUNNER_MODULE).origin).read()
site = []
for node in ast.walk(ast.parse(src)):
    if isinstance(node, ast.If) and "batch.multimodal_data" in ast.unparse(node.test):
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and ast.unparse(call.func).endswith(
                "merge_multimodal_embeddings"
            ):
                site.append([ast.unparse(node.test), ast.unparse(call.args[0])])
result["site"] = site
"""


def test_pictures_merge_as_atoms_runner_and_model_do(atom_src):
    """The tier's runner merges a picture with ATOM's own Kimi-K3 merge (compiled from
    the checkout) over the tokens a forward computes, as ATOM's ``run_model`` does on a
    prefill batch that carries ``multimodal_data``, which ATOM's ``ScheduledBatch``
    gives only the first batch that schedules the request. A whole prompt merges into
    what the judge calls its cold run; a forward that computes none or part of the
    placeholders raises ATOM's ``ValueError``. The fake model's pages are position
    aware: two pictures at tokens 128 to 160 give the same first 8 pages (blocks of 16)
    and different pages from the 9th on; text and picture differ from there too."""
    got = _probe(atom_src, _PICTURES)
    assert got["whole"] and got["two"] and got["none"], got
    for key in ("suffix", "part"):
        assert got[key] and got[key].startswith("ValueError: Kimi-K3 got 32 image embeddings")
    assert "0 placeholder tokens" in got["suffix"] and "16 placeholder" in got["part"]
    assert got["x_vs_y"] == got["x_vs_text"] == 8 and got["all_after"], got
    assert got["first_batch"] and got["later_batch"], got
    assert len(got["site"]) == 1, got["site"]
    test, first_arg = got["site"][0]
    assert "is_prefill" in test and first_arg == "input_ids", got["site"]


_PIPELINE = """
import ast, functools, importlib.util, itertools
from collections import deque
from types import SimpleNamespace
from atom.model_engine.scheduler import ScheduledBatch
from kvfault.faults.atom.pipeline import StageHub, _StageForward
from kvfault.faults.atom.runner_rules import RUNNER_MODULE, pure_middle_chunk_rule

# 1. ATOM's ModelRunner: where it returns before sampling, and when it defers output
#    (read from its source: the module needs aiter).
src = open(importlib.util.find_spec(RUNNER_MODULE).origin).read()
tree = ast.parse(src)
runner = next(c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "ModelRunner")
forward = next(f for f in runner.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
early = [ast.unparse(n.test) for n in ast.walk(forward)
         if isinstance(n, ast.If) and "_is_pure_middle_chunk" in ast.unparse(n.test)]
deferred = [ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
            and any(ast.unparse(t) == "self.is_deferred_out" for t in n.targets)]

# 2. The tier's stage forwards on the same batches: stage 0 of 2 (not the last) and
#    stage 1 (the last).
rule = pure_middle_chunk_rule()

def batch(decode, final):
    ns = SimpleNamespace(total_seqs_num_decode=decode, is_final_chunk=final,
                         req_ids=[1, 2][: max(1, len(final or []))])
    ns.produces_output = functools.partial(ScheduledBatch.produces_output, ns)
    return ns

def last_stage(b):
    hub = StageHub(2)
    hub.hidden[1].append(([None] * len(b.req_ids), [7] * len(b.req_ids)))
    head = SimpleNamespace(hub=hub, names={}, pure_middle_chunk=rule,
                           stages=[None, SimpleNamespace(each=lambda *a: [[7] * len(a[1])])])
    return [list(t) for t in _StageForward(head, 1)(b).token_ids]

def middle_stage(b):
    hub = StageHub(3)
    hub.hidden[1].append(([None] * len(b.req_ids), [7] * len(b.req_ids)))
    head = SimpleNamespace(hub=hub, names={}, pure_middle_chunk=rule,
                           stages=[None, SimpleNamespace(each=lambda *a: [[7] * len(a[1])])])
    out = _StageForward(head, 1)(b)
    return list(out.token_ids), len(hub.hidden[2])

cases = []
for decode, final in itertools.product((0, 1), (None, [False], [True], [False, True])):
    b = batch(decode, final)
    cases.append({"atom_skips": bool(rule(b)), "last": last_stage(b), "middle": middle_stage(b)})
result = {"early": early, "deferred": deferred, "cases": cases}
"""


def test_pipeline_stages_sample_where_atoms_runner_does(atom_src):
    """ATOM's ``ModelRunner.forward`` returns no tokens on a stage that is not the last
    (``pp_non_last``) or for a batch of middle chunks, and defers output only with one
    pipeline stage. The tier's stages do the same: a stage that is not the last passes
    its tokens on and samples nothing; the last samples every batch but those; and its
    pipeline head refuses deferred output."""
    got = _probe(atom_src, _PIPELINE)
    assert got["early"] == ["pp_non_last or self._is_pure_middle_chunk(batch)"], got["early"]
    one_stage = "getattr(runner.config, 'pipeline_parallel_size', 1) == 1"
    assert got["deferred"] == [one_stage], got["deferred"]
    assert any(c["atom_skips"] for c in got["cases"]), "no batch of middle chunks"
    for c in got["cases"]:
        assert c["middle"] == [[], 1], c
        assert (c["last"] == []) == c["atom_skips"], c
        assert all(t == [7] for t in c["last"]), c
