"""Every backend gives the same verdicts, on a failing stack as on a passing one.

The stacks under test are the planted regressions' legacy stacks (``Target.stack``,
``kvfault run --legacy NAME``): each on the scenario where it fails, several of them
stopping with a named error (``LoadNotTerminal``, ``TransferUnprovable``), next to the
fixed stack on a passing scenario. One process (``-j 1``), forked workers (``-j
auto``), pytest-xdist workers (``-n 2``) and execnet gateways (``--tx 2*popen``) must
give the same rows, case verdicts, signatures, trace digests, reports and exit status.

Each backend runs in a fresh interpreter under one PYTHONHASHSEED (``python THIS_FILE
BACKEND`` prints what it gave), so a hash-order-dependent stop names the same load in
all of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kvfault.faults.campaign.pool import can_fork

pytestmark = pytest.mark.skipif(not can_fork(), reason="-j workers are forked")

ROOT = Path(__file__).resolve().parents[3]
BACKENDS = ("-j 1", "-j auto", "-n 2", "--tx 2*popen")


def targets() -> list[Any]:
    """Every planted regression's legacy stack on its own scenario, a swarm under one
    of them, and the fixed stack on a scenario that passes."""
    from dataclasses import replace

    from kvfault.faults.campaign import scenario_target, swarm_target
    from kvfault.faults.regressions import REGRESSIONS

    out = [replace(scenario_target(r.scenario), stack=r.name) for r in REGRESSIONS.values()]
    out.append(replace(swarm_target("two_images", ("late_visibility",)), stack="media_keys"))
    out.append(scenario_target("two_servers"))
    return out


def outcome(backend: str) -> dict[str, Any]:
    """What ``backend`` gives for ``targets()`` on seed 0: rows, cases, the summary's
    verdicts and the exit status, as plain data."""
    from kvfault.faults.campaign.pool import ForkPool, usable_cpus
    from kvfault.faults.campaign.session import InProcess, run_session
    from kvfault.faults.campaign.xdist import Xdist
    from kvfault.faults.report.summary import summary_json
    from kvfault.faults.report.table import format_campaign

    ts, seeds = targets(), [0]
    backends = {
        "-j 1": lambda: InProcess(),
        "-j auto": lambda: ForkPool(max(2, usable_cpus())),
        "-n 2": lambda: Xdist(workers="2"),
        "--tx 2*popen": lambda: Xdist(tx=["2*popen"]),
    }
    result = run_session(ts, seeds, backends[backend]())
    summary = summary_json(result.cases, campaign=result)
    table = re.sub(r"\d+\.\d+s wall", "", format_campaign(result))
    return {
        "table": [re.split(r"\s{2,}", line)[:7] for line in table.splitlines()[2:]],
        "footer": table.splitlines()[-1],
        "cases": [
            [
                c.case.id,
                str(c.verdict),
                c.signature,
                [v.as_json() for v in c.violations],
                c.stop,
                c.fired,
                c.digest,
            ]  # fmt: skip
            for c in result.cases
        ],
        "summary": {k: summary[k] for k in ("ok", "verdict", "exit_code", "campaign_failures")},
        "exit_code": result.exit_code,
        # A failing case keeps its runs for its timeline: forked workers send them back
        # (-n/--tx outcomes come back as JSON, without them).
        "runs": [c.fixed_result is not None for c in result.cases],
    }


def _run(backend: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        [sys.executable, __file__, backend], capture_output=True, text=True, env=env,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
def test_every_legacy_stack_gives_the_same_verdicts_on_every_backend():
    got = {b: _run(b) for b in BACKENDS}
    one = got["-j 1"]
    # The stacks fail, as planted: every legacy row fails, the fixed one passes, and
    # the failing runs that stop come back with their stop.
    verdicts = {case[0]: case[1] for case in one["cases"]}
    assert verdicts.pop("scenario:two_servers@seed0") == "PASS"
    assert set(verdicts.values()) == {"FAIL"}, verdicts
    stops = " ".join(case[4] or "" for case in one["cases"])
    assert "LoadNotTerminal" in stops and "TransferUnprovable" in stops
    assert one["exit_code"] == 1 and one["summary"]["verdict"] == "FAIL"
    assert one["runs"] == [v != "PASS" for v in (case[1] for case in one["cases"])]
    assert got["-j auto"]["runs"] == one["runs"]
    for backend in BACKENDS[1:]:
        for key in ("cases", "table", "footer", "summary", "exit_code"):
            assert got[backend][key] == one[key], (backend, key)


def kvfault(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
    )  # fmt: skip


def _printed(stdout: str, report: str) -> list[str]:
    """What the command printed, without wall times and with one report directory."""
    out = []
    for line in stdout.replace(f"{report}/", "REPORT/").splitlines():
        if line.startswith(("regression ", "fault ", "scenario ", "swarm ")):
            cols = re.split(r"\s{2,}", line)
            line = "  ".join(cols[:7] + cols[8:])
        out.append(re.sub(r" in [0-9.]+s wall$", "", line))
    return out


def _reports(report: Path) -> tuple[Any, ...]:
    """summary.json's verdicts and junit.xml, without times and timeline paths (an
    outcome from -n/--tx comes back without the runs a timeline draws)."""
    summary = json.loads((report / "summary.json").read_text())
    cases = [
        (c["id"], c["verdict"], c["ok"], c["signature"], c["digest"], c["artifact"] or "")
        for c in summary["cases"]
    ]
    cases = [c[:5] + (c[5].replace(f"{report.name}/", "REPORT/"),) for c in cases]
    top = {k: summary[k] for k in ("ok", "verdict", "exit_code", "campaign_failures", "failed")}
    junit = re.sub(r'time="[0-9.]+"', "", (report / "junit.xml").read_text())
    junit = re.sub(r"\ntimeline: [^\n<]*", "", junit).replace(f"{report.name}/", "REPORT/")
    ET.fromstring(junit)  # it still parses
    timelines = [c["timeline"] is not None for c in summary["cases"]]
    return cases, top, junit, timelines


@pytest.mark.slow
def test_kvfault_run_on_a_legacy_stack_prints_writes_and_exits_the_same_on_every_backend(
    tmp_path,
):
    """Through the command: a stack that stops (restart_all_over_fix: LoadNotTerminal
    the liveness property rejects) under a fault and plain, beside a scenario it passes."""
    args = ["run", "--legacy", "restart_all_over_fix", "--seeds", "2", "--scenario",
            "lost_completion_burst", "--scenario", "two_images", "--fault", "lost_completion",
            "--no-progress"]  # fmt: skip
    got = {}
    for i, backend in enumerate(BACKENDS):
        report = f"r{i}"
        proc = kvfault(*args, *backend.split(" ", 1), "--report", report, cwd=tmp_path)
        assert "Traceback" not in proc.stderr, proc.stderr
        got[backend] = (proc.returncode, _printed(proc.stdout, report), _reports(tmp_path / report))
    code, printed, (cases, top, _, timelines) = got["-j 1"]
    assert code == 1 and top["verdict"] == "FAIL" and top["failed"] == 4
    failing = "FAIL fault:lost_completion-legacy-restart_all_over_fix@seed0: liveness:"
    assert any(line.startswith(failing) for line in printed), printed
    assert [c[1] for c in cases] == ["FAIL", "FAIL", "FAIL", "FAIL", "PASS", "PASS"]
    if _can_draw():  # forked workers send a failing case's runs back for its picture
        assert timelines == [True] * 4 + [False] * 2
        assert got["-j auto"][2][3] == timelines
    for backend in BACKENDS[1:]:
        code_b, printed_b, (cases_b, top_b, junit_b, _) = got[backend]
        want = (code, printed, *got["-j 1"][2][:3])
        assert (code_b, printed_b, cases_b, top_b, junit_b) == want, backend


def _can_draw() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


# -- --legacy itself -------------------------------------------------------------------------


def test_a_legacy_stack_runs_every_row_but_the_regressions():
    from kvfault.faults.campaign import select_targets

    fixed, legacy = select_targets(), select_targets(stack="media_keys")
    assert {t.kind.name for t in legacy} == {"fault", "scenario"}
    assert [t.id for t in legacy] == [
        f"{t.id}-legacy-media_keys" for t in fixed if t.kind.takes_legacy_stack
    ]


def test_a_legacy_case_replays_as_it_failed(tmp_path, capsys, monkeypatch):
    from kvfault.faults import cli

    monkeypatch.chdir(tmp_path)
    args = ["run", "--legacy", "media_keys", "--scenario", "two_images", "--seeds", "1",
            "-j", "1", "--no-progress", "--artifacts", "a"]  # fmt: skip
    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert "FAIL scenario:two_images-legacy-media_keys@seed0: correctness:" in out
    # tox sets PYTHONHASHSEED, and a replay line names the seed it ran under.
    assert re.search(
        r"replay: (PYTHONHASHSEED=\d+ )?kvfault run --legacy media_keys --first-seed 0 "
        r"--seeds 1 --scenario two_images",
        out,
    )
    artifact = Path("a", "scenario-two_images-legacy-media_keys-seed0.json")
    assert json.loads(artifact.read_text())["target"]["stack"] == "media_keys"
    assert cli.main(["replay", str(artifact)]) == 1
    assert "  legacy media_keys  FAIL  correctness:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--legacy", "media_key"], "unknown regression 'media_key' for --legacy (did you mean: media_keys"),
        (["--legacy", "media_keys", "--regression", "media_keys"], "drop --regression"),
        (["--legacy", "media_keys", "--tier", "lmcache"], "--legacy runs on --tier memory"),
    ],
)  # fmt: skip
def test_a_bad_legacy_is_one_line_and_exit_2(capsys, args, needle):
    from kvfault.faults import cli

    assert cli.main(["run", *args]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvfault: error: ") and needle in lines[0]


if __name__ == "__main__":
    print(json.dumps(outcome(sys.argv[1])))
