"""Single rows through the campaign API on the tier's executor: a wrong restore through
ATOM's real load path is caught; the host leaves no process, socket or directory
behind; ``kvfault run --tier atom`` writes its report and keeps to a budget; the
two-servers finding is ATOM's engine id (a one-line patch that gives it the port makes
the row pass; ``kvfault prove`` shows both heads)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.campaign.execute import run_case
from kvfault.faults.campaign.kinds import scenario_target
from kvfault.faults.verdicts import Verdict


@pytest.fixture(scope="module")
def executor(atom_src):
    with atom_executor(atom_src) as e:
        yield e


def test_a_corrupted_restore_fails_correctness(executor):
    row = dataclasses.replace(
        catalog.ROWS["retrieve_failure"],
        name="corrupt_load",
        faults=FaultSpec(corrupt_load=1),
        fires=("corrupt_load",),
    )
    res = run_case(row.scenario, 0, injectors=lambda: [row.factory(0)], executor=executor)
    assert res.fired == {"corrupt_load": 1}
    assert any(
        v.prop == "correctness" and "restored pages differ" in v.message for v in res.violations
    ), res.violations


def test_a_healthy_reuse_loads_and_passes(executor):
    runner = CaseRunner(keep_runs="all", executor=executor)
    out = runner.run(Case(scenario_target("prefix_reuse", "atom"), 1))
    assert out.verdict == Verdict.PASS, out.signature
    kinds = [e.kind.value for e in out.fixed_result.run.trace.events]
    assert kinds.count("dispatch") == 2 and kinds.count("copy_complete") == 2


def test_a_host_leaves_nothing_behind(executor):
    from kvfault.faults.atom.host import AtomHost
    from kvfault.faults.atom.spec import ServerSpec
    from kvfault.faults.processes import running

    host = AtomHost(executor.pool)
    server = host.start(ServerSpec("A"))
    sockets = os.listdir(host.socket_dir)
    assert sockets, "the worker's lookup socket is under the host's directory"
    assert all(running(pid) for pid in server.pids)
    host.close()
    assert not os.path.exists(host.dir)
    assert not any(running(pid) for pid in server.pids)


def test_a_broken_story_is_an_error_and_still_cleans_up(executor, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def broken(run):
        run.server("A")
        raise RuntimeError("the story broke")

    story = dataclasses.replace(catalog.SCENARIOS["prefix_reuse"], story=broken)
    monkeypatch.setitem(catalog.SCENARIOS, "prefix_reuse", story)
    out = CaseRunner(executor=executor).run(Case(scenario_target("prefix_reuse", "atom"), 0))
    assert out.verdict == Verdict.ERROR and "the story broke" in out.signature
    assert list(tmp_path.iterdir()) == []


def test_run_writes_its_report_and_keeps_to_a_budget(atom_src, tmp_path):
    # The one campaign loop's --report and --budget on the real tier: the first seed runs
    # whatever the budget, and no case takes under a millisecond, so no second one starts
    # (a budget of one second let two of three run once a row took under half a second:
    # the fresh-clone CI at 9f53d6f), and summary.json, junit.xml hold its row.
    report = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--atom-src", atom_src,
         "--scenario", "prefix_reuse", "--seeds", "3", "--budget", "0.001s",
         "--report", str(report), "--no-progress"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "budget 0.001s: 1 of 3 seeds ran (0)" in proc.stdout
    summary = json.loads((report / "summary.json").read_text())
    (case,) = summary["cases"]
    assert (case["id"], case["verdict"]) == ("atom:scenario:prefix_reuse@seed0", "PASS")
    assert summary["meta"]["seeds_ran"] == 1
    assert "prefix_reuse" in (report / "junit.xml").read_text()


def test_two_servers_pass_when_the_engine_id_carries_the_servers_token(
    atom_src, tmp_path, pytestconfig
):
    # Finding 4's fix written into ATOM's source: the engine id carries the token the
    # fixed ATOM draws once per server on its Config (the tier's Config carries it as
    # instance_id); both servers are at the default engine --port 8006.
    scratch = tmp_path / "atom"
    subprocess.run(["git", "clone", "-q", atom_src, str(scratch)], check=True)
    config = scratch / "atom/kv_transfer/offload/config.py"
    text = config.read_text()
    old = 'return f"atom-offload-dp{dp_rank}"'
    if old not in text:
        pytest.skip("this ATOM's lmcache_engine_id is not the one-line form the patch edits")
    config.write_text(text.replace(old, 'return f"atom-offload-{config.instance_id}-dp{dp_rank}"'))
    git = [
        "git",
        "-C",
        str(scratch),
        "-c",
        "user.name=kvfault",
        "-c",
        "user.email=kvfault@localhost",
    ]
    subprocess.run([*git, "commit", "-qam", "engine id carries the server's token"], check=True)
    proc = subprocess.run(
        [
            sys.executable, "-m", "kvfault.faults.prove", "-C", str(scratch),
            "--old", "HEAD~1", "--new", "HEAD", "--expect", "identity: B binds",
            "--", sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom",
            "--atom-src", ".", "--scenario", "two_servers", "--no-progress",
        ],
        capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # the proof in the test log
        for line in proc.stdout.splitlines():
            reporter.write_line(line)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FIXED" in proc.stdout.splitlines()[-1]


def test_a_failed_store_is_judged_by_what_atom_promises(executor):
    """ATOM reports a failed store as a finished save (its contract: the blocks may be
    freed; no data is promised): the report records what lmcache holds (``stored=0``),
    so efficiency claims no silent miss for chunks never stored, and the row passes."""
    row = catalog.ROWS["store_failure"]
    res = run_case(row.scenario, 0, injectors=lambda: [row.factory(0)], executor=executor)
    assert res.fired == {"store_failure": 1}
    saves = [
        e.data.get("stored")
        for e in res.run.trace.events
        if e.kind.value == "finished_reported" and e.op is not None and e.op.kind.value == "save"
    ]
    assert saves and saves[0] == 0 and saves[-1] > 0, saves
    assert res.ok, [str(v) for v in res.violations]


def test_a_race_row_tells_its_story_on_each_schedule_until_one_violates(executor, monkeypatch):
    """A row that exists for a race runs its schedules in one case (each on a fresh host,
    schedule 0 the plain one); the first run that violates a property is the case's."""
    from kvfault.faults.atom import executor as executor_module

    told: list[int] = []
    story = dataclasses.replace(
        catalog.SCENARIOS["concurrent_loads"], story=lambda run: told.append(run.schedule)
    )
    monkeypatch.setitem(catalog.SCENARIOS, "concurrent_loads", story)
    assert story.schedules == 3
    res = run_case("concurrent_loads", 0, executor=executor)
    assert told == [0, 1, 2] and res.notes["schedule"] == "3/3"
    told.clear()
    monkeypatch.setattr(executor_module, "_violated", lambda run, props: len(told) == 2)
    res = run_case("concurrent_loads", 0, executor=executor)
    assert told == [0, 1] and res.notes["schedule"] == "2/3"


def test_schedules_draw_their_own_prompts_and_jitter_the_worker():
    from kvfault.faults.atom.host import AtomHost
    from kvfault.faults.atom.scenarios import AtomRun

    host = AtomHost.__new__(AtomHost)
    plain, other = AtomRun(host, 0), AtomRun(host, 0, schedule=1)
    assert AtomRun(host, 0).prompt(8) == plain.prompt(8) != other.prompt(8)


@pytest.mark.parametrize("value", ["0", "x", "21"])
def test_a_bad_schedule_count_is_one_line_and_exit_2(atom_src, value):
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--atom-src", atom_src,
         "--atom-schedules", value, "--scenario", "one_token"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith(f"--atom-schedules takes a whole number from 1 to 20, not {value!r}")
    )
