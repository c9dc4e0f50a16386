"""Issue 34: the table's detail column and the ``(+N more)`` violations are readable
without opening summary.json: a cut detail says so ("..."), and every violation of a
failing case is listed under the table."""

from __future__ import annotations

from kvfault.faults.cli import build_parser
from kvfault.faults.commands.run import command


def test_a_cut_detail_ends_in_dots_and_every_violation_is_listed(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(
        [
            "run",
            "--legacy",
            "media_keys",
            "--scenario",
            "two_images",
            "--seeds",
            "1",
            "--no-progress",
            "-j",
            "1",
        ]  # fmt: skip
    )
    assert command(args) == 1
    out = capsys.readouterr().out.splitlines()
    row = next(ln for ln in out if ln.startswith("scenario  two_images"))
    assert row.endswith("...") and "(+6 more)" not in row  # the cut is marked
    signature = next(ln for ln in out if ln.startswith("FAIL scenario:two_images"))
    assert signature.endswith("(+6 more)")
    listed = [ln for ln in out if ln.startswith("  - ")]
    assert len(listed) == 7, listed  # the first and the 6 more
    assert sum(ln.startswith("  - keys: ") for ln in listed) == 5
