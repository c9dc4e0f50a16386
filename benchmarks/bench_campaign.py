"""Benchmark: the default ``kvfault run`` campaign and the cost of one more hash seed.

    python benchmarks/bench_campaign.py [--skip-campaign] [--seeds N] [--workers N]

Targets (docs/design.md#performance-targets): the default campaign in under 10 s on 2 cores; one extra
PYTHONHASHSEED in a sweep well under 1 s (one short subprocess).

Wall time depends on what else the machine runs, so CPU seconds (user + system of
the child processes) are printed beside it: on an idle machine with as many cores as
processes, wall ≈ CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], cwd: Path = ROOT) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall and CPU seconds of one command (a child process and its children)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - t0, _children_cpu() - c0, proc


def bench_campaign(extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "kvfault.faults.cli", "run", "--no-progress", *extra]
    wall, cpu, proc = timed(cmd)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()
    label = "kvfault run " + " ".join(extra) if extra else "kvfault run (default)"
    print(f"{label:44s} wall {wall:6.2f} s   cpu {cpu:6.2f} s   exit {proc.returncode}   [{last}]")


def bench_sweep(label: str, args: list[str], cwd: Path, few: int = 1, many: int = 9) -> None:
    """Cost of one more seed: (sweep over ``many`` seeds - sweep over ``few``) / the
    difference, so the sweep's own fixed cost cancels out."""
    base = [sys.executable, "-m", "kvfault.faults.cli", "sweep"]
    w1, c1, p1 = timed([*base, "--hashseeds", f"0-{few - 1}", "--", *args], cwd)
    w2, c2, p2 = timed([*base, "--hashseeds", f"0-{many - 1}", "--", *args], cwd)
    n = many - few
    print(
        f"{label:44s} per extra seed: wall {(w2 - w1) / n:5.2f} s   cpu {(c2 - c1) / n:5.2f} s"
        f"   ({many} seeds: wall {w2:.2f} s, exit {p2.returncode})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-campaign", action="store_true")
    ap.add_argument("--seeds", default=None, help="--seeds for the campaign (default: its default)")
    ap.add_argument("--workers", default=None, help="also time `kvfault run -n WORKERS`")
    args = ap.parse_args()
    print(
        f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f}"
    )
    if not args.skip_campaign:
        extra = ["--seeds", args.seeds] if args.seeds else []
        bench_campaign(extra)  # -j auto: one forked worker per usable CPU
        bench_campaign([*extra, "-j", "1"])  # one process
        if args.workers:
            bench_campaign([*extra, "-n", args.workers])
    # A lean child loads no plugin its test does not use (see cpu_tests/faults/test_sweep.py).
    lean = ["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:faker",
            "-p", "no:xdist", "--assert=plain"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kvfault-bench-") as tmp:
        Path(tmp, "test_trivial.py").write_text("def test_trivial():\n    pass\n")
        bench_sweep("sweep: trivial test, lean child", [*lean, "test_trivial.py"], Path(tmp))
        bench_sweep("sweep: trivial test, every plugin", ["-q", "test_trivial.py"], Path(tmp))
    hash_order = [
        "cpu_tests/faults/injectors/test_hash_order.py",
        "-k",
        "loads_dispatched_together",
    ]
    bench_sweep("sweep: 8-loads hash-order test, project cfg", [*hash_order, "-q"], ROOT)
    bench_sweep(
        "sweep: 8-loads hash-order test, lean child", [*hash_order, *lean, "--noconftest"], ROOT
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
