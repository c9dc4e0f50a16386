"""The atom campaign K times in a row: each run's wall time, and whether every row gave
the same verdict every time. Prints figures (with the interpreter and the load average);
asserts nothing about time.

    python benchmarks/bench_atom.py --atom-src PATH [--repeat 5] [--full]

The default set, as ``kvfault run --tier atom`` runs it; ``--full``: every row.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvfault.faults.atom.executor import atom_executor  # noqa: E402
from kvfault.faults.atom.source import AtomSource  # noqa: E402
from kvfault.faults.campaign import select_targets  # noqa: E402
from kvfault.faults.campaign.session import run_campaign  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--atom-src", default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--full", action="store_true", help="every row: the long matrix too")
    args = ap.parse_args()
    source = AtomSource.find(args.atom_src)
    print(
        f"{os.cpu_count()} CPUs; python {sys.version.split()[0]} ({sys.executable}); "
        f"ATOM at {source.path}"
    )
    verdicts: dict[str, list[str]] = {}
    for i in range(args.repeat):
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        with atom_executor(str(source.path)) as executor:
            outcomes = run_campaign(
                select_targets(tier="atom", full=args.full), [0], executor
            ).targets
        wall = time.perf_counter() - t0
        for o in outcomes:
            verdicts.setdefault(o.target.name, []).append(str(o.verdict))
        bad = sum(1 for o in outcomes if not o.ok)
        print(f"run {i + 1}: {wall:6.1f} s wall (zygote start included), load average "
              f"{load:.2f} at start; {len(outcomes) - bad} PASS, {bad} not")  # fmt: skip
    for name, seen in verdicts.items():
        same = "same" if len(set(seen)) == 1 else "DIFFERS"
        print(f"  {name:22s} {same:7s} {' '.join(seen)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
