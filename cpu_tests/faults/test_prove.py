"""Tests for `kvfault prove` (faults/prove.py) against throwaway git repositories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from process_group import group_killed_at_exit, wait_until

from kvfault.faults import prove as prove_mod
from kvfault.faults.processes import Interrupted
from kvfault.faults.prove import (
    ProofResult,
    ProveError,
    SideRun,
    Verdict,
    decide,
    main,
    prove,
    side_worktrees,
)

ROOT = Path(__file__).resolve().parents[2]

BROKEN = '#!/bin/sh\necho "checking keys"\necho "KeyError: media key missing" >&2\nexit 1\n'
FIXED = '#!/bin/sh\necho "checking keys"\necho "all good"\nexit 0\n'


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def worktrees(repo: Path) -> list[str]:
    return [
        line
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user git config leaks in; temp dirs land where the test can inspect them."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Two commits: `broken` (check.sh exits 1 with a KeyError) and `fixed` (exits 0)."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "check.sh").write_text(BROKEN)
    (r / "check.sh").chmod(0o755)
    (r / "notes.txt").write_text("v1\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "broken")
    git(r, "tag", "broken")
    (r / "check.sh").write_text(FIXED)
    git(r, "commit", "-q", "-am", "fixed")
    git(r, "tag", "fixed")
    return r


def cli(repo: Path, *args: str) -> int:
    return main(["-C", str(repo), *args])


def broken_to_fixed(repo: Path, *args: str) -> int:
    """``kvfault prove --old broken --new fixed ARGS`` in ``repo``."""
    return cli(repo, "--old", "broken", "--new", "fixed", *args)


def module_argv(repo: Path, *args: str) -> list[str]:
    """``python -m kvfault.faults.prove -C REPO ARGS``: the proof in a process of its own."""
    return [sys.executable, "-m", "kvfault.faults.prove", "-C", str(repo), *args]


def verdict_line(out: str) -> str:
    return out.rstrip().splitlines()[-1]


def assert_clean(repo: Path, tmp: Path) -> None:
    assert len(worktrees(repo)) == 1, worktrees(repo)
    assert list(tmp.iterdir()) == []


# ------------------------------------------------------------------- decide()


def side(rc: int | None, matched: bool | None = None, error: str | None = None) -> SideRun:
    return SideRun(
        rev="r", sha="0" * 40, returncode=rc, seconds=0.1, tail="", matched=matched, error=error
    )


@pytest.mark.parametrize(
    ("old", "new", "verdict", "in_reason"),
    [
        ([side(1)], [side(0)], Verdict.FIXED, "old fails (exit 1)"),
        ([side(1, True)], [side(0, False)], Verdict.FIXED, "matches --expect"),
        ([side(1, False)], [side(0)], Verdict.NOT_REPRODUCED, "does not match --expect"),
        ([side(0)], [side(0)], Verdict.NOT_REPRODUCED, "old passes"),
        ([side(1)], [side(3)], Verdict.STILL_FAILING, "new fails (exit 3)"),
        # Exit 2: the side could not run the code under test, never a failing side.
        ([side(2)], [side(0)], Verdict.COULD_NOT_JUDGE, "old (r @ 000000000000) exited 2"),
        ([side(1)], [side(2)], Verdict.COULD_NOT_JUDGE, "new (r @"),
        ([side(0)], [side(1)], Verdict.STILL_FAILING, "regressed"),
        ([side(None, error="timed out after 1 s")], [], Verdict.ERROR, "timed out"),
        ([side(1)], [side(0), side(None, error="command not found: x")], Verdict.ERROR, "new"),
        ([side(1), side(0), side(1)], [side(0)] * 3, Verdict.FLAKY, "old disagrees"),
        ([side(1, True), side(1, False)], [side(0)], Verdict.FLAKY, "old"),
        ([side(1)] * 2, [side(0), side(3)], Verdict.FLAKY, "new disagrees"),
        ([side(1), side(3)], [side(0)], Verdict.FLAKY, "old: 1x exit 1, 1x exit 3"),
        (
            [side(1, True), side(1, True)],
            [side(0, True), side(0, False)],
            Verdict.FIXED,
            "matches --expect",
        ),  # a passing run's match is not part of its outcome
        ([side(0), side(1)], [side(0), side(1)], Verdict.FLAKY, "old and new"),
        ([], [side(0)], Verdict.ERROR, "no runs"),
    ],
)
def test_decide(old: list[SideRun], new: list[SideRun], verdict: Verdict, in_reason: str) -> None:
    got, reason = decide(old, new)
    assert got is verdict
    assert in_reason in reason


def test_exit_codes() -> None:
    proof_verdicts = {
        Verdict(v) for v in ("FIXED", "STILL FAILING", "NOT REPRODUCED", "FLAKY", "ERROR")
    }
    codes = {v: ProofResult(v, [], [], "").exit_code for v in proof_verdicts}
    assert codes == {
        Verdict.FIXED: 0,
        Verdict.STILL_FAILING: 1,
        Verdict.NOT_REPRODUCED: 2,
        Verdict.FLAKY: 2,
        Verdict.ERROR: 2,
    }


# ------------------------------------------------------------------ verdicts


def test_fixed(repo: Path, isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert broken_to_fixed(repo, "--", "sh", "check.sh") == 0
    out = capsys.readouterr().out
    assert verdict_line(out).startswith("FIXED: old fails (exit 1)")
    # Both tails, in order, with stderr interleaved.
    assert out.index("KeyError: media key missing") < out.index("all good")
    assert "exec, no shell" in out
    assert_clean(repo, isolated)


def test_a_revision_by_commit_message_is_a_revision(repo: Path, capsys) -> None:
    assert cli(repo, "--old", ":/broken", "--new", ":/fixed", "--", "sh", "check.sh") == 0
    assert verdict_line(capsys.readouterr().out).startswith("FIXED: old fails (exit 1)")


def test_timeout_zero_is_none_as_in_every_command(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert broken_to_fixed(repo, "--timeout", "0", "--", "sh", "check.sh") == 0
    assert verdict_line(capsys.readouterr().out).startswith("FIXED: old fails (exit 1)")


def test_still_failing(repo: Path, isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(repo, "--old", "broken", "--new", "broken", "--", "sh", "check.sh") == 1
    assert verdict_line(capsys.readouterr().out).startswith("STILL FAILING: new fails (exit 1)")
    assert_clean(repo, isolated)


def test_not_reproduced(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(repo, "--old", "fixed", "--new", "fixed", "--", "sh", "check.sh") == 2
    assert verdict_line(capsys.readouterr().out).startswith("NOT REPRODUCED: old passes")


def test_expect_matches(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        broken_to_fixed(
            repo,
            "--expect",
            r"KeyError: media \w+",
            "--",
            "sh",
            "check.sh",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "output matches --expect" in out
    assert verdict_line(out).startswith("FIXED:")


def test_expect_does_not_match(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Old fails, but for another reason than the one the reviewer expects.
    assert (
        broken_to_fixed(
            repo,
            "--expect",
            "TimeoutError",
            "--",
            "sh",
            "check.sh",
        )
        == 2
    )
    line = verdict_line(capsys.readouterr().out)
    assert line.startswith("NOT REPRODUCED: old fails (exit 1) but its output does not match")


def test_shell_mode_single_string(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert broken_to_fixed(repo, "--", "./check.sh && echo shell-ran-the-and") == 0
    out = capsys.readouterr().out
    assert "via /bin/sh -c" in out
    assert "shell-ran-the-and" in out


def test_error_command_not_found(
    repo: Path, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert broken_to_fixed(repo, "--", "no-such-command-kvfault", "x") == 2
    line = verdict_line(capsys.readouterr().out)
    assert line.startswith("ERROR: old (broken @ ")
    assert "command not found: no-such-command-kvfault" in line
    assert_clean(repo, isolated)


def test_error_command_not_found_in_shell(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert broken_to_fixed(repo, "--", "no-such-command-kvfault") == 2
    assert "command not found (exit 127" in verdict_line(capsys.readouterr().out)


def test_error_timeout_kills_command(
    repo: Path, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.monotonic()
    assert broken_to_fixed(repo, "--timeout", "0.3", "--", "sleep", "20") == 2
    assert time.monotonic() - start < 5
    line = verdict_line(capsys.readouterr().out)
    assert line.startswith("ERROR: old") and "timed out after 0.3 s" in line
    assert_clean(repo, isolated)


# --------------------------------------------------------------------- repeat

# Counts its calls in a file outside the worktrees; fails on the calls whose parity is
# FLIP_PARITY on the side named by FLIP_SIDE, otherwise behaves like check.sh.
FLAKY_CMD = (
    'n=$(cat "$COUNTER" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$COUNTER"; '
    'if [ "$KVFAULT_PROVE_SIDE" = "$FLIP_SIDE" ] && [ $((n % 2)) = 0 ]; then '
    'echo "flipped on call $n"; [ "$FLIP_SIDE" = new ] && exit 1 || exit 0; fi; '
    "sh check.sh"
)


@pytest.mark.parametrize("flaky_side", ["old", "new"])
def test_repeat_flaky_side(
    repo: Path,
    tmp_path: Path,
    isolated: Path,
    flaky_side: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COUNTER", str(tmp_path / "counter"))
    monkeypatch.setenv("FLIP_SIDE", flaky_side)
    assert broken_to_fixed(repo, "--repeat", "3", "--", FLAKY_CMD) == 2
    out = capsys.readouterr().out
    line = verdict_line(out)
    assert line.startswith(f"FLAKY: {flaky_side} disagrees with itself"), line
    other = "new" if flaky_side == "old" else "old"
    assert f"{other}:" not in line
    assert (tmp_path / "counter").read_text().strip() == "6"  # 3 runs per side
    assert "flipped on call" in out  # the odd run's tail is shown too
    assert_clean(repo, isolated)


def test_repeat_consistent_gives_verdict(repo: Path) -> None:
    result = prove(repo, "broken", "fixed", ["sh", "check.sh"], repeat=3)
    assert result.verdict is Verdict.FIXED
    assert [r.returncode for r in result.old] == [1, 1, 1]
    assert [r.returncode for r in result.new] == [0, 0, 0]
    assert result.old_sha == git(repo, "rev-parse", "broken^{commit}").strip()
    assert all(r.sha == result.new_sha for r in result.new)
    assert all(r.seconds >= 0 for r in result.old + result.new)
    assert "KeyError" in result.old[0].tail and "all good" in result.new[0].tail


def test_tail_keeps_last_lines(repo: Path) -> None:
    result = prove(repo, "broken", "fixed", ["seq 1 100; sh check.sh"], tail_lines=5)
    assert (
        result.new[0].tail.splitlines()
        == ["97", "98", "99", "100", "checking keys", "all good"][-5:]
    )


# Output with every kind of line end, and UTF-8 that a block boundary can split.
_OUTPUT = st.lists(
    st.sampled_from([b"\n", b"\r\n", b"\r", b"a", b"bc", "\u00e9\u2028\x85".encode(), b"\xff"]),
    max_size=60,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=_OUTPUT, lines=st.integers(0, 8), block=st.integers(1, 9))
def test_tail_reads_the_end_as_splitlines_would(data: bytes, lines: int, block: int) -> None:
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(prove_mod, "_TAIL_BLOCK", block)
            got = prove_mod._tail(Path(f.name), lines)
    text = data.decode("utf-8", errors="replace")
    assert got == ("\n".join(text.splitlines()[-lines:]) if lines else "")


def test_tail_reads_at_most_its_bound_from_the_end(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"x" * 5000 + b"\nlast\n")
    assert prove_mod._tail(log, 3, max_bytes=100) == "..." + "x" * 94 + "\nlast"
    # A line that starts exactly at the bound is whole: no mark.
    log.write_bytes(b"x" * 5000 + b"\n" + b"y" * 95 + b"\nlast\n")
    assert prove_mod._tail(log, 3, max_bytes=101) == "y" * 95 + "\nlast"


# -------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--old", "broken", "--new", "fixed", "sh", "check.sh"], "missing '--'"),
        (["--old", "broken", "--new", "fixed", "--"], "missing command"),
        (["--old", "broken", "--new", "fixed"], "missing command"),
        (["--old", "broken", "--", "true"], "--old REV and --new REV are required"),
        (
            ["--old", "nope-not-a-rev", "--new", "fixed", "--", "true"],
            "unknown --old revision: 'nope-not-a-rev'",
        ),
        (["--old", "broken", "--new", "deadbeef" * 5, "--", "true"], "unknown --new"),
        (
            ["--old", "broken", "--new", "fixed", "--repeat", "0", "--", "true"],
            "--repeat must be at least 1",
        ),
        (
            ["--old", "broken", "--new", "fixed", "--expect", "(unclosed", "--", "true"],
            "invalid --expect regex",
        ),
        (
            ["--old", "broken", "--new", "fixed", "--expect", "x{99999999999}", "--", "true"],
            "invalid --expect regex",
        ),
        (
            ["--old", "broken", "--new", "fixed", "--timeout", "-1", "--", "true"],
            "--timeout (seconds, 0: none) must be at least 0",
        ),
        (
            ["--old", "broken", "--new", "fixed", "--repeat", "x", "--", "true"],
            "wants a whole number",
        ),
    ],
)
def test_bad_arguments_one_line(
    repo: Path, isolated: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        rc = cli(repo, *args)
    except SystemExit as exc:  # argparse's own errors (bad int) exit from parse_args
        rc = exc.code
    assert rc == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("kvfault prove: error: ")
    assert message in lines[0]
    assert_clean(repo, isolated)


def test_not_a_git_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["-C", str(plain), "--old", "a", "--new", "b", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"kvfault prove: error: not a git repository: {plain}"]


def test_module_entry_point_no_traceback(repo: Path) -> None:
    proc = subprocess.run(
        module_argv(repo, "--old", "nope", "--new", "fixed", "--", "true"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"kvfault prove: error: unknown --old revision: 'nope' is not a commit in {repo}"
    ]


# ----------------------------------------------------- cleanup and isolation


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


# The command ends only once its daemon has recorded its pid: otherwise the proof
# may stop the daemon before it writes, and the test would count one side short.
DAEMON = r"""
import os, sys, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()  # a session of its own: out of the command's process group
    if os.fork() == 0:
        with open(sys.argv[1], "a") as f:
            f.write(f"{os.getpid()}\n")
        os.write(w, b"+")
        time.sleep(60)
    os._exit(0)
