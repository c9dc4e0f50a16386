"""The in-process campaign over forked workers (faults/campaign/pool.py, ``kvfault run
-j N``): what it prints, writes and exits with is what one process gives; Ctrl-C, a dead
worker and bad ``-j`` values."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from itertools import count
from pathlib import Path

import pytest

from kvfault.faults import cli
from kvfault.faults.campaign import fault_target, regression_target, scenario_target, select_targets
from kvfault.faults.campaign.pool import ForkPool, can_fork, units
from kvfault.faults.campaign.session import run_session, seeds_ran

pytestmark = pytest.mark.skipif(not can_fork(), reason="workers are forked")

ROOT = Path(__file__).resolve().parents[3]
# Four scenarios, so two workers share the units; a regression shares its scenario's
# fixed run with the plain row of the same scenario.
SELECTION = [
    "--seeds", "2", "--regression", "hybrid_last_chunk", "--regression", "media_keys",
    "--fault", "fence_failure", "--scenario", "two_servers", "--scenario",
    "chunk_aligned_hybrid", "--no-progress",
]  # fmt: skip


def run_pooled(targets, seeds, jobs, **settings):
    """The campaign session over ``jobs`` forked workers."""
    return run_session(targets, seeds, ForkPool(jobs), **settings)


def kvfault(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # One hash seed for both commands (a hash-order case may depend on it); within a
    # command the forked workers have the command's own.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300,
    )  # fmt: skip


def rows(stdout: str) -> list[str]:
    """Everything printed but the wall-time column and the footer's wall time."""
    out = []
    for line in stdout.splitlines():
        if line.startswith(("regression ", "fault ", "scenario ", "swarm ")):
            cols = re.split(r"\s{2,}", line)
            line = "  ".join(cols[:7] + cols[8:])
        out.append(re.sub(r" in [0-9.]+s wall$", "", line))
    return out


def cases(report: Path) -> list[tuple[str, str, str, bool]]:
    summary = json.loads((report / "summary.json").read_text())
    return [(c["id"], c["verdict"], c["digest"], c["ok"]) for c in summary["cases"]]


def test_units_keep_a_scenario_and_seed_together_largest_first():
    targets = select_targets(["media_keys", "hybrid_last_chunk"], ["fence_failure"],
                             ["two_images", "chunk_aligned_hybrid"])  # fmt: skip
    got = [[c.id for c in u] for u in units(targets, [3, 4])]
    assert got == [
        ["regression:media_keys@seed3", "scenario:two_images@seed3"],
        ["regression:hybrid_last_chunk@seed3", "scenario:chunk_aligned_hybrid@seed3"],
        ["fault:fence_failure@seed3"],
        ["regression:media_keys@seed4", "scenario:two_images@seed4"],
        ["regression:hybrid_last_chunk@seed4", "scenario:chunk_aligned_hybrid@seed4"],
        ["fault:fence_failure@seed4"],
    ]


def test_two_processes_print_write_and_exit_as_one_does(tmp_path):
    one = kvfault("run", *SELECTION, "-j", "1", "--report", "one", cwd=tmp_path)
    two = kvfault("run", *SELECTION, "-j", "2", "--report", "two", cwd=tmp_path)
    assert one.returncode == 0, one.stdout + one.stderr
    assert two.returncode == 0, two.stdout + two.stderr
    assert rows(two.stdout.replace("two/", "one/")) == rows(one.stdout)
    assert len([r for r in rows(one.stdout) if r.startswith(("regr", "fault", "scen"))]) == 5
    ran = cases(tmp_path / "one")
    assert len(ran) == 10 and all(digest for _, _, digest, _ in ran)
    assert cases(tmp_path / "two") == ran  # same cases, verdicts and trace digests
    # A green run leaves no artifact, nor the directory it made for them.
    assert not (tmp_path / "one" / "artifacts").exists()
    assert not (tmp_path / "two" / "artifacts").exists()
    junit = [(tmp_path / d / "junit.xml").read_text() for d in ("one", "two")]
    assert [re.sub(r'time="[0-9.]+"', "", j) for j in junit[1:]] == [
        re.sub(r'time="[0-9.]+"', "", junit[0])
    ]


