"""The path a finding's run took through ATOM, against its passing twin's: the ATOM
lines one run executed and the other did not, from two ``--atom-record-path``
directories (``kvfault.faults.atom.line_record``), grouped by ATOM function.

    kvfault review -C ATOM HEAD HEAD --tier atom --scenario ROW \
        --base-args '--atom-record-path /tmp/base' \
        --head-args '--atom-fix ROW --atom-record-path /tmp/head'
    python -m kvfault.faults.atom.recorded_path /tmp/base /tmp/head ROW --atom-src ATOM

The review proves the fix on one commit (the row FAIL -> PASS, no other row moves);
this prints what the failing side ran that the fixed side did not, and the other way
round. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path


def _lines(directory: Path, row: str) -> set[tuple[str, str, int]]:
    path = directory / f"{row}-seed0.json"
    if not path.exists():
        return set()
    return {(f, fn, int(n)) for f, fn, n, _times in json.loads(path.read_text())}


def path_difference(
    ran: set[tuple[str, str, int]], other: set[tuple[str, str, int]], src: str | None = None
) -> list[str]:
    """Lines ``ran`` executed and ``other`` did not, one entry per ATOM function:
    ``file:first-line function: spans``, then the first line's text (read from the
    checkout ``src`` when given)."""
    by_fn: dict[tuple[str, str], list[int]] = defaultdict(list)
    for f, fn, n in ran - other:
        by_fn[(f, fn)].append(n)
    out = []
    for (f, fn), lines in sorted(by_fn.items(), key=lambda kv: (kv[0][0], min(kv[1]))):
        lines.sort()
        spans: list[list[int]] = []
        for n in lines:
            if spans and n == spans[-1][1] + 1:
                spans[-1][1] = n
            else:
                spans.append([n, n])
        spans_text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
        text = ""
        if src:
            try:
                text = Path(src, f).read_text().splitlines()[lines[0] - 1].strip()
            except (OSError, IndexError):
                text = ""
        out.append(f"{f}:{lines[0]} {fn}: {spans_text}" + (f"  | {text}" if text else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kvfault.faults.atom.recorded_path", description=__doc__
    )
    ap.add_argument("failing", help="the --atom-record-path DIR of the side where ROW fails")
    ap.add_argument("passing", help="the --atom-record-path DIR of its passing twin")
    ap.add_argument("row", help="the row (its seed-0 run)")
    ap.add_argument("--atom-src", help="the ATOM checkout, for each line's text")
    args = ap.parse_args(argv)
    failing, passing = _lines(Path(args.failing), args.row), _lines(Path(args.passing), args.row)
    for side, lines in (("failing", failing), ("passing", passing)):
        if not lines:
            print(f"recorded_path: no recorded run of {args.row} in the {side} side's "
                  "directory", file=sys.stderr)  # fmt: skip
            return 2
    src = None
    if args.atom_src or os.environ.get("KVFAULT_ATOM_SRC"):
        from kvfault.faults.atom.source import AtomSource

        src = str(AtomSource.find(args.atom_src).path)
    for title, ran, other in (
        ("the failing run executed and the passing twin did not", failing, passing),
        ("the passing twin executed and the failing run did not", passing, failing),
    ):
        print(f"ATOM lines of {args.row} {title} (file:line function: lines):")
        for line in path_difference(ran, other, src) or ["(none)"]:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
