"""Issue 24, item 1: no input file, link, device or FIFO makes kvfault read past its limit,
block, or write anywhere but the file it names; artifact writes are atomic, private and
safe under several processes writing into one directory at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvfault.faults.campaign import Case, regression_target
from kvfault.faults.campaign.artifacts import (
    ArtifactError,
    artifact_path,
    drop_artifact,
    keep_artifact,
    read_artifact,
    stage_artifact,
    write_artifact,
)
from kvfault.faults.safe_io import NotARegularFile, read_bounded, write_atomic

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONHASHSEED", None)
    return env


def _limited(code: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a child with 1 GiB of address space: an unbounded read of /dev/zero
    there ends in MemoryError instead of taking the machine down."""
    pre = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    return subprocess.run(
        [sys.executable, "-c", pre + textwrap.dedent(code)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _case() -> Case:
    return Case(regression_target("side_chain_seed"), 0)


# -- reading ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/full", "/dev/urandom"])
def test_replay_of_a_link_to_a_device_is_one_line_not_a_read_until_oom(tmp_path, device):
    link = tmp_path / "a.json"
    link.symlink_to(device)
    out = _limited(
        f"""
        import sys
        from kvfault.faults import cli
        sys.exit(cli.main(["replay", {str(link)!r}]))
        """,
        tmp_path,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"kvfault: error: cannot read {link}: a character device, not a regular file"
    ]


def test_replay_of_a_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "a.json"
    os.mkfifo(fifo)
    # Without O_NONBLOCK the open waits for a writer that never comes (the timeout fails it).
    out = _limited(
        f"""
        import sys
        from kvfault.faults import cli
        sys.exit(cli.main(["replay", {str(fifo)!r}]))
        """,
        tmp_path,
        timeout=30,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"kvfault: error: cannot read {fifo}: a FIFO, not a regular file"
    ]


def test_replay_of_a_directory_and_a_huge_file_is_refused(tmp_path):
    with pytest.raises(ArtifactError, match="a directory, not a regular file"):
        read_artifact(tmp_path)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(50 << 20)  # sparse: 50 MB of zeros, never read whole
    with pytest.raises(ArtifactError, match="is over 1048576 bytes"):
        read_artifact(big)


def test_read_bounded_reads_at_most_one_byte_past_its_limit(tmp_path, monkeypatch):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 10_000)
    asked: list[int] = []
    real = os.read

    def spy(fd: int, n: int) -> bytes:
        asked.append(n)
        return real(fd, n)

    monkeypatch.setattr(os, "read", spy)
    assert read_bounded(f, 100) == b"x" * 101
    assert sum(asked) == 101
    link = tmp_path / "link"
    link.symlink_to(f)
    assert read_bounded(link, 5) == b"x" * 6
    with pytest.raises(OSError):
        read_bounded(link, 5, follow=False)
    with pytest.raises(NotARegularFile):
        read_bounded("/dev/null", 5)


def test_stage_artifact_over_a_planted_link_to_dev_zero_neither_reads_nor_follows_it(tmp_path):
    out = _limited(
        f"""
        from pathlib import Path
        from kvfault.faults.campaign import Case, regression_target
        from kvfault.faults.campaign.artifacts import artifact_path, drop_artifact, stage_artifact
        d = Path({str(tmp_path)!r})
        case = Case(regression_target("side_chain_seed"), 0)
        artifact_path(case, d).symlink_to("/dev/zero")
        staged = stage_artifact(case, d)
        assert not staged[0].is_symlink(), "the link was written through"
        drop_artifact(*staged)
        print(sorted(p.name for p in d.iterdir()))
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- writing ------------------------------------------------------------------------------


def test_a_planted_tmp_link_is_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = artifact_path(_case(), tmp_path)
    # The names the old writers used for their temporary files.
    for name in (path.with_suffix(".json.tmp").name, f".{path.name}.{os.getpid()}.tmp"):
        (tmp_path / name).symlink_to(victim)
    assert write_artifact(_case(), tmp_path) == path
    assert victim.read_text() == "precious\n"
    assert json.loads(path.read_text())["case"] == _case().id


def test_a_link_at_the_target_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = artifact_path(_case(), tmp_path)
    path.symlink_to(victim)
    write_artifact(_case(), tmp_path)
    assert victim.read_text() == "precious\n"
    assert not path.is_symlink()


def test_write_atomic_leaves_no_temporary_file_when_the_write_fails(tmp_path, monkeypatch):
    import errno

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    target = tmp_path / "summary.json"
    with pytest.raises(OSError) as info:
        write_atomic(target, "{}")
    assert info.value.filename == str(target)
    assert info.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_temporary_files_are_private(tmp_path, monkeypatch):
    modes: list[int] = []
    real = os.replace

    def spy(src, dst):  # type: ignore[no-untyped-def]
        modes.append(os.stat(src).st_mode & 0o777)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "f", "x")
    finally:
        os.umask(old)
    assert modes == [0o644]  # the file's final mode, set before it appears
    import tempfile

    fd, name = tempfile.mkstemp(dir=tmp_path)  # what write_atomic opens its temp with
    assert os.fstat(fd).st_mode & 0o777 == 0o600
    os.close(fd)


# -- several processes in one directory ----------------------------------------------------

_WRITER = """
import sys
from pathlib import Path
from kvfault.faults.campaign import Case, regression_target
from kvfault.faults.campaign.artifacts import write_artifact
d = Path(sys.argv[1])
cases = [Case(regression_target("side_chain_seed"), s) for s in range(5)]
for i in range(300):
    write_artifact(cases[i % 5], d)
"""


def test_four_processes_writing_artifacts_into_one_directory_all_succeed(tmp_path):
    d = tmp_path / "artifacts"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(d)], env=_env(), stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    errs = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    assert sorted(p.name for p in d.iterdir()) == [
        f"regression-side_chain_seed-seed{s}.json" for s in range(5)
    ]
    for p in d.iterdir():
        json.loads(p.read_text())


_STAGER = """
import sys
from pathlib import Path
from kvfault.faults.campaign import Case, regression_target
from kvfault.faults.campaign.artifacts import drop_artifact, keep_artifact, stage_artifact
d, failing = Path(sys.argv[1]), int(sys.argv[2])
for round in range(40):
    for s in range(4):
        case = Case(regression_target("side_chain_seed"), s)
        staged = stage_artifact(case, d)
        if s == failing:
            keep_artifact(case, d)
        else:
            drop_artifact(*staged)
"""


def test_concurrent_campaigns_leave_no_stale_artifact_and_keep_what_others_wrote(tmp_path):
    d = tmp_path / "artifacts"
    # A reviewer's `kvfault repro` wrote seed 2's artifact (under another hash seed).
    repro_case = Case(regression_target("side_chain_seed"), 2)
    path2 = write_artifact(repro_case, d)
    obj = json.loads(path2.read_text())
    obj["pythonhashseed"] = "7"
    path2.write_text(json.dumps(obj))
    before = path2.read_bytes()
    # Four campaigns at once; one of them fails seed 3 (-1: none fails).
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _STAGER, str(d), str(f)], env=_env(), stderr=subprocess.PIPE
        )
        for f in (-1, -1, 3, -1)
    ]
    errs = [p.communicate(timeout=180)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    names = sorted(p.name for p in d.iterdir())
    assert names == [
        "regression-side_chain_seed-seed2.json",
        "regression-side_chain_seed-seed3.json",
    ], names
    assert path2.read_bytes() == before  # the reviewer's artifact, untouched
    kept = json.loads((d / names[1]).read_text())
    assert "campaign_runs" not in kept and kept["seed"] == 3


def test_a_staged_artifact_outlives_a_crash_and_a_later_pass_keeps_it(tmp_path):
    case = _case()
    staged = stage_artifact(case, tmp_path)  # and then the process died
    assert json.loads(staged[0].read_text())["campaign_runs"] == 1
    read_artifact(staged[0])  # a crash-left artifact replays
    again = stage_artifact(case, tmp_path)
    drop_artifact(*again)
    assert staged[0].exists()  # the crashed run's count remains: still there
    keep_artifact(case, tmp_path)
    assert "campaign_runs" not in json.loads(staged[0].read_text())


def test_six_concurrent_campaigns_in_one_directory_lose_nothing(tmp_path):
    cmd = [sys.executable, "-m", "kvfault.faults.cli", "run", "--regression", "side_chain_seed",
           "--seeds", "12", "-j", "1", "--no-progress"]  # fmt: skip
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )  # fmt: skip
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [e for _, e in outs]
    for out, err in outs:
        assert "FIXED" in out and err == "", err
    # Every case passed: nothing is left, not even the directories the runs made.
    assert list(tmp_path.iterdir()) == []