os.close(w)
os.read(r, 1)  # bounded: the daemon writes, or dies and closes its end
sys.exit(0)
"""


def test_a_daemon_the_command_detaches_does_not_outlive_the_proof(
    repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "daemon.py").write_text(DAEMON)
    pidfile = tmp_path / "daemon.pid"
    proc = subprocess.run(
        module_argv(repo, "--old", "broken", "--new", "fixed", "--repeat", "1", "--",
                    sys.executable, str(tmp_path / "daemon.py"), str(pidfile)),
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr  # both sides pass: NOT REPRODUCED
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2  # one per side
    deadline = time.monotonic() + 30  # SIGTERM lands asynchronously; bounded
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if _alive(p)] == [], "daemons outlived the proof"


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_removes_worktrees(
    repo: Path, tmp_path: Path, isolated: Path, signum: int, code: int
) -> None:
    pidfile = tmp_path / "cmd.pid"
    proc = subprocess.Popen(
        module_argv(
            repo,
            "--old",
            "broken",
            "--new",
            "fixed",
            "--",
            "sh",
            "-c",
            f'echo $$ > "{pidfile}"; exec sleep 60',
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "CMD never started"
            time.sleep(0.02)
        cmd_pid = int(pidfile.read_text())
        assert len(worktrees(repo)) == 3  # main + old + new while CMD runs
        assert len(list(isolated.iterdir())) == 1
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert "interrupted" in err and "Traceback" not in err
    assert out == ""
    assert_clean(repo, isolated)
    deadline = time.monotonic() + 5
    while _alive(cmd_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(cmd_pid), "CMD outlived the interrupted proof"


def _snapshot(repo: Path) -> dict[str, object]:
    files = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }
    return {
        "files": files,
        "index": (repo / ".git" / "index").read_bytes(),
        "HEAD": (repo / ".git" / "HEAD").read_bytes(),
        "refs": git(repo, "show-ref"),
        "stash": git(repo, "stash", "list"),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
    }


def test_dirty_working_tree_untouched(
    repo: Path, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "check.sh").write_text("#!/bin/sh\necho DIRTY-EDIT\nexit 3\n")  # modified
    (repo / "notes.txt").write_text("v2 staged\n")
    git(repo, "add", "notes.txt")  # staged
    (repo / "notes.txt").write_text("v3 unstaged on top\n")
    (repo / "scratch.txt").write_bytes(b"untracked \x00\xff bytes\n")  # untracked
    (repo / "sub").mkdir()
    (repo / "sub" / "new.py").write_text("print('untracked dir')\n")
    before = _snapshot(repo)
    status = str(before["status"]).splitlines()
    assert {"MM notes.txt", " M check.sh", "?? scratch.txt", "?? sub/new.py"} <= set(status)
    assert broken_to_fixed(repo, "--", "sh", "check.sh") == 0
    out = capsys.readouterr().out
    assert "DIRTY-EDIT" not in out  # the proof ran the committed heads, not the edit
    assert _snapshot(repo) == before
    assert_clean(repo, isolated)


def test_cmd_sees_worktree_not_users_repo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A GIT_DIR pointing at the user's repository must not leak into CMD.
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    script = (
        "git rev-parse HEAD; pwd; "
        'test "$(git rev-parse HEAD)" = "$KVFAULT_PROVE_SHA" || exit 9; sh check.sh'
    )
    result = prove(repo, "broken", "fixed", [script])
    assert result.verdict is Verdict.FIXED, result.reason
    assert result.old[0].tail.splitlines()[0] == result.old_sha
    assert result.new[0].tail.splitlines()[0] == result.new_sha
    assert str(repo) not in result.old[0].tail.splitlines()[1]


def test_argparse_keeps_double_dash() -> None:
    # `run` relies on argparse keeping '--' in REMAINDER to tell a missing '--'; guard
    # against an argparse that changes this.
    import argparse

    parser = argparse.ArgumentParser()
    prove_mod.add_arguments(parser)
    args = parser.parse_args(["--old", "a", "--new", "b", "--", "pytest", "-x", "--", "y"])
    assert args.cmd == ["--", "pytest", "-x", "--", "y"]
    assert (args.repeat, args.timeout, args.expect, args.repo) == (1, None, None, ".")


def test_an_expect_that_backtracks_for_ever_is_an_error_not_a_hang(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import kvfault.faults.prove as prove_module

    monkeypatch.setattr(prove_module, "EXPECT_SEARCH_S", 0.5)
    rc = cli(repo, "--old", "broken", "--new", "fixed", "--expect", "(a+)+$", "--",
             "sh", "-c", "printf aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab")  # fmt: skip
    assert rc == 2
    assert "took over 0.5 s to search the output" in capsys.readouterr().out


# ------------------------------------------------- issue 34: proofs that cannot be fooled


def test_exit_2_counts_as_a_failure_only_when_told(repo: Path, capsys) -> None:
    """Item 2: a side whose command exits 2 (kvfault: it could not run the code under
    test) is COULD NOT JUDGE, never the failing old side of a FIXED; `--unjudged-exits
    none` gives exit 2 back to commands (make) whose 2 is a failure."""
    script = 'test "$KVFAULT_PROVE_SIDE" = old && { echo "cannot import ATOM"; exit 2; }; exit 0'
    assert broken_to_fixed(repo, "--", script) == 2
    last = verdict_line(capsys.readouterr().out)
    assert last.startswith("COULD NOT JUDGE: old (broken @ "), last
    assert "cannot import ATOM" in last
    assert broken_to_fixed(repo, "--unjudged-exits", "none", "--", script) == 0
    assert verdict_line(capsys.readouterr().out).startswith("FIXED")


def test_each_side_engine_checkout_is_its_worktree_whatever_the_env_says(
    repo: Path, monkeypatch, capsys
) -> None:
    """Item 1: an exported KVFAULT_ATOM_SRC does not reach the sides: each side's is its
    own worktree, and the output names it by side and commit, never by a removed path."""
    monkeypatch.setenv("KVFAULT_ATOM_SRC", "/somewhere/else")
    script = 'echo "src=$KVFAULT_ATOM_SRC"; test "$KVFAULT_ATOM_SRC" = "$PWD" || exit 1; echo "replay: --atom-src $PWD"; ./check.sh'
    assert broken_to_fixed(repo, "--", script) == 0
    out = capsys.readouterr().out
    assert "/somewhere/else" not in out
    assert "src=<old worktree>" in out and "replay: --atom-src <new worktree>" in out
    assert "note:    <old worktree> is old's checkout, removed after the proof" in out
    assert "kvfault-prove-" not in out  # no path into the removed worktrees


def test_same_commit_dirty_tree_and_shallow_clone_each_get_one_line(
    repo: Path, tmp_path: Path, capsys
) -> None:
    """Item 13."""
    (repo / "notes.txt").write_text("edited\n")
    assert cli(repo, "--old", "fixed", "--new", "fixed", "--", "./check.sh") == 2
    got = capsys.readouterr()
    assert "note: old and new are the same commit" in got.err
    assert "note: the working tree has uncommitted changes" in got.err
    assert "  note:    old and new are the same commit" in got.out
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)],
                   check=True, capture_output=True)  # fmt: skip
    assert cli(shallow, "--old", "HEAD~1", "--new", "HEAD", "--", "true") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "this clone is shallow" in err and "git fetch --unshallow" in err


def _artifact_paths(out: str) -> list[str]:
    return [line.split("artifact: ", 1)[1].split(" (", 1)[0] for line in out.splitlines()
            if "artifact: " in line]  # fmt: skip


def test_a_sides_artifact_line_names_a_file_that_outlives_the_proof(
    repo: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """A side's `artifact:` line (kvfault repro's, run in the side's worktree) names a file
    the reviewer can open after the proof: with --artifacts DIR each side's is kept there
    and named by absolute path; without it, none is named by a path that is gone. An
    exported KVFAULT_ARTIFACTS does not make the two sides share one directory."""
    monkeypatch.setenv("KVFAULT_ARTIFACTS", str(tmp_path / "shared"))
    cmd = [
        sys.executable,
        "-m",
        "kvfault.faults.cli",
        "repro",
        "load_bound_without_restart",
        "--seed",
        "0",
    ]
    keep = tmp_path / "kept"
    monkeypatch.chdir(repo)  # the reviewer's place: a relative path would be read from here
    # Both sides pass (repro's FIXED is exit 0): NOT REPRODUCED; the artifacts are the point.
    assert broken_to_fixed(repo, "--artifacts", str(keep), "--", *cmd) == 2
    out = capsys.readouterr().out
    paths = _artifact_paths(out)
    assert len(paths) == 2, out
    assert {Path(p).parent for p in paths} == {keep / "old-1", keep / "new-1"}, out
    for p in paths:
        assert Path(p).is_absolute() and Path(p).is_file(), out
        assert '"kvfault_artifact": 1' in Path(p).read_text()
    assert f"replay artifacts kept in {keep}/<side>-<run>" in out
    assert not (tmp_path / "shared").exists()

    assert broken_to_fixed(repo, "--", *cmd) == 2
    out = capsys.readouterr().out
    paths = _artifact_paths(out)
    assert paths and all(p.startswith(("<old artifacts>/", "<new artifacts>/")) for p in paths), out
    assert (
        "<old artifacts> held old's replay artifacts, removed after the proof; keep them with --artifacts DIR"
        in out
    )


def test_a_kept_log_names_no_removed_worktree(tmp_path: Path) -> None:
    """review keeps each side's log with --report: a replay line in it that names the
    side's worktree (removed after the review) reads <SIDE worktree> instead."""
    wt = tmp_path / "kvfault-review-x" / "base"
    wt.mkdir(parents=True)
    log = tmp_path / "base.log"
    lines = [
        f"  replay: kvfault run --tier atom --atom-src {wt} --scenario s{i}\n" for i in range(3)
    ]
    log.write_bytes(b"".join(ln.encode() for ln in ["table\n", *lines, "\xff\n"]) + b"\xff tail\n")
    prove_mod.hide_worktree_in_file(log, wt, "base")
    text = log.read_bytes()
    assert (
        str(wt).encode() not in text and text.count(b"--atom-src <base worktree> --scenario") == 3
    )
    assert text.endswith(b"\xff tail\n")  # bytes it does not touch stay as they were
    untouched = tmp_path / "other.log"
    untouched.write_text("nothing to hide\n")
    before = untouched.stat().st_mtime_ns
    prove_mod.hide_worktree_in_file(untouched, wt, "base")
    assert untouched.stat().st_mtime_ns == before
    assert not list(tmp_path.glob("*.hiding"))


