"""Proof of a candidate ATOM fix on one commit, in one command: the atom campaign run
twice on the same checkout, without and with ``--atom-fix NAME``, each row's verdict
side by side, and the ATOM lines the finding's failing run executed that its passing
twin (the same row with the fix) did not.

    python -m faults.atom.fix_proof NAME [--atom-src PATH] [--row ROW ...]

``FIXED`` (exit 0): the fix's row fails without it and passes with it, and no other
row changes verdict. ``NOT FIXED`` (exit 1) otherwise. Bad input: one line, exit 2.
Both campaigns are ``kvfault run --tier atom`` itself (``--report``,
``--atom-record-path``), so their verdicts are the campaign's own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path


def _side(
    atom_src: str | None, rows: list[str], out: Path, fix: str | None, timeout_s: float
) -> dict[str, str]:
    """Run the campaign once; each row's verdict by row name."""
    cmd = [sys.executable, "-m", "faults.cli", "run", "--tier", "atom", "--no-progress",
           "--report", str(out / "report"), "--atom-record-path", str(out / "path")]  # fmt: skip
    if atom_src:
        cmd += ["--atom-src", atom_src]
    for row in rows:
        cmd += ["--scenario" if _kind(row) == "scenario" else "--fault", row]
    if fix:
        cmd += ["--atom-fix", fix]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    summary = out / "report" / "summary.json"
    if proc.returncode not in (0, 1) or not summary.exists():
        raise RuntimeError(f"the campaign failed (exit {proc.returncode}): {proc.stderr[-500:]}")
    verdicts = {}
    for case in json.loads(summary.read_text())["cases"]:
        # atom:scenario:NAME@seedN / atom:fault:NAME@seedN
        name = case["id"].split(":", 2)[2].rsplit("@", 1)[0]
        verdicts[name] = case["verdict"]
    return verdicts


def _kind(row: str) -> str:
    from faults.atom.catalog import ROWS

    return ROWS[row].kind


def _lines(out: Path, row: str) -> set[tuple[str, str, int]]:
    path = out / "path" / f"{row}-seed0.json"
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


def judge(fix: str, without: dict[str, str], with_fix: dict[str, str]) -> tuple[bool, str]:
    """Whether the proof holds (``fix``'s row FAIL -> PASS, every other row's verdict
    the same on both sides), and the one line that says so."""
    changed = [r for r in without if r != fix and without.get(r) != with_fix.get(r)]
    flipped = without.get(fix) == "FAIL" and with_fix.get(fix) == "PASS"
    if flipped and not changed:
        return True, f"FIXED: {fix} FAIL -> PASS; every other row kept its verdict"
    why = f"{fix} {without.get(fix)} -> {with_fix.get(fix)}"
    if changed:
        why += f"; other rows changed: {', '.join(changed)}"
    return False, f"NOT FIXED: {why}"


def main(argv: list[str] | None = None) -> int:
    from faults.atom.catalog import ROWS
    from faults.atom.fixes import FIXES

    ap = argparse.ArgumentParser(prog="python -m faults.atom.fix_proof", description=__doc__)
    ap.add_argument("fix", help="the candidate fix (named for its finding's row)")
    ap.add_argument("--atom-src", help="the ATOM checkout (default: $KVFAULT_ATOM_SRC)")
    ap.add_argument("--row", action="append", default=[], help="only these rows (default: all)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per campaign")
    args = ap.parse_args(argv)
    if args.fix not in FIXES:
        print(f"fix_proof: {args.fix!r} is no fix; known: {', '.join(FIXES)}", file=sys.stderr)
        return 2
    unknown = [r for r in args.row if r not in ROWS]
    if unknown:
        print(f"fix_proof: {unknown[0]!r} is no atom row", file=sys.stderr)
        return 2
    rows = args.row or list(ROWS)
    if args.fix not in rows:
        rows = [args.fix, *rows]
    with tempfile.TemporaryDirectory(prefix="kvfault-fix-proof-") as tmp:
        without, with_ = Path(tmp, "without"), Path(tmp, "with")
        try:
            a = _side(args.atom_src, rows, without, None, args.timeout)
            b = _side(args.atom_src, rows, with_, args.fix, args.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"fix_proof: {e}".splitlines()[0], file=sys.stderr)
            return 2
        width = max(len(r) for r in rows)
        print(f"{'row':{width}}  without  with --atom-fix {args.fix}")
        for r in rows:
            mark = "" if a.get(r) == b.get(r) else "  <- changed"
            print(f"{r:{width}}  {a.get(r, '-'):7}  {b.get(r, '-')}{mark}")
        flipped = a.get(args.fix) == "FAIL" and b.get(args.fix) == "PASS"
        if flipped:
            from faults.atom.source import AtomSource

            src = str(AtomSource.find(args.atom_src).path)
            failing, passing = _lines(without, args.fix), _lines(with_, args.fix)
            for title, ran, other in (
                ("the failing run executed and the passing twin did not", failing, passing),
                ("the passing twin executed and the failing run did not", passing, failing),
            ):
                print(f"\nATOM lines of {args.fix} {title} (file:line function: lines):")
                for line in path_difference(ran, other, src) or ["(none)"]:
                    print(f"  {line}")
    fixed, line = judge(args.fix, a, b)
    print(f"\n{line}")
    return 0 if fixed else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
