"""Benchmark: machine instructions per trace event of the burst, counted by valgrind.

    python benchmarks/bench_instructions.py [--scales 1,16] [--scenario restart_burst]

Wall and CPU seconds on a shared or virtual machine move by 15% from run to run, more
than most single changes to the simulator save. An instruction count does not: the same
tree and ``PYTHONHASHSEED`` give the same count to within about 1%. For each scale K
the script runs the scenario once under ``valgrind --tool=cachegrind --cache-sim=no``
(about 20 times slower than without), twice: as it is, and with the engine loop
replaced by a stub that returns at once (imports, the workload draw and sending the
requests are left). The difference is the engine loop's count. It prints, per scale,
both counts, the trace events, and the engine loop's instructions per event; with two
scales or more, the slope between the first and the last (what each further event
costs, with the fixed costs of a process taken out).

Valgrind is not a Python package: install it from the system's packages
(``apt-get install valgrind``). The garbage collector is set as ``kvfault run`` sets it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvfault.faults.argtypes import scales  # noqa: E402

# One run in a fresh interpreter: argv is scale, scenario, and "stub" to stub the loop.
_RUN = """
import gc, sys
gc.freeze(); gc.set_threshold(50_000, 20, 20)
from kvfault.faults.campaign import run_scenario
if sys.argv[3] == "stub":
    from kvfault.reference.stack.engine import Engine, EngineOutcome
    Engine.run = lambda self, *a, **k: EngineOutcome(None, 0.0, 0, {}, False, 0.0)
run = run_scenario(sys.argv[2], 0, scale=int(sys.argv[1]))
print("events", len(run.trace.events))
"""


def count(scale: int, scenario: str, stub: bool) -> tuple[int, int]:
    """Instructions and trace events of one run."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
    cmd = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        sys.executable, "-c", _RUN, str(scale), scenario, "stub" if stub else "run",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    events = re.search(r"^events (\d+)$", proc.stdout, re.M)
    if proc.returncode or not refs or not events:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench_instructions: the run at scale {scale} failed: {tail}")
    return int(refs.group(1).replace(",", "")), int(events.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=scales, default=[1, 16], metavar="K,K,...")
    parser.add_argument("--scenario", default="restart_burst")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench_instructions: valgrind is not installed (apt-get install valgrind)",
              file=sys.stderr)  # fmt: skip
        return 2
    print(f"python {platform.python_version()} ({sys.executable})")
    print(f"scenario {args.scenario}, seed 0, fixed stack, PYTHONHASHSEED=0")
    print(
        "| scale | trace events | instructions | with the loop stubbed | engine loop | loop per event |"
    )
    print("|---|---|---|---|---|---|")
    rows = []
    for k in args.scales:
        total, events = count(k, args.scenario, stub=False)
        stubbed, _ = count(k, args.scenario, stub=True)
        loop = total - stubbed
        rows.append((k, events, total, stubbed, loop))
        print(f"| {k} | {events:,} | {total:,} | {stubbed:,} | {loop:,} | {loop / events:,.0f} |")
    if len(rows) > 1:
        (_, e0, t0, s0, l0), (_, e1, t1, s1, l1) = rows[0], rows[-1]
        print(
            f"\nper further event (scale {rows[0][0]} to {rows[-1][0]}): "
            f"{(t1 - t0) / (e1 - e0):,.0f} instructions in all, "
            f"{(l1 - l0) / (e1 - e0):,.0f} in the engine loop, "
            f"{(s1 - s0) / (e1 - e0):,.0f} outside it (workload draw, sending requests)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
