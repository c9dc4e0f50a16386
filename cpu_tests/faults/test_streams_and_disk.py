"""Issue 24, item 3: a closed or full stdout or stderr and a full disk end in one line
(where one can be written), the right exit code, no traceback, no temporary file left,
and the path in the message."""

from __future__ import annotations

import errno
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.faults import cli

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, cwd: Path) -> tuple[int, str, str]:
    """Run ``script``; its exit code goes to fd 3, a file, so the script's own
    redirections of 1 and 2 cannot lose it."""
    rc_file = cwd / ".rc"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONHASHSEED", None)
    # A user's shell buffers stderr (a line at a time): PYTHONUNBUFFERED would hide what
    # a full stderr's buffer does at the interpreter's last flush (exit 120).
    env.pop("PYTHONUNBUFFERED", None)
    kv = f"{sys.executable} -m kvfault.faults.cli"
    out = subprocess.run(
        ["sh", "-c", f"{re.sub(r'^kvfault ', kv + ' ', script)}; echo $? > {rc_file}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    code = int(rc_file.read_text())
    rc_file.unlink()
    return code, out.stdout, out.stderr


CASE = "run --regression media_keys --seeds 1 -j 1 --no-progress"


def test_a_closed_stdout_is_one_line_and_exit_2(tmp_path):
    for cmd in (CASE, "list", "repro media_keys"):
        code, out, err = _run(f"kvfault {cmd} >&-", tmp_path)
        assert (code, out) == (2, ""), err
        assert err.splitlines() == [
            "kvfault: error: stdout is closed: what kvfault prints could not be read"
        ]


def test_a_closed_stderr_keeps_the_exit_code_and_the_output(tmp_path):
    code, out, err = _run(f"kvfault {CASE} 2>&-", tmp_path)
    assert code == 0 and "FIXED" in out and err == ""
    # The pytest-xdist backend too (pytest asserts sys.__stderr__ is set).
    code, out, err = _run(
        "kvfault run --regression media_keys --seeds 1 -n 2 --no-progress 2>&-", tmp_path
    )
    assert code == 0 and "FIXED" in out and err == "", out
    # An error with nowhere to say it still exits 2.
    code, out, err = _run("kvfault replay absent.json 2>&-", tmp_path)
    assert (code, out, err) == (2, "", "")


def test_a_closed_stderr_reopened_on_dev_null_is_open_in_children_too(tmp_path):
    # A child (prove's command, a sweep's pytest, an xdist worker) must not find its
    # fd 2 closed, nor a file of ours on it.
    child = "import sys, os; os.fstat(2); print('child has fd 2')"
    script = (
        "import subprocess, sys\n"
        "from kvfault.faults.streams import guard_streams\n"
        "with guard_streams():\n"
        f"    rc = subprocess.run([sys.executable, '-c', {child!r}]).returncode\n"
        "print('child exit', rc)\n"
    )
    code, out, err = _run(f"{sys.executable} -c {shlex.quote(script)} 2>&-", tmp_path)
    assert (code, out, err) == (0, "child has fd 2\nchild exit 0\n", "")


def test_a_full_stdout_is_one_line_and_exit_2(tmp_path):
    for cmd in (CASE, "list", "--help", "run --help"):  # argparse swallows its help's error
        code, out, err = _run(f"kvfault {cmd} >/dev/full", tmp_path)
        assert code == 2, err
        assert err.splitlines() == [
            "kvfault: error: cannot write to stdout: No space left on device"
        ]


def test_a_full_stderr_keeps_the_exit_code(tmp_path):
    # Progress lines (stderr is not a terminal) all fail to write; the run goes on.
    code, out, err = _run(
        "kvfault run --regression media_keys --seeds 2 -j 1 2>/dev/full", tmp_path
    )
    assert code == 0 and "FIXED" in out, out
    code, _, _ = _run("kvfault run --seeds 0 2>/dev/full", tmp_path)
    assert code == 2


def test_a_reader_that_goes_away_is_still_exit_141(tmp_path):
    code, out, err = _run("kvfault list | head -1", tmp_path)
    assert out == "scenarios:\n" and "Traceback" not in err


def _enospc_under(monkeypatch, place: Path) -> None:
    """Writes into files under ``place`` fail as on a full disk."""
    real = os.write

    def write(fd: int, data) -> int:  # type: ignore[no-untyped-def]
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.startswith(str(place)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_report_on_a_full_disk_is_one_line_with_the_path_and_no_temp_file(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report"
    _enospc_under(monkeypatch, report)
    code = cli.main(["run", "--regression", "media_keys", "--seeds", "1", "-j", "1",
                     "--no-progress", "--report", str(report), "--artifacts", "arts"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"kvfault: error: {report / 'summary.json'}: No space left on device"
    ], err
    left = [p for p in report.rglob("*") if p.is_file()]
    assert left == [], left


def test_a_full_disk_under_the_artifacts_is_one_line_with_the_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    arts = tmp_path / "arts"
    _enospc_under(monkeypatch, arts)
    code = cli.main(["repro", "media_keys", "--artifacts", str(arts)])
    err = capsys.readouterr().err
    path = arts / "regression-media_keys-seed0.json"
    assert code == 2
    assert err.splitlines() == [f"kvfault: error: {path}: No space left on device"], err
    assert list(arts.iterdir()) == []


def test_a_full_tmpfs_if_one_can_be_mounted(tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    try:
        ok = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(mnt)],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("no mount command")
    if ok.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        (mnt / "filler").write_bytes(b"x" * 4096)
        code, out, err = _run(
            f"kvfault run --regression media_keys --seeds 1 -j 1 --no-progress --report {mnt}",
            tmp_path,
        )
        assert code == 2
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].endswith(": No space left on device"), err
        assert lines[0].startswith(f"kvfault: error: {mnt}/"), err
        assert [p.name for p in mnt.rglob("*") if p.is_file()] == ["filler"]
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)
