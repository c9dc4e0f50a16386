"""Issue 24, item 2: SIGINT, SIGTERM and SIGHUP each end every mode (-j, -n, --tx, sweep,
prove) with one line naming the signal and 128 + signum, no process left, and no
temporary directory or worktree left behind. Real processes and real signals."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kvfault.faults.processes import STOP_SIGNALS, descendants, running

ROOT = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(r"^kvfault: \d+/\d+ cases|^kvfault prove: (old|new) .* run \d+/\d+ \.\.\.$")

MODES = {
    "j1": ["run", "-j", "1", "--seeds", "20"],
    "j2": ["run", "-j", "2", "--seeds", "20"],
    "n2": ["run", "-n", "2", "--seeds", "20"],
    "tx": ["run", "--tx", "2*popen", "--seeds", "20"],
    "sweep": ["sweep", "--hashseeds", "0-3", "--", "-q", "-p", "no:cacheprovider", "test_slow.py"],
    "sweep_j": ["sweep", "--hashseeds", "0-3", "-j", "2", "--", "-q", "test_slow.py"],
    # Each seed's pytest runs its own xdist workers: a stop that kills a seed's pytest
    # first orphans them, and the command must still find and stop them.
    "sweep_j_n": ["sweep", "--hashseeds", "0-3", "-j", "2", "--", "-q", "test_slow.py", "-n", "2"],
    "prove": ["prove", "--old", "HEAD~1", "--new", "HEAD", "--", "sleep 120"],
}
# How many descendants show the mode is under way (workers started, a child running).
READY = {"j1": 0, "j2": 2, "n2": 2, "tx": 2, "sweep": 1, "sweep_j": 2, "sweep_j_n": 8, "prove": 1}


@pytest.fixture
def short_tmpdir():
    # The campaign's ipc sockets need a short temp dir (lookup_channel.rpc_base_budget).
    d = tempfile.mkdtemp(prefix="kvs", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _repo(at: Path) -> None:
    at.mkdir()
    subprocess.run(["git", "init", "-q", str(at)], check=True, capture_output=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(at)]
    for i in range(2):
        (at / "f").write_text(str(i))
        subprocess.run([*git, "add", "f"], check=True, capture_output=True)
        subprocess.run([*git, "commit", "-qm", f"c{i}"], check=True, capture_output=True)


def _describe(base: Path, names: list[str], kids: list[int]) -> list[str]:
    # What a leftover is and who made it, so that a failure says which process leaked.
    out = []
    for n in names:
        path = base / n
        owner = path / ".owner"
        made_by = owner.read_text() if owner.is_file() else "no .owner"
        inside = sorted(os.listdir(path)) if path.is_dir() else "not a directory"
        out.append(f"{n}: made by {made_by} (the command's processes: {kids}); holds {inside}")
    return out


def _in_group(pgid: int, zombies: bool = False) -> list[str]:
    """The live processes of process group ``pgid`` (Linux: from /proc), with their
    command lines: whatever outlived the command, to say what it was."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) == pgid and (zombies or stat[0] != "Z"):
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                what = cmd.decode(errors="replace")[:200]
                out.append(f"{entry} ({stat[0]}, parent {stat[1]}): {what}")
        except (OSError, IndexError, ValueError):
            continue
    return out


