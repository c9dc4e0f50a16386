"""Issue 34, item 10: a ``--report`` or ``--atom-src`` path with a byte that is not
UTF-8. The report is written whole (junit.xml included, parseable), the path is printed
as given (no encoding traceback, even where stdout is strict UTF-8), and a checkout
that is not there is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.dom.minidom
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kvfault(cwd: Path, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict",
           "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}  # fmt: skip
    env.pop("KVFAULT_ATOM_SRC", None)
    return subprocess.run([sys.executable, "-m", "kvfault.faults.cli", *args], cwd=cwd, env=env,
                          capture_output=True, timeout=300)  # fmt: skip


def test_a_report_directory_that_is_not_utf8_gets_every_file(tmp_path):
    report = b"rep\xff"
    got = kvfault(tmp_path, "run", "--scenario", "two_servers", "--legacy",
                  "engine_id_without_port", "--seeds", "1", "--report", report, "--no-progress")  # fmt: skip
    assert got.returncode == 1, got.stderr.decode(errors="replace")
    assert b"Traceback" not in got.stderr
    where = tmp_path / os.fsdecode(report)
    assert (where / "summary.json").is_file() and (where / "junit.xml").is_file()
    xml.dom.minidom.parse(str(where / "junit.xml"))  # whole and well-formed
    assert b"report: rep\xff/summary.json, rep\xff/junit.xml" in got.stdout


def test_an_atom_src_that_is_not_utf8_is_one_line(tmp_path):
    got = kvfault(tmp_path, "run", "--tier", "atom", "--atom-src", b"/nowhere/atom\xff",
                  "--scenario", "two_servers")  # fmt: skip
    assert got.returncode == 2
    err = got.stderr.strip()
    assert b"\n" not in err and b"Traceback" not in err, err
    assert err.startswith(b"kvfault: error: --atom-src /nowhere/atom\xff: not an ATOM checkout"), (
        err
    )
