"""Simulator figures: the 64-restore burst and the `kvfault run` job (prints, never asserts).

    python benchmarks/bench_sim.py [--repeat N]

The burst figure is the engine's run of pass 2 of the restart_burst scenario (64
restores behind a 29 s first forward and a 21 s step), from the restart to the last
output; workload generation and pass 1 are reported separately.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time


def burst(repeat: int) -> None:
    from kvfault.faults.campaign import run_scenario

    walls, sims, totals = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run = run_scenario("restart_burst")
        totals.append(time.perf_counter() - t0)
        pass2 = run.outcomes[-1]
        assert pass2.stopped is None and not pass2.hung, "the fixed stack stopped"
        walls.append(pass2.wall_seconds)
        sims.append(pass2.sim_seconds)
    wall = statistics.median(walls)
    print(
        f"burst (64 restores, pass 2): {sims[0]:.2f} simulated s in {wall * 1000:.1f} ms wall "
        f"(median of {repeat}; min {min(walls) * 1000:.1f} ms); "
        f"simulated/wall = {sims[0] / wall:,.0f}x; target < 100 ms"
    )
    print(
        f"whole restart_burst scenario (workload + pass 1 + pass 2): {statistics.median(totals) * 1000:.1f} ms"
    )


def kvfault_run(repeat: int) -> None:
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "kvfault.faults.cli", "run", "--no-progress"],
            capture_output=True,
            text=True,
        )
        walls.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            raise SystemExit(f"kvfault run exited {proc.returncode}")
    last = proc.stdout.strip().splitlines()[-1]
    print(
        f"`kvfault run` (fresh process): {statistics.median(walls):.2f} s wall (median of {repeat}); last line: {last}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    burst(args.repeat)
    kvfault_run(max(1, args.repeat // 2))


if __name__ == "__main__":
    main()
