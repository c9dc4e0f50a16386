"""Each fake of the atom tier whose decision ATOM also makes, checked against ATOM's own
code at ``KVFAULT_ATOM_SRC`` (docs/atom/tier.md, "What is faked"). Each check runs in a
fresh interpreter with the tier's boundary fakes installed, as a server process has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _probe(atom_src: str, body: str) -> dict:
    """Run ``body`` (which sets ``result``) in a server-like interpreter on ATOM."""
    code = (
        textwrap.dedent(
            """
        import json, sys, tempfile
        from kvfault.faults.atom import boundary
        boundary.install_all(tempfile.mkdtemp())
        """
        )
        + textwrap.dedent(body)
        + "\nprint(json.dumps(result))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(ROOT), atom_src)))
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
    )
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