def _worktrees(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ln for ln in out.splitlines() if ln.startswith("worktree ")]


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("mode", list(MODES))
def test_a_signal_ends_every_mode_in_one_line_leaving_nothing(
    tmp_path, short_tmpdir, mode, signame
):
    signum = getattr(signal, signame)
    work = tmp_path / "work"
    if mode == "prove":
        _repo(work)
    else:
        work.mkdir()
        (work / "test_slow.py").write_text("import time\ndef test_slow():\n    time.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(short_tmpdir)}
    env.pop("PYTHONHASHSEED", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvfault.faults.cli", *MODES[mode]],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            # Workers (or the child) are up and, for a campaign, cases are running.
            campaign_started = MODES[mode][0] != "run" or any(PROGRESS.match(ln) for ln in err)
            if len(descendants(proc.pid)) >= READY[mode] and campaign_started:
                break
            time.sleep(0.1)
        time.sleep(1.0)  # well into the work
        assert proc.poll() is None, "".join(err)
        kids = descendants(proc.pid)
        os.kill(proc.pid, signum)
        proc.wait(timeout=90)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = [ln.rstrip("\n") for ln in err if not PROGRESS.match(ln)]
    prog = "kvfault prove" if mode == "prove" else "kvfault"
    tail = "; worktrees removed" if mode == "prove" else ""
    assert lines == [f"{prog}: interrupted by {signame}{tail}"], "".join(err)
    assert proc.returncode == 128 + signum
    if MODES[mode][0] == "run":  # nothing lost: what had finished is in the table
        out = proc.stdout.read() if proc.stdout else ""
        said = rf"^ERROR: interrupted by {signame}: \d+ of 820 cases never ran$"
        assert re.search(said, out, re.MULTILINE), out
    time.sleep(0.2)
    left = [p for p in kids + descendants(proc.pid) if running(p)]
    assert left == [], f"processes left: {left}"
    assert _in_group(proc.pid) == [], "processes left in the command's group"
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
        raise AssertionError(f"left in the group: {_in_group(proc.pid, zombies=True)}")
    # pytest-of-USER is pytest's own per-user base, kept by design across runs: only the
    # user's own tests under `kvfault sweep` make one (the campaign's workers do not).
    sweeps = mode.startswith("sweep")
    left_files = [
        n for n in os.listdir(short_tmpdir) if not (sweeps and n.startswith("pytest-of-"))
    ]
    assert left_files == [], f"temporary files left: {_describe(short_tmpdir, left_files, kids)}"
    if mode == "prove":
        assert len(_worktrees(work)) == 1, _worktrees(work)
    # An interrupted case has no verdict: the campaign leaves no artifact of its own.
    # (Not asserted over xdist: a worker the interrupt kills outright cannot undo its
    # staging, so -n/--tx may leave the cases their workers were running.)
    if mode in ("j1", "j2"):
        assert list(work.glob(".kvfault/artifacts/*.json")) == []


def test_a_run_removes_the_ipc_directory_of_a_worker_killed_before_it_could(short_tmpdir):
    # The stop's SIGKILL after its grace, or a hang guard's exit, ends a worker between
    # making its private ipc directory and removing it; the command removes it at its end.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(short_tmpdir)}
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from kvfault.reference.stack.lookup_channel import private_rpc_dir;"
            "print(private_rpc_dir(), flush=True); os._exit(9)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    orphan = Path(made.stdout.strip())
    assert made.returncode == 9 and orphan.is_dir() and orphan.parent == short_tmpdir
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvfault.faults.cli",
            "run",
            "--scenario",
            "two_servers",
            "--seeds",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=short_tmpdir,
    )
    assert run.returncode == 0, run.stderr
    assert not orphan.exists()
    assert [n for n in os.listdir(short_tmpdir) if n.startswith("kvfault-rpc-")] == []


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_that_comes_while_the_command_starts_is_its_one_line(signame, tmp_path):
    """``kvfault``'s entry (and a re-exec under a known hash seed) starts with the stop
    signals blocked; ``main`` installs its handlers and then unblocks them. A signal
    sent at once, before any of kvfault's code ran, waits for the handlers: one line,
    128 + signum, never a traceback from the middle of an import."""
    signum = getattr(signal, signame)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONHASHSEED", None)  # so it re-execs too
    stops = set(STOP_SIGNALS)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # the child starts with them held
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from kvfault.faults.entry import main; sys.exit(main())",
             "run", "--scenario", "two_images", "--no-progress"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (128 + signum, f"kvfault: interrupted by {signame}\n")


def test_a_stop_during_the_last_cleanup_is_still_one_line(monkeypatch, capsys):
    """The command is done and removes orphaned ipc directories when the signal comes:
    the stop still ends it with its one line and 128 + signum (not a traceback, not 0)."""
    from kvfault.faults import cli
    from kvfault.faults.processes import Interrupted
    from kvfault.reference.stack import lookup_channel

    def interrupted(**_: object) -> None:
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(lookup_channel, "remove_orphan_rpc_dirs", interrupted)
    assert cli.main(["list", "--faults"]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "kvfault: interrupted by SIGTERM\n"


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("program", [True, False])
def test_a_stop_after_the_command_ended_leaves_its_exit_status(signame, program, tmp_path):
    """The command is done and its process is on its way out when the signal comes: as
    a program (the console script, ``python -m kvfault.faults.cli``) its exit status stands;
    called from Python, the caller's handlers are back and take it."""
    signum = getattr(signal, signame)
    code = (
        "import os, signal, sys\n"
        "from kvfault.faults import cli\n"
        # The caller's own handler (the default: it may have started with one ignored).
        f"signal.signal({int(signum)}, signal.SIG_DFL)\n"
        f"code = cli.main(['list', '--faults'], program={program})\n"
        f"os.kill(os.getpid(), {int(signum)})\n"
        "print('exiting with', code, flush=True)\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if program:
        assert (proc.returncode, proc.stdout.splitlines()[-1]) == (0, "exiting with 0")
    else:  # Python's own (SIGINT: KeyboardInterrupt, and then death by it) or the default
        assert proc.returncode == -signum
