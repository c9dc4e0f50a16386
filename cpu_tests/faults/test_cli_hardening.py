"""The command line under attack (issue 12, items 4, 5, 6, 8, 9, 10, 11): artifacts that
outlive a campaign, one line and exit 2 for every bad input, Ctrl-C with real signals and
real processes, timeouts, sanity limits, replay agreeing with the CLI, and the hints and
conventions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvfault.faults import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _hash_seed_unpinned(monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONHASHSEED", None)
    return env


def kvfault(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(out: subprocess.CompletedProcess | tuple[int, str], needle: str) -> None:
    code, err = (out.returncode, out.stderr) if hasattr(out, "returncode") else out
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvfault: error:"), err
    assert needle in lines[0], lines[0]
    assert "Traceback" not in err


# -- item 4: a campaign keeps the artifact `kvfault repro` wrote ---------------------------


@pytest.mark.parametrize("workers", [[], ["-n", "1"]])
def test_run_keeps_the_artifact_repro_wrote_for_the_same_case(tmp_path, workers):
    assert kvfault("repro", "media_keys", cwd=tmp_path).returncode == 0
    artifact = tmp_path / ".kvfault" / "artifacts" / "regression-media_keys-seed0.json"
    before = artifact.read_bytes()
    out = kvfault(
        "run", "--seeds", "1", "--regression", "media_keys", "--no-progress", *workers,
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert artifact.read_bytes() == before  # still there, as repro wrote it
    replay = kvfault("replay", str(artifact), cwd=tmp_path)
    assert replay.returncode == 0 and "FIXED" in replay.stdout


def test_a_green_run_still_leaves_no_artifact_of_its_own(tmp_path, capsys):
    assert cli.main(["run", "--seeds", "1", "--scenario", "two_images", "--no-progress",
                     "--artifacts", str(tmp_path / "a")]) == 0  # fmt: skip
    assert not (tmp_path / "a").exists()


# -- item 5: one line and exit 2, never a traceback ----------------------------------------


def test_a_report_path_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    one_error_line(kvfault("run", "--report", "f", cwd=tmp_path), "--report f is a file")


def test_a_report_path_that_is_a_link_to_nothing_is_refused_before_the_run(tmp_path):
    (tmp_path / "gone").symlink_to(tmp_path / "no" / "such" / "dir")
    one_error_line(kvfault("run", "--report", "gone", "-j", "2", cwd=tmp_path),
                   "--report gone: gone is a link to nothing")  # fmt: skip


@pytest.mark.skipif(not Path("/sys/kernel").is_dir() or os.geteuid() != 0,
                    reason="needs sysfs, where root's access check says writable")  # fmt: skip
def test_a_report_place_where_no_directory_can_be_made_is_refused_before_the_run(tmp_path):
    one_error_line(kvfault("run", "--report", "/sys/kernel", "-j", "2", cwd=tmp_path),
                   "cannot make a directory in /sys/kernel")  # fmt: skip


@pytest.mark.parametrize("argv", [["run", "--report", ""], ["run", "--artifacts", ""],
                                  ["replay", ""], ["repro", "media_keys", "--timeline", ""]])  # fmt: skip
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(tmp_path, argv):
    one_error_line(kvfault(*argv, cwd=tmp_path), "an empty path")
    assert list(tmp_path.iterdir()) == []


def test_an_artifacts_path_under_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    one_error_line(kvfault("run", "--artifacts", "f/a", cwd=tmp_path), "f is a file")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_repro_where_nothing_can_be_written():
    """/proc takes no new directories, not even from root: a read-only place for anyone."""
    out = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "repro", "media_keys"],
        cwd="/proc", env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    one_error_line(out, ".kvfault")


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", "not UTF-8"),
        ('{"seed": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nests JSON too deeply"),
        (b" " * (2 << 20), "bytes; an artifact is a few hundred"),
    ],
    ids=["binary", "latin-1", "deep", "huge"],
)
def test_replay_of_what_is_not_an_artifact(tmp_path, capsys, content, needle):
    path = tmp_path / "a.json"
    path.write_bytes(content)
    code = cli.main(["replay", str(path)])
    one_error_line((code, capsys.readouterr().err), needle)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--seeds", str(10**18)], "a seed count must be at most 1000000"),
        (["run", "--first-seed", str(10**18)], "a seed must be at most 4294967295"),
        (["repro", "media_keys", "--seed", str(10**18)], "a seed must be at most"),
        (["run", "--timeout", "1e400"], "--timeout (seconds, 0: none) must be at most"),
        (["run", "--timeout", "nan"], "wants a number"),
    ],
)
def test_huge_numbers(capsys, args, needle):
    assert cli.main(args) == 2  # argparse's error is said by main, as every error
    one_error_line((2, capsys.readouterr().err), needle)


def test_huge_numbers_past_argparse(capsys):
    code = cli.main(["run", "--first-seed", "4294967295", "--seeds", "2"])
    one_error_line((code, capsys.readouterr().err), "seeds go up to 4294967295")


def test_a_closed_pipe_is_no_traceback(tmp_path):
    """`kvfault list | head -1`: the reader is gone before the listing is written (the
    listing is smaller than a pipe's buffer, so it must be gone before, not after)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvfault.faults.cli", "list"],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


# -- item 6: Ctrl-C -------------------------------------------------------------------------


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _interrupt(args: list[str], cwd: Path, ready, min_children: int = 0) -> tuple[int, str]:
    """Start ``kvfault ARGS``, wait until ``ready(stderr_so_far)`` and ``min_children``
    descendants run, send SIGINT to it alone (not its group), and return its exit
    status and stderr after checking that none of its descendants outlived it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    fd = proc.stderr.fileno()
    os.set_blocking(fd, False)

    def drain() -> str:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    seen, kids = "", set()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        seen += drain()
        kids |= _descendants(proc.pid)
        if ready(seen) and len(kids) >= min_children:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"it ended before the signal: {seen}"
    kids |= _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGINT)
    code = proc.wait(timeout=120)
    seen += drain()
    t0 = time.monotonic()
    while any(_alive(k) for k in kids) and time.monotonic() - t0 < 2:
        time.sleep(0.05)
    assert [k for k in kids if _alive(k)] == [], "processes outlived the interrupted command"
    return code, seen


def _one_interrupt_line(code: int, err: str) -> None:
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == "kvfault: interrupted by SIGINT"
    assert sum("interrupted" in line for line in err.splitlines()) == 1


def test_ctrl_c_during_a_run(tmp_path):
    code, err = _interrupt(["run", "--seeds", "2"], tmp_path, lambda e: "kvfault: 0/" in e)
    _one_interrupt_line(code, err)


def test_ctrl_c_during_a_run_on_xdist_workers_leaves_no_process(tmp_path):
    """`kvfault run -n 2`: its two pytest-xdist workers run; both are gone at exit."""
    code, err = _interrupt(["run", "-n", "2", "--seeds", "2"], tmp_path, lambda e: True, 2)
    _one_interrupt_line(code, err)


def test_ctrl_c_during_a_run_on_forked_workers_leaves_no_process(tmp_path):
    """`kvfault run -j 2`: its two forked workers run cases; both are gone at exit."""
    code, err = _interrupt(
        ["run", "-j", "2", "--seeds", "2"], tmp_path, lambda e: "kvfault: 0/" in e, 2
    )
    _one_interrupt_line(code, err)


def test_ctrl_c_during_a_sweep_on_xdist_workers_leaves_no_process(tmp_path):
    test = tmp_path / "test_slow.py"
    test.write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
    code, err = _interrupt(
        ["sweep", "--hashseeds", "0-3", "-j", "2", "--", str(test), "-q", "-p", "no:cacheprovider"],
        tmp_path,
        lambda e: True,
        4,  # two workers, and a seed's pytest under each
    )
    _one_interrupt_line(code, err)


def test_ctrl_c_during_repro_and_replay(tmp_path):
    from kvfault.faults.campaign.reading import target_from_json
    from kvfault.faults.campaign.targets import Case

    artifact = tmp_path / ".kvfault" / "artifacts" / "regression-restart_all_over_fix-seed0.json"
    # The artifact is written just before the case runs: interrupt the case itself.
    code, err = _interrupt(["repro", "restart_all_over_fix"], tmp_path, lambda e: artifact.exists())
    _one_interrupt_line(code, err)
    assert not artifact.exists()  # an interrupted case has no verdict: its artifact goes
    # A replay of the same case at 16x its size runs for minutes: interrupt it too.
    from kvfault.faults.campaign.artifacts import write_artifact
    from kvfault.faults.campaign.kinds import regression_target

    obj = json.loads(write_artifact(Case(regression_target("restart_all_over_fix"), 0),
                                    artifact.parent).read_text())  # fmt: skip
    obj["target"]["scale"] = 16
    # An artifact is replayed as written: the case it names is the 16x one.
    obj["case"] = Case(target_from_json(obj["target"]), obj["seed"]).id
    big = tmp_path / "big.json"
    big.write_text(json.dumps(obj))
    t0 = time.monotonic()
    code, err = _interrupt(["replay", str(big)], tmp_path, lambda e: time.monotonic() - t0 > 3)
    _one_interrupt_line(code, err)


# -- item 8: a timeout is an ERROR -----------------------------------------------------------


def test_a_case_past_timeout_exits_2_with_one_line_and_the_stacks(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, time
        import kvfault.faults.campaign.execute
        from kvfault.faults.cli import main

        def hang(*args, **kwargs):
            time.sleep(60)

        kvfault.faults.campaign.execute.run_case = hang
        sys.exit(main(["repro", "media_keys", "--artifacts", {str(tmp_path)!r}, "--timeout", "1"]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first == (
        "kvfault: error: timed out: a case ran past --timeout 1s; every thread's stack follows"
    )
    assert "in hang" in proc.stderr


# -- item 9: sanity limits -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["sweep", "--hashseeds", "0-99999999", "--", "-q"], "more than 1000 seeds"),
        (["sweep", "--hashseeds", "0-600,700-1500", "--", "-q"], "more than 1000 seeds"),
    ],
)
def test_sweeps_that_would_run_for_days_are_refused(capsys, args, needle):
    code = cli.main(args)
    one_error_line((code, capsys.readouterr().err), needle)


def test_a_million_seeds_is_refused_without_a_budget(capsys):
    code = cli.main(["run", "--seeds", "1000000"])
    one_error_line((code, capsys.readouterr().err), "is more than 1000 seeds per target (each")


# -- item 10: replay agrees with the command line ----------------------------------------


@pytest.fixture
def artifact(tmp_path) -> Path:
    assert cli.main(["repro", "media_keys", "--artifacts", str(tmp_path)]) == 0
    return tmp_path / "regression-media_keys-seed0.json"


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("seed", -5, "'seed' must be a whole number from 0 to 4294967295, got -5"),
        ("seed", 2**40, "'seed' must be a whole number from 0"),
        ("scenario", "two_servers", "'scenario' is 'two_servers' but its target runs 'two_images'"),
        ("scenario", None, "'scenario' is None but its target runs 'two_images'"),
        (
            "case",
            "regression:media_keys@seed1",
            "'case' is 'regression:media_keys@seed1' but its target and seed make 'regression:media_keys@seed0'",
        ),
        ("pythonhashseed", "abc", "'pythonhashseed' must be null or a whole number"),
        ("pythonhashseed", 2**32, "'pythonhashseed' must be null or a whole number"),
        ("pythonhashseed", "\u00b2", "'pythonhashseed' must be null or a whole number"),
        ("pythonhashseed", "\u0663", "'pythonhashseed' must be null or a whole number"),
        ("kvfault_artifact", True, "artifact version True; this kvfault reads 1"),
        ("kvfault_artifact", 1.0, "artifact version 1.0; this kvfault reads 1"),
        ("campaign_runs", "lots", "'campaign_runs' must be a whole number above 0, got 'lots'"),
        ("campaign_runs", -3, "'campaign_runs' must be a whole number above 0, got -3"),
        ("timeout_s", 0, "'timeout_s' must be null or a number of seconds above 0"),
        ("timeout_s", True, "'timeout_s' must be null or a number of seconds above 0"),
        ("timeout_s", "5", "'timeout_s' must be null or a number of seconds above 0"),
        ("timeout_s", 1e9, "'timeout_s' must be null or a number of seconds above 0 and at most"),
        ("regression", "nope", "'regression' is 'nope' but its target runs 'media_keys'"),
        ("regression", None, "'regression' is None but its target runs 'media_keys'"),
        ("scale", -1, "unknown field 'scale'"),
        ("plan", {"x": 1}, "'plan' is not the plan its target makes"),
        ("plan", "zz", "'plan' is not the plan its target makes"),
    ],
)
def test_replay_refuses_what_the_cli_refuses(artifact, capsys, field, value, needle):
    obj = json.loads(artifact.read_text())
    obj[field] = value
    artifact.write_text(json.dumps(obj))
    capsys.readouterr()
    code = cli.main(["replay", str(artifact)])
    one_error_line((code, capsys.readouterr().err), needle)


def test_replay_refuses_a_target_field_its_target_ignores(artifact, capsys):
    obj = json.loads(artifact.read_text())
    obj["target"]["scenario"] = "two_servers"  # a regression's scenario is its own
    artifact.write_text(json.dumps(obj))
    capsys.readouterr()
    code = cli.main(["replay", str(artifact)])
    one_error_line((code, capsys.readouterr().err), "target 'scenario' is 'two_servers'")


def test_in_one_process_a_case_past_timeout_keeps_it_in_its_artifact_for_its_replay(tmp_path):
    # The replay of a case that ran past --timeout runs under the same bound (and
    # times out again), unless its own --timeout says otherwise.
    def kvfault(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kvfault.faults.cli", *args], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    ran = kvfault("run", "-j", "1", "--scenario", "restart_burst", "--timeout", "0.001",
                  "--no-progress", "--artifacts", "arts")  # fmt: skip
    assert ran.returncode == 2, ran.stdout + ran.stderr
    art = tmp_path / "arts" / "scenario-restart_burst-seed0.json"
    assert json.loads(art.read_text())["timeout_s"] == 0.001
    assert "  replay: " in ran.stdout and ran.stdout.split("  replay: ")[1].split("\n")[0].endswith(
        "--scenario restart_burst --timeout 0.001"
    ), ran.stdout
    again = kvfault("replay", str(art))
    assert again.returncode == 2, again.stdout + again.stderr
    assert again.stderr.startswith("kvfault: error: timed out: a case ran past --timeout 0.001s")
    unbounded = kvfault("replay", str(art), "--timeout", "0")
    assert unbounded.returncode == 0, unbounded.stdout + unbounded.stderr


def test_repro_past_its_timeout_records_it_for_the_replay(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "repro", "restore_deadline_from_submission",
         "--timeout", "0.01", "--artifacts", "rr"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    art = json.loads(
        (tmp_path / "rr" / "regression-restore_deadline_from_submission-seed0.json").read_text()
    )
    assert art["timeout_s"] == 0.01 and art["command"].endswith(" --timeout 0.01")


@pytest.mark.parametrize("timeout_s, typed", [(0.001, "0.001"), (600.0, "600"),
                                              (0.0001234567, "0.0001234567"), (1e-320, "1e-320")])  # fmt: skip
def test_a_replay_line_names_the_very_timeout_its_artifact_records(timeout_s, typed):
    from kvfault.faults.campaign import Case
    from kvfault.faults.campaign.artifacts import replay_command
    from kvfault.faults.campaign.kinds import scenario_target

    line = replay_command(Case(scenario_target("two_images"), 0), timeout_s)
    assert line.endswith(f" --timeout {typed}") and float(line.split()[-1]) == timeout_s


def test_a_number_too_long_to_read_is_one_line(artifact, capsys):
    artifact.write_text(artifact.read_text().replace('"seed": 0', '"seed": ' + "1" * 5000))
    capsys.readouterr()
    code = cli.main(["replay", str(artifact)])
    one_error_line((code, capsys.readouterr().err), "holds a number too long to read")


def test_a_recorded_hash_seed_with_leading_zeros_is_the_same_seed(artifact, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    obj = json.loads(artifact.read_text())
    obj["pythonhashseed"] = "000"  # seed 0, which this process runs under
    artifact.write_text(json.dumps(obj))
    capsys.readouterr()
    assert cli.main(["replay", str(artifact)]) == 0
    assert "note" not in capsys.readouterr().err


def test_a_recorded_hash_seed_is_printed_as_python_takes_it(artifact, capsys):
    obj = json.loads(artifact.read_text())
    obj["pythonhashseed"] = "7"
    artifact.write_text(json.dumps(obj))
    capsys.readouterr()
    assert cli.main(["replay", str(artifact)]) == 0
    assert f"PYTHONHASHSEED=7 kvfault replay {artifact}" in capsys.readouterr().err


@pytest.mark.parametrize("given", [" 0", "+0", "00"])
def test_a_hash_seed_python_takes_in_another_spelling_is_recorded_as_its_number(tmp_path, given):
    """Python starts with PYTHONHASHSEED=" 0" or "+0": the replay line and the artifact
    say 0, so the line works in a shell and ``replay`` takes the artifact."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": given}
    argv = [sys.executable, "-m", "kvfault.faults.cli", "run", "--legacy", "hybrid_last_chunk",
            "--scenario", "chunk_aligned_hybrid", "--seeds", "1", "--no-progress"]  # fmt: skip
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    assert "replay: PYTHONHASHSEED=0 kvfault run --legacy hybrid_last_chunk" in out.stdout
    (artifact,) = (tmp_path / ".kvfault" / "artifacts").glob("*.json")
    assert json.loads(artifact.read_text())["pythonhashseed"] in (0, "0")
    env.pop("PYTHONHASHSEED")
    again = subprocess.run([sys.executable, "-m", "kvfault.faults.cli", "replay", str(artifact)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 1 and "FAIL" in again.stdout, again.stdout + again.stderr


# -- item 11: hints and conventions ---------------------------------------------------------


def test_version_and_a_help_that_says_what_the_tool_does(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip().startswith("kvfault ")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "Fault-injection tests for KV-cache offload" in out and "``" not in out


def test_no_hint_names_a_package_index_install():
    """kvfault is not on an index: every hint is the README's command from a checkout."""
    bad = []
    for top in ("faults", "reference", "fakes", "gpu_tests", "cpu_tests", "benchmarks"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name == Path(__file__).name:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if "kvfault[" in line:
                    bad.append(f"{path.relative_to(ROOT)}:{n}")
    assert bad == []
    readme = (ROOT / "README.md").read_text()
    for command in ("pip install '.[plot]'", "pip install -c constraints/ci.txt '.[lmcache]'"):
        assert command in readme


def test_without_a_terminal_a_run_says_what_it_is_doing(tmp_path):
    # One process, so the cases start in campaign order (-j 2 starts them as workers
    # free up).
    out = kvfault("run", "-j", "1", "--seeds", "1", "--scenario", "two_images", "--scenario",
                  "chunk_aligned_hybrid", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0
    lines = out.stderr.splitlines()
    assert lines == [
        "kvfault: 0/2 cases done; running scenario:two_images@seed0",
        "kvfault: 1/2 cases done; running scenario:chunk_aligned_hybrid@seed0",
        "kvfault: 2/2 cases done; done",
    ]
    quiet = kvfault("run", "--seeds", "1", "--scenario", "two_images", "--no-progress",
                    cwd=tmp_path)  # fmt: skip
    assert quiet.stderr == ""


def test_the_table_and_the_summary_use_one_vocabulary(tmp_path, capsys):
    assert cli.main(["run", "--seeds", "1", "--regression", "media_keys", "--no-progress",
                     "--report", str(tmp_path / "rep")]) == 0  # fmt: skip
    row = next(line for line in capsys.readouterr().out.splitlines() if "media_keys" in line)
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["verdict"] in row.split()


@pytest.mark.parametrize("flag", ["-n", "--numprocesses"])
def test_zero_workers_means_none(tmp_path, capsys, flag):
    assert cli.main(["run", flag, "0", "--seeds", "1", "--scenario", "two_images",
                     "--no-progress", "--artifacts", str(tmp_path)]) == 0  # fmt: skip
    assert "1 targets, 1 runs: 1 ok" in capsys.readouterr().out


def test_sweep_with_zero_jobs_runs_in_this_process(tmp_path, capsys):
    test = tmp_path / "test_ok.py"
    test.write_text("def test_ok():\n    pass\n")
    assert cli.main(["sweep", "--hashseeds", "0", "-j", "0", "--", str(test), "-q"]) == 0


def test_the_seed_count_says_it_is_a_count_and_the_old_name_stays(tmp_path, capsys):
    for flag in ("--seed-count", "--seeds"):
        assert cli.main(["run", flag, "2", "--scenario", "two_images", "--no-progress",
                         "--artifacts", str(tmp_path)]) == 0  # fmt: skip
        assert "1 targets, 2 runs" in capsys.readouterr().out
    parser_help = cli.build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "--seed-count N, --seeds N" in parser_help and "a count" in parser_help


def test_a_swarm_row_never_says_fired_x0(capsys, tmp_path):
    assert cli.main(["run", "--swarm", "--seeds", "2", "--scenario", "two_images",
                     "--no-progress", "--artifacts", str(tmp_path)]) in (0, 1)  # fmt: skip
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("swarm"))
    assert " x0" not in row
