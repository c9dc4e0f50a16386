"""The same scenarios' wall time on the in-process tier and on the real LMCache tier,
side by side. Prints figures; asserts nothing about time (a run whose properties fail
is marked, since its time would mean nothing).

Three ways to run one scenario with one seed:

- ``memory/virtual``: ``MemoryTier`` on the virtual clock (what ``kvfault run`` does);
- ``memory/real``: ``MemoryTier`` on a real clock at the real tier's time scale, so the
  scaled forwards and deadlines are really waited for;
- ``lmcache``: a real lmcache server through ``LMCacheTier`` (``kvfault.faults.lmcache.executor``), same
  clock and scale. ``lmcache - memory/real`` is what the real tier itself costs.

    /work/venv-lmc/bin/python benchmarks/bench_tiers.py [--scenarios a,b] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvfault.faults import (
    SCENARIOS,
    RunContext,  # noqa: E402
)
from kvfault.faults.campaign import check, run_case  # noqa: E402
from kvfault.faults.lmcache.executor import LMCacheExecutor  # noqa: E402
from kvfault.faults.lmcache.session import DEFAULT_TIME_SCALE, LMCacheSession, RunClock  # noqa: E402
from kvfault.faults.properties import Prop  # noqa: E402

DEFAULT_SCENARIOS = (
    "two_images",
    "chunk_aligned_hybrid",
    "real_restart_tier_kept",
    "restart_tier_kept",
    "real_restart_burst",
)


def real_properties(name: str) -> list[str]:
    """Every property of the scenario but determinism (real time is not deterministic)."""
    return [p for p in SCENARIOS[name].properties if p != Prop.DETERMINISM]


def memory_virtual(name: str, seed: int) -> tuple[float, float, bool]:
    res = run_case(name, seed, properties=real_properties(name))
    return res.wall_seconds, res.sim_seconds, res.ok


def memory_real(name: str, seed: int, scale: float) -> tuple[float, float, bool]:
    ctx = RunContext(seed=seed, clock_factory=RunClock, time_scale=scale)
    t0 = time.perf_counter()
    run = SCENARIOS[name].run(ctx)
    wall = time.perf_counter() - t0
    return wall, run.sim_seconds, not check(run, real_properties(name))


def lmcache(session: LMCacheSession, name: str, seed: int, scale: float):
    res = run_case(name, seed, executor=LMCacheExecutor(session, scale))
    return res.wall_seconds, res.sim_seconds, res.ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell (median shown)")
    ap.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE)
    args = ap.parse_args()
    names = [n for n in args.scenarios.split(",") if n]
    for n in names:
        if n not in SCENARIOS:
            raise SystemExit(f"unknown scenario {n!r}; known: {', '.join(SCENARIOS)}")

    t0 = time.perf_counter()
    with LMCacheSession() as session:
        print(
            f"lmcache server start + client import: {time.perf_counter() - t0:.2f} s "
            f"(server alone {session.start_seconds[0]:.2f} s)"
        )
        print(f"time scale {args.time_scale:g} (30 s deadline -> {30 * args.time_scale:g} s); "
              f"median of {args.repeat} runs, seed {args.seed}\n")  # fmt: skip
        header = (
            f"{'scenario':26s} {'memory/virtual':>15s} {'memory/real':>12s} "
            f"{'lmcache':>9s} {'lmcache-real':>13s} {'sim s (virtual)':>16s}"
        )
        print(header)
        print("-" * len(header))
        for name in names:
            cells = {"mv": [], "mr": [], "lm": []}
            sim, ok = 0.0, True
            for _ in range(args.repeat):
                w, sim, good = memory_virtual(name, args.seed)
                cells["mv"].append(w)
                ok &= good
                w, _, good = memory_real(name, args.seed, args.time_scale)
                cells["mr"].append(w)
                ok &= good
                w, _, good = lmcache(session, name, args.seed, args.time_scale)
                cells["lm"].append(w)
                ok &= good
            mv, mr, lm = (statistics.median(cells[k]) for k in ("mv", "mr", "lm"))
            flag = "" if ok else "  (a property failed)"
            print(
                f"{name:26s} {mv * 1000:12.1f} ms {mr:10.2f} s {lm:7.2f} s "
                f"{lm - mr:+11.2f} s {sim:16.1f}{flag}"
            )
    print(
        f"\ntotal {time.perf_counter() - t0:.1f} s; servers left: {session.leftovers() or 'none'}"
    )


if __name__ == "__main__":
    main()
