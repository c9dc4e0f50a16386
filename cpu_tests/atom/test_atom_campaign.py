"""The atom campaign against the checkout in ``KVFAULT_ATOM_SRC``, once, through the
CLI, with ``--full`` (every row, the long matrix too): its table is printed; each row
must give the verdict ``kvfault.faults.atom.at_main`` declares for it at ATOM's main
(PASS, or FAIL with the property named there: the findings of docs/atom/findings.md
and the reviewed leads). On another checkout a finding or an ATOM lead may also PASS
(fixed there), never fail otherwise; every other row gives its declared verdict
everywhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from kvfault.faults.atom.at_main import FAILING, PINNED, disagreement
from kvfault.faults.atom.catalog import ROWS


def _head(src: str) -> str:
    out = subprocess.run(
        ["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


@pytest.fixture(scope="module")
def campaign(
    atom_src: str, pytestconfig: pytest.Config
) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """The whole campaign's table, and what it left in a $TMPDIR of its own (short:
    the ipc sockets live there)."""
    tmp = tempfile.mkdtemp(prefix="kva", dir="/tmp")
    try:
        rows = _campaign(atom_src, pytestconfig, {**os.environ, "TMPDIR": tmp})
        return rows, sorted(os.listdir(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def table(campaign: tuple[dict[str, tuple[str, str]], list[str]]) -> dict[str, tuple[str, str]]:
    return campaign[0]


def test_the_campaign_leaves_nothing_in_its_temporary_directory(campaign) -> None:
    # torch's inductor cache directory (torchinductor_USER) was left there too.
    assert campaign[1] == []


def _campaign(
    atom_src: str, pytestconfig: pytest.Config, env: dict[str, str]
) -> dict[str, tuple[str, str]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvfault.faults.cli",
            "run",
            "--tier",
            "atom",
            "--atom-src",
            atom_src,
            "--no-progress",
            "--full",
        ],
        capture_output=True,
        text=True,
        timeout=1800,  # every row (83): 325 s on the shared 2-core machine at load 5 to 6
        env=env,
    )
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # the campaign table in the test log
        reporter.write_line("")
        for line in (proc.stdout + proc.stderr[-2000:]).splitlines():
            reporter.write_line(line)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return _rows(proc.stdout)


def _rows(text: str) -> dict[str, tuple[str, str]]:
    """Each row of the campaign table: its verdict and the detail of its first failing
    seed. Columns are read where the header's rule puts them (a verdict may hold a
    space: NOT EXERCISED); the detail drops its "k/n seeds: " count."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("kind "))
    starts = [m.start() for m in re.finditer(r"-+", lines[head + 1])]
    names = lines[head].split()
    col = {n: i for i, n in enumerate(n for n in names if n not in ("s",))}
    rows: dict[str, tuple[str, str]] = {}
    for line in lines[head + 2 :]:
        if not line.strip() or line.startswith("props:"):
            break
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        detail = re.sub(r"^\d+/\d+ seeds: ", "", cells[col["detail"]])
        rows[cells[col["name"]]] = (cells[col["verdict"]], detail)
    return rows


def test_every_row_ran_and_gave_a_verdict(table):
    assert sorted(table) == sorted(ROWS)


@pytest.mark.parametrize("name", [n for n in ROWS if n not in FAILING])
def test_rows_declared_to_pass_pass(table, name, atom_src):
    assert disagreement(name, *table[name], pinned=_head(atom_src).startswith(PINNED)) is None


@pytest.mark.parametrize("name", sorted(FAILING))
def test_rows_declared_to_fail_fail_with_their_property(table, name, atom_src):
    assert disagreement(name, *table[name], pinned=_head(atom_src).startswith(PINNED)) is None
