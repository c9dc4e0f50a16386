"""Print the mutation score of the last ``mutmut run`` (``tox -e mutation``).

Reads mutmut's per-file results under ``mutants/`` and prints, per area and overall,
how many mutants the tests killed. A mutant counts as detected when a test failed on it
or it ran past its time limit (a mutant that hangs the stack is caught by any run with
a deadline). Mutants that ``docs/mutation.md`` lists as equivalent (a row whose verdict
is ``equivalent``) are left out of the adjusted score and named separately. Survivors
not yet accounted for are listed one a line, so a new one is never silent.

Exit status: 0, or 1 when ``--fail-under`` is given and the adjusted core score is lower;
2 when there are no results to read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

# Area of a mutant by its module prefix; "core" is the reference stack the target is on.
AREAS = (
    ("kvfault.reference.", "core (reference/)"),
    ("kvfault.fakes.", "fakes/"),
    ("kvfault.faults.", "injectors"),
)
DETECTED = {"killed", "timeout", "segfault"}
UNDETECTED = {"survived", "no tests"}

_EQUIVALENT_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*equivalent\s*\|")


def _status(code: int | None) -> str:
    # mutmut's own exit-code table, so a new mutmut code is classified as mutmut does.
    from mutmut.stats import status_by_exit_code

    return status_by_exit_code[code]


def _area(name: str) -> str:
    return next(label for prefix, label in AREAS if name.startswith(prefix))


def load_results(root: Path) -> dict[str, str]:
    """Mutant name -> status, for every mutant of the last run."""
    results = {}
    for meta in sorted(root.glob("**/*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            results[name] = _status(code)
    return results


def equivalents(doc: Path) -> set[str]:
    if not doc.exists():
        return set()
    names = set()
    for line in doc.read_text().splitlines():
        m = _EQUIVALENT_ROW.match(line)
        if m:
            names.add(m.group(1))
    return names


def _score(statuses: Counter) -> tuple[int, int]:
    detected = sum(statuses[s] for s in DETECTED)
    return detected, detected + sum(statuses[s] for s in UNDETECTED)


def _wilson(k: int, n: int) -> str:
    """95% Wilson interval of a proportion: what a sampled score is good for."""
    if n == 0:
        return ""
    z = 1.96
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return f"  [{100 * (mid - half):.1f}, {100 * (mid + half):.1f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=Path, default=Path("mutants"))
    ap.add_argument("--doc", type=Path, default=Path("docs/mutation.md"))
    ap.add_argument("--fail-under", type=float, default=None, metavar="PERCENT")
    ap.add_argument(
        "--sample",
        type=Path,
        default=None,
        metavar="FILE",
        help="score only the mutants named in FILE, one a line (a random sample)",
    )
    args = ap.parse_args(argv)

    results = load_results(args.mutants)
    if args.sample is not None:
        wanted = set(args.sample.read_text().split())
        results = {n: s for n, s in results.items() if n in wanted}
    if not results:
        print(f"no mutmut results under {args.mutants}/; run `mutmut run` first", file=sys.stderr)
        return 2
    equivalent = equivalents(args.doc)

    print(
        f"{'area':<20}{'mutants':>9}{'killed':>8}{'timeout':>9}{'survived':>10}"
        f"{'no tests':>10}{'equiv':>7}{'score':>9}{'adjusted':>10}  95% interval"
    )
    core_adjusted = 0.0
    for label in [label for _, label in AREAS] + ["all"]:
        names = [n for n in results if label == "all" or _area(n) == label]
        if not names:
            continue
        raw = Counter(results[n] for n in names)
        adj = Counter(
            results[n] for n in names if not (results[n] in UNDETECTED and n in equivalent)
        )
        eq = sum(raw.values()) - sum(adj.values())
        d, t = _score(raw)
        da, ta = _score(adj)
        pct, pct_adj = 100.0 * d / max(t, 1), 100.0 * da / max(ta, 1)
        if label.startswith("core"):
            core_adjusted = pct_adj
        print(
            f"{label:<20}{len(names):>9}{raw['killed']:>8}{raw['timeout']:>9}"
            f"{raw['survived']:>10}{raw['no tests']:>10}{eq:>7}{pct:>8.1f}%{pct_adj:>9.1f}%"
            f"{_wilson(da, ta)}"
        )

    open_survivors = sorted(
        n for n, s in results.items() if s in UNDETECTED and n not in equivalent
    )
    other = Counter(s for s in results.values() if s not in DETECTED | UNDETECTED)
    if other:
        print("not counted: " + ", ".join(f"{k} {v}" for k, v in sorted(other.items())))
    print(f"survivors not listed as equivalent in {args.doc}: {len(open_survivors)}")
    for name in open_survivors:
        print(f"  {results[name]:<9} {name}")
    if args.fail_under is not None and core_adjusted < args.fail_under:
        print(f"core score {core_adjusted:.1f}% is under {args.fail_under}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