def test_a_failing_campaign_is_the_same_in_two_processes(
    tmp_path, capfd, monkeypatch, unexercised_fault
):
    """A fault that never fires: the same table, verdicts, digests, kept artifacts (and
    timelines, where matplotlib is installed) and exit status with -j 1 and -j 2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    args = ["run", "--seeds", "2", "--fault", "lost_completion", "--scenario", "two_images",
            "--regression", "media_keys", "--no-progress"]  # fmt: skip
    out, err = {}, {}
    for jobs in ("1", "2"):
        code = cli.main([*args, "-j", jobs, "--report", f"rep{jobs}"])
        out[jobs], err[jobs] = capfd.readouterr()
        assert code == 1, out[jobs] + err[jobs]
        out[jobs] = out[jobs].replace(f"rep{jobs}", "rep")
    # Captured at the file descriptors, so what the forked workers wrote to stderr too
    # (a case whose runs could not come back, a hung worker's stacks) goes with any
    # difference.
    assert rows(out["2"]) == rows(out["1"]), err["2"]
    assert "NOT EXERCISED fault:lost_completion@seed1: lost_completion never fired" in out["1"]
    assert cases(Path("rep2")) == cases(Path("rep1")), err["2"]
    assert [c[3] for c in cases(Path("rep1"))] == [True, True, False, False, True, True]
    for jobs in ("1", "2"):
        kept = sorted(p.name for p in Path(f"rep{jobs}", "artifacts").iterdir())
        assert kept == ["fault-lost_completion-seed0.json", "fault-lost_completion-seed1.json"]
    summaries = [json.loads(Path(f"rep{j}", "summary.json").read_text()) for j in ("1", "2")]
    timelines = [[c["timeline"] is not None for c in s["cases"]] for s in summaries]
    assert timelines[1] == timelines[0], err["2"]  # a failing run comes back with its trace


def test_a_dead_worker_leaves_an_error_case_and_its_artifact_and_the_rest_runs(tmp_path):
    # A 1 ms hang guard ends each worker in the middle of its case; fresh workers run
    # the rest, and every case is an ERROR with its artifact kept.
    proc = kvfault(
        "run", "-j", "2", "--seeds", "1", "--scenario", "two_servers", "--scenario",
        "two_images", "--scenario", "restart_mid_run", "--timeout", "0.001", "--no-progress",
        "--artifacts", "arts", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR scenario:")]
    assert len(errors) == 3, proc.stdout
    assert all(
        ln.endswith(": ran past --timeout 0.001s (its worker's stacks on stderr)") for ln in errors
    )
    assert "3 targets, 3 runs: 0 ok, 3 failed" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "arts").iterdir()) == [
        "scenario-restart_mid_run-seed0.json",
        "scenario-two_images-seed0.json",
        "scenario-two_servers-seed0.json",
    ]
    assert proc.stderr.count("kvfault: error: timed out: a case ran past --timeout") == 3
    # Each replay carries the bound the case ran past, so it times out again.
    replays = [ln for ln in proc.stdout.splitlines() if ln.startswith("  replay: ")]
    assert len(replays) == 3 and all(ln.endswith(" --timeout 0.001") for ln in replays)
    art = json.loads((tmp_path / "arts" / "scenario-two_servers-seed0.json").read_text())
    assert art["timeout_s"] == 0.001 and art["command"].endswith("--timeout 0.001")
    again = kvfault("replay", "arts/scenario-two_servers-seed0.json", cwd=tmp_path)
    assert again.returncode == 2, again.stdout + again.stderr
    assert again.stderr.startswith("kvfault: error: timed out: a case ran past --timeout 0.001s")


def test_a_unit_that_kills_every_worker_before_a_case_starts_still_ends(monkeypatch):
    """Each worker dies before it starts a case: every case becomes an ERROR, one per
    dead worker, and the run ends (it does not hand the same unit out for ever)."""
    import kvfault.faults.campaign.pool as pool

    class Dies:
        def __init__(self, **kwargs):
            os._exit(3)

    def too_long(*_):
        raise TimeoutError("the pool went round for 120 s")

    monkeypatch.setattr(pool, "CaseRunner", Dies)
    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(120)
    try:
        targets = [scenario_target("two_servers"), scenario_target("two_images")]
        result = run_pooled(targets, [0, 1], 2)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert [c.verdict for c in result.cases] == ["ERROR"] * 4
    assert all("it exited with 3" in c.signature for c in result.cases)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(stat[1]) == pid and stat[0] != "Z":
            out.append(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_workers_whose_command_was_killed_exit_after_their_case(tmp_path):
    """SIGKILL leaves the command no chance to stop its workers: each ends once its
    case is done and it finds the command's end of the pipe closed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "-j", "2", "--seeds", "2", "--no-progress"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while len(workers) < 2 and time.monotonic() < deadline:
        workers = _children(proc.pid)
        time.sleep(0.05)
    assert len(workers) == 2
    proc.kill()
    proc.wait()
    try:
        while any(_alive(w) for w in workers):
            assert time.monotonic() < deadline, "a worker outlived its command"
            time.sleep(0.1)
    finally:
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_one_unit_of_work_runs_in_this_process_whatever_j_says(tmp_path):
    # In this process, a case past --timeout ends the run at once (a campaign failure
    # after the rows that ran); a worker's would leave an ERROR row and run the rest.
    proc = kvfault(
        "run", "-j", "2", "--seeds", "1", "--scenario", "restart_burst", "--timeout", "0.001",
        "--no-progress", "--artifacts", "arts", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ended the run: 0 of 1 cases never ran" in proc.stdout
    assert "1 targets, 1 runs: 0 ok, 1 failed, 1 campaign failure (ERROR)" in proc.stdout
    assert proc.stderr.startswith("kvfault: error: timed out: a case ran past --timeout")


def test_progress_counts_the_cases_done_as_each_starts():
    events: list[tuple] = []
    targets = [scenario_target("two_servers"), scenario_target("two_images"),
               regression_target("media_keys")]  # fmt: skip

    class Artifacts:
        directory = None

        def before(self, case):
            return None

        def after(self, case, outcome, token):
            events.append(("done", case.id))

        def abandon(self, token):
            events.append(("abandoned", token))

    run_pooled(
        targets, [0, 1], 2, artifacts=Artifacts(),
        progress=lambda i, n, label: events.append(("progress", i, n, label)),
    )  # fmt: skip
    done = 0
    for ev in events:
        if ev[0] == "done":
            done += 1
        else:
            assert ev[1:3] == (done, 6), events  # the cases done by then, of 6
    assert events[-1][:3] == ("progress", 6, 6) and done == 6
    started = [ev[3] for ev in events[:-1] if ev[0] == "progress"]
    assert sorted(started) == sorted(f"{t.id}@seed{s}" for t in targets for s in (0, 1))


def test_a_budget_starts_no_seed_once_spent_and_runs_a_started_seed_whole():
    ticks = count()  # every look at the clock is one second later
    # Three units per seed (three scenarios); the clock is read before a seed starts.
    targets = [scenario_target("two_servers"), fault_target("port_zero_ids"),
               regression_target("media_keys")]  # fmt: skip
    result = run_pooled(targets, range(10, 20), 2, budget_s=2.5, clock=lambda: float(next(ticks)))
    # clock 0 at the start; seed 10 runs unasked, 11 at 1 s, 12 at 2 s, none at 3 s
    assert seeds_ran(result) == [10, 11, 12]
    assert [t.seeds for t in result.targets] == [[10, 11, 12]] * 3  # every seed whole
    assert result.ok


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-j", "0"], "argument -j/--jobs: wants a number of processes (1: this one alone) or 'auto', got '0'"),
        (["-j", "x"], "got 'x'"),
        (["--jobs", "-1"], "got '-1'"),
        (["-j", "1.5"], "got '1.5'"),
        (["-j", "2", "-n", "2"], "give -j (processes here) or -n/--tx (pytest-xdist workers), not both"),
        (["-j", "2", "--tx", "popen"], "not both"),
        (["-j", "2", "--tier", "lmcache"], "--tier lmcache runs in one process"),
    ],
)  # fmt: skip
def test_a_bad_jobs_value_is_one_line_and_exit_2(capsys, args, needle):
    try:
        code = cli.main(["run", *args])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvfault: error: ") and needle in lines[0]


