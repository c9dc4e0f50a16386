"""Timeline files (issue 12, item 7): the extension names the format, and a picture that
cannot be written is one line on stderr and exit 2, never a quiet line on stdout."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.faults import cli
from kvfault.faults.campaign import run_case
from kvfault.faults.report.timeline import picture_format, write_timeline

ROOT = Path(__file__).resolve().parents[3]
MAGIC = {".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF", ".jpg": b"\xff\xd8\xff"}


@pytest.fixture(scope="module")
def small_run():
    return run_case("chunk_aligned_hybrid", 0, None).run


@pytest.mark.parametrize("suffix", sorted(MAGIC))
def test_the_extension_names_the_format(small_run, tmp_path, suffix):
    pytest.importorskip("matplotlib")
    out = write_timeline(small_run, None, tmp_path / f"t{suffix.upper()}", max_rows=6)
    assert out.read_bytes().startswith(MAGIC[suffix])


@pytest.mark.parametrize("name", ["t.gif", "t.txt", "t", "t.png.bak"])
def test_other_extensions_are_refused_before_drawing(small_run, tmp_path, name):
    with pytest.raises(ValueError, match="a timeline is written as .png, .svg, .pdf"):
        picture_format(name)
    with pytest.raises(ValueError):
        write_timeline(small_run, None, tmp_path / name)
    assert not (tmp_path / name).exists()


def kvfault(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def _refused(tmp_path: Path, target: str) -> subprocess.CompletedProcess:
    out = kvfault("repro", "hybrid_last_chunk", "--timeline", target, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""  # refused before the case ran
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvfault: error: --timeline"), out.stderr
    return out


def test_an_unknown_extension_is_refused_up_front(tmp_path):
    assert ".gif" in _refused(tmp_path, "x.gif").stderr


def test_a_directory_as_target_is_refused_up_front(tmp_path):
    (tmp_path / "pics.png").mkdir()
    assert "is a directory" in _refused(tmp_path, "pics.png").stderr


def test_a_file_as_parent_is_refused_up_front(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert "not a directory" in _refused(tmp_path, "afile/x.png").stderr


def test_a_failed_write_is_one_line_on_stderr_and_exit_2(tmp_path, capsys, monkeypatch):
    """A full disk: the verdict is printed, then the error, and the run exits 2."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    code = cli.main(
        [
            "repro",
            "hybrid_last_chunk",
            "--artifacts",
            str(tmp_path),
            "--timeline",
            str(tmp_path / "t.png"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2
    assert "FIXED" in out and "timeline:" not in out
    assert err.splitlines() == [
        f"kvfault: error: --timeline {tmp_path / 't.png'}: no timeline: OSError: "
        "[Errno 28] No space left on device"
    ]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_an_unwritable_place_is_exit_2(tmp_path):
    """/proc takes no new files, not even from root (a read-only place for any user)."""
    pytest.importorskip("matplotlib")
    out = kvfault("repro", "hybrid_last_chunk", "--timeline", "/proc/kvfault.png", cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and "kvfault: error: --timeline" in out.stderr
