"""Code under test that hangs is judged, within a bound: a connector call that never
returns is a liveness FAIL of that code naming the call and where it hung (not
kvfault's own ERROR after its pipe's 30 s), and an ATOM whose import blocks is one line
before any case. Each on a scratch copy of the checkout with one line added; at TP 2,
one rank's worker that stops answering (the worker fault ``hang_finished`` on rank 1)
is judged the same way, naming that rank. That one is no campaign row: ATOM makes no
promise for a hung rank, and its process manager's own answer to one (a 10 s timeout
on the rank's KV output) is not what the tier runs (docs/atom/tier.md)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from kvfault.faults.atom import catalog
from kvfault.faults.atom import scenarios as s
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.atom.scenarios import RUN_LIMIT_S
from kvfault.faults.atom.scheduler import HANG_GRACE_S
from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.campaign.execute import run_case
from kvfault.faults.campaign.kinds import scenario_target
from kvfault.faults.verdicts import Verdict


def patched_copy(atom_src: str, dest: Path, path: str, old: str, new: str) -> Path:
    """A copy of the checkout at ``dest`` with ``old`` replaced by ``new`` in ``path``."""
    shutil.copytree(atom_src, dest, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    f = dest / path
    text = f.read_text()
    assert old in text, f"{path} no longer has {old!r}"
    f.write_text(text.replace(old, new, 1))
    return dest


HANGING_GET_FINISHED = (
    "    def get_finished(self):\n        return self._impl.get_finished()",
    "    def get_finished(self):\n        import time\n        time.sleep(3600)\n"
    "        return self._impl.get_finished()",
)


def test_a_hung_get_finished_is_a_liveness_fail_with_its_stack(atom_src, tmp_path):
    src = patched_copy(
        atom_src, tmp_path / "ATOM", "atom/kv_transfer/offload/connector.py",
        *HANGING_GET_FINISHED,
    )  # fmt: skip
    with atom_executor(str(src)) as executor:
        runner = CaseRunner(keep_runs="all", executor=executor)
        out = runner.run(Case(scenario_target("prefix_reuse", "atom"), 0))
    assert out.verdict == Verdict.FAIL, out.signature
    assert out.signature.startswith("liveness: the engine neither finished nor stopped")
    assert "the worker's async_proc_aggregation did not return within" in out.signature
    assert "connector.py" in out.signature and "in get_finished" in out.signature
    res = out.fixed_result
    assert res is not None and res.run.hung
    stack = res.run.notes["hung_stack"]
    assert any("get_finished" in frame for frame in stack)
    # The bound it waited: the row's run limit and a grace, not the pipe's 30 s.
    waited = re.search(r"did not return within ([0-9.]+)s", out.signature)
    assert waited is not None and float(waited.group(1)) <= RUN_LIMIT_S + HANG_GRACE_S


# At TP 2, rank 1's worker stops answering after its first retrieve: its next
# get_finished reports nothing, every later one blocks until the worker closes. Not a
# row of the campaign (see the module's docstring): kvfault's bound on it is tested here.
RANK1_HUNG = catalog.AtomRow(
    "fault",
    "tp2_rank1_hung",
    "rank 1's worker stops answering in get_finished after its first retrieve",
    s.tp_reuse_once,
    ("liveness",),
    faults=FaultSpec(hang_finished=1, rank=1),
    fires=("hung_get_finished",),
)


def test_a_tp_rank_that_stops_answering_is_a_bounded_liveness_fail_naming_it(atom_src):
    """The run is judged (not an ERROR, not a hang of the test): liveness names rank 1's
    call, within the run's limit and its grace, with rank 1's stack through ATOM's
    ``get_finished``; the fault counts as fired."""
    assert RANK1_HUNG.name not in catalog.ROWS  # no campaign row blames ATOM for it
    with atom_executor(atom_src) as executor:
        res = run_case(
            RANK1_HUNG.scenario, 0, injectors=lambda: [RANK1_HUNG.factory(0)], executor=executor
        )
    found = [f"{v.prop}: {v.message}" for v in res.violations if v.prop == "liveness"]
    assert len(found) == 1, res.violations
    assert found[0].startswith("liveness: the engine neither finished nor stopped"), found
    assert "rank 1's worker's async_proc_aggregation did not return within" in found[0]
    waited = re.search(r"did not return within ([0-9.]+)s", found[0])
    assert waited is not None and float(waited.group(1)) <= RUN_LIMIT_S + HANG_GRACE_S
    assert res.run.hung
    stack = res.run.notes["hung_stack"]
    # ATOM's connector called the poll that hung: its get_finished is on the stack.
    assert any("offload/connector.py" in f and "in get_finished" in f for f in stack), stack
    assert res.fired.get("hung_get_finished") == 1, res.fired


def test_an_import_that_blocks_is_one_line_and_exit_2(atom_src, tmp_path):
    """A checkout whose import sleeps: the warm process is given up once it stops using
    the CPU (not after the 300 s start bound), in one line naming where it blocked;
    its process is gone."""
    import os
    import subprocess
    import sys

    src = patched_copy(
        atom_src, tmp_path / "ATOM", "atom/model_engine/scheduler.py",
        "from __future__ import annotations\n",
        "from __future__ import annotations\nimport time\ntime.sleep(3600)\n",
    )  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--atom-src", str(src),
           "--scenario", "prefix_reuse", "--no-progress"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=280)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "cannot import ATOM" in lines[0] and "the import blocked" in lines[0]
    assert "model_engine/scheduler.py" in lines[0], lines[0]
    left = [p.name for p in tmp_path.iterdir() if p.name != "ATOM"]
    assert left == [], left