# -- outcomes that cannot travel back ------------------------------------------------------


def test_a_failing_stack_that_stops_comes_back_from_a_worker_as_in_one_process(
    tmp_path, capsys, monkeypatch
):
    """A fixed stack that stops where its row says it finishes: the failing case keeps
    its runs (for the timeline), whose stop is a ``LoadNotTerminal``; they come back
    from the worker, and the table is the one of a single process."""
    import dataclasses

    from kvfault.faults.injectors import INJECTORS
    from kvfault.faults.runs import finishes

    info = INJECTORS["lost_completion"]
    monkeypatch.setitem(INJECTORS, "lost_completion", dataclasses.replace(info, expect=finishes()))
    monkeypatch.chdir(tmp_path)
    args = ["run", "--seeds", "2", "--fault", "lost_completion", "--scenario", "two_images",
            "--no-progress"]  # fmt: skip
    out = {}
    for jobs in ("1", "2"):
        assert cli.main([*args, "-j", jobs, "--artifacts", f"arts{jobs}"]) == 1
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        out[jobs] = captured.out.replace(f"arts{jobs}", "arts")
    assert rows(out["2"]) == rows(out["1"])
    assert "FAIL fault:lost_completion@seed0:" in out["1"] and "LoadNotTerminal" in out["1"]