# ------------------------------------------------------------- side_worktrees()


def test_side_worktrees_are_removed_however_the_block_ends(repo: Path, isolated: Path) -> None:
    """prove's and review's one way to make their sides: each side a worktree at its
    commit for the block, all removed after an error, a stop signal, or a side that
    cannot be checked out (the ones already made too)."""
    fixed = git(repo, "rev-parse", "fixed").strip()
    broken = git(repo, "rev-parse", "broken").strip()
    with pytest.raises(RuntimeError, match="in the block"):
        with side_worktrees(repo, [("old", broken), ("new", fixed)], "kvfault-t-") as tmp:
            assert (tmp / "old" / "check.sh").read_text() == BROKEN
            assert (tmp / "new" / "check.sh").read_text() == FIXED
            assert len(worktrees(repo)) == 3
            raise RuntimeError("in the block")
    assert_clean(repo, isolated)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped:
        with side_worktrees(repo, [("old", broken)], "kvfault-t-"):
            signal.raise_signal(signal.SIGTERM)
    assert stopped.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers are given back
    assert_clean(repo, isolated)
    with pytest.raises(ProveError, match="git worktree add"):
        with side_worktrees(repo, [("old", broken), ("new", "0" * 40)], "kvfault-t-"):
            pytest.fail("the block runs only when every side is checked out")
    assert_clean(repo, isolated)