def _refuse(why: str) -> None:
    raise TypeError(why)


class _WontLoad:
    """Pickles, but cannot be unpickled (as an error whose __init__ pickle cannot call)."""

    def __reduce__(self):
        return (_refuse, ("__init__() missing 2 required positional arguments",))


class _WontDump:
    """Cannot be pickled at all (as a run holding a lock or a socket)."""

    def __reduce__(self):
        raise TypeError("cannot pickle '_thread.lock' object")


@pytest.mark.parametrize("spoiler", [_WontLoad, _WontDump], ids=["unloadable", "unpicklable"])
def test_an_outcome_that_cannot_come_back_is_an_error_row_with_its_artifact(
    tmp_path, capsys, monkeypatch, spoiler
):
    """Unpickling it in this process fails (the parent's side) or pickling it in the
    worker does (the worker's side): either way that case is an ERROR row saying why,
    its artifact is kept, the rest of the campaign is judged, and no traceback."""
    import kvfault.faults.campaign.pool as pool

    class Spoiled(pool.CaseRunner):
        def run(self, case):
            out = super().run(case)
            if case.target.name == "two_servers":
                out.stop = spoiler()  # plain data no longer
            return out

    monkeypatch.setattr(pool, "CaseRunner", Spoiled)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--seeds", "1", "--scenario", "two_servers", "--scenario",
                     "two_images", "-j", "2", "--artifacts", "arts", "--no-progress"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert "Traceback" not in captured.err + captured.out
    assert re.search(
        r"\nERROR scenario:two_servers@seed0: its outcome could not be sent back from the "
        r"worker \(TypeError: .*\)", captured.out
    ), captured.out  # fmt: skip
    assert re.search(r"^scenario +two_images .* PASS ", captured.out, re.M), captured.out
    assert sorted(p.name for p in Path("arts").iterdir()) == ["scenario-two_servers-seed0.json"]


def test_runs_that_cannot_come_back_are_dropped_and_the_verdict_kept(monkeypatch):
    """A failing case's runs (kept for its timeline) that do not survive the trip: the
    outcome comes back without them, with its own verdict and signature."""
    import kvfault.faults.campaign.pool as pool

    class Spoiled(pool.CaseRunner):
        def run(self, case):
            out = super().run(case)
            out.verdict, out.signature = "FAIL", "planted: a failing case"
            out.fixed_result = _WontLoad()
            return out

    monkeypatch.setattr(pool, "CaseRunner", Spoiled)
    result = run_pooled([scenario_target("two_servers"), scenario_target("two_images")], [0], 2)
    assert [(c.verdict, c.signature, c.fixed_result) for c in result.cases] == [
        ("FAIL", "planted: a failing case", None)
    ] * 2