# A side that is a process tree with things to clean up, as `kvfault run` is: a temp
# directory of its own (removed by its SIGTERM/SIGINT handler, which takes a while, as
# a campaign's stopping does), a child it stops and one that ignores stop signals. It
# records its pid, its children's and its directory, then waits.
SLOW_SIDE = r"""
import os, shutil, signal, subprocess, sys, tempfile, time
scratch = tempfile.mkdtemp(prefix="kvfault-side-")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
# A server that ignores the stop signals and is left to whoever stops the group.
stubborn = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
    "[signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "print(flush=True); time.sleep(120)"], stdout=subprocess.PIPE)
stubborn.stdout.readline()  # its handlers are set
def stop(signum, _frame):
    time.sleep(2.5)  # a campaign's stopping takes a while (more than 2 s under load)
    child.terminate()
    child.wait(timeout=30)
    shutil.rmtree(scratch)
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()} {child.pid} {stubborn.pid} {scratch}\n")
time.sleep(120)
"""


def test_sigint_to_the_process_group_leaves_nothing(
    repo: Path, tmp_path: Path, isolated: Path
) -> None:
    """Ctrl-C as a terminal sends it: SIGINT to prove's whole process group (prove in a
    session of its own, as a shell's foreground job is) while a side runs. One line,
    exit 130, and nothing left: no worktree, no temp directory (prove's or the side's),
    no process."""
    (tmp_path / "side.py").write_text(SLOW_SIDE)
    pidfile = tmp_path / "side.pids"
    proc = subprocess.Popen(
        module_argv(repo, "--old", "broken", "--new", "fixed", "--",
                    sys.executable, str(tmp_path / "side.py"), str(pidfile)),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    with group_killed_at_exit(proc):
        wait_until(lambda: pidfile.exists() and pidfile.read_text().endswith("\n"),
                   proc, 60, never="the side never started")  # fmt: skip
        *words, scratch = pidfile.read_text().split()
        pids = [int(w) for w in words]  # the side, its child, its stubborn server
        assert Path(scratch).is_dir()
        assert len(worktrees(repo)) == 3  # main + old + new while the side runs
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    # The progress line, then the one line.
    said = ["kvfault prove: interrupted by SIGINT; worktrees removed"]
    assert err.splitlines()[1:] == said, err
    assert out == ""
    assert_clean(repo, isolated)  # worktrees, prove's temp dir and the side's
    assert not any(Path(w).exists() for w in worktrees(repo)[1:])
    deadline = time.monotonic() + 10  # a kill lands asynchronously; bounded
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = [p for p in pids if _alive(p)]
    for p in left:  # not to outlive the test either
        os.kill(p, signal.SIGKILL)
    assert left == [], "a side's process outlived the proof"
