"""Benchmark: the simulator's cost against a scenario's scale, and the default campaign.

    python benchmarks/bench_scale.py [--scales 1,4,16,64] [--scenario restart_burst]
                                     [--repeat N] [--campaign-runs N] [--skip-campaign]

For each scale K, one run of the scenario at ``--scale K`` (the restart burst: 64*K
restores and 2*K cold prompts) on the fixed stack, then its properties checked (all
but determinism, which is a second run) and its trace digested. The table gives the
restores, the trace events, the run's wall and CPU seconds, events per second of the
whole run and of the engine loop alone (``EngineOutcome.wall_seconds``: no workload
generation), and the CPU seconds of checking and digesting the trace. Under it, the
largest scale's events per CPU-second and per wall-second of the whole run, against
the target of 100,000. With scales 4, 16 and 64 it prints
``(T(64) - T(16)) / (T(16) - T(4))``: 4 when the cost is linear in the scale, 16 when
quadratic (target: at most 6). Last, ``kvfault run`` (the default campaign) in a
subprocess, wall and CPU seconds, over one worker per usable CPU (``-j auto``, the
default) and in one process (``-j 1``) (target: under 10 s wall on 2 cores).

Wall time depends on what else the machine runs: CPU seconds are printed beside it,
and ``--repeat`` keeps each scale's fastest run. The garbage collector is set as
``kvfault run`` sets it.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_EVENTS_S = 100_000  # trace events per second on the 4,096-restore burst
sys.path.insert(0, str(ROOT))

from kvfault.faults.argtypes import scales  # noqa: E402


def measure(scenario: str, scale: int) -> dict[str, float]:
    """One run at ``scale``: sizes and seconds."""
    from kvfault.faults.campaign import check, properties_of, run_scenario
    from kvfault.faults.properties import Prop
    from kvfault.reference import Ev

    t0, c0 = time.perf_counter(), time.process_time()
    run = run_scenario(scenario, 0, scale=scale)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # Checking and digesting are single-threaded and in-process: CPU seconds, which
    # other processes on the machine do not inflate.
    c1 = time.process_time()
    violations = check(run, [p for p in properties_of(scenario) if p != Prop.DETERMINISM])
    check_s = time.process_time() - c1
    c2 = time.process_time()
    run.trace.digest()
    digest_s = time.process_time() - c2
    if violations:
        raise SystemExit(f"{scenario} at scale {scale}: {violations[0]}")
    events = len(run.trace.events)
    restart = max((i for i, e in enumerate(run.trace.events) if e.kind is Ev.RESTART), default=0)
    engine_s = sum(o.wall_seconds for o in run.outcomes)
    return {
        "scale": scale,
        "restores": sum(1 for e in run.trace.events[restart:] if e.kind is Ev.DISPATCH),
        "events": events,
        "wall": wall,
        "cpu": cpu,
        "engine": engine_s,
        "check": check_s,
        "digest": digest_s,
    }


def table(rows: list[dict[str, float]]) -> str:
    head = (
        "| scale | restores | trace events | wall s | cpu s | events/s (run) "
        "| events/cpu-s (run) | events/s (engine loop) | check cpu s | digest cpu s |"
    )
    out = [head, "|" + "---|" * 10]
    for r in rows:
        out.append(
            f"| {r['scale']} | {r['restores']:,} | {r['events']:,} | {r['wall']:.2f} "
            f"| {r['cpu']:.2f} | {r['events'] / r['wall']:,.0f} | {r['events'] / r['cpu']:,.0f} "
            f"| {r['events'] / r['engine']:,.0f} | {r['check']:.2f} | {r['digest']:.2f} |"
        )
    return "\n".join(out)


def interpreter() -> str:
    """Which Python runs the simulator: the same code runs some 40% faster on a
    distribution's optimized build than on one compiled without profile guidance
    (docs/scale.md, "The interpreter's build")."""
    return f"python {platform.python_version()} ({sys.executable}), {platform.python_compiler()}"


def ratio(rows: list[dict[str, float]], key: str) -> float | None:
    by = {r["scale"]: r[key] for r in rows}
    if not {4, 16, 64} <= set(by) or by[16] == by[4]:
        return None
    return (by[64] - by[16]) / (by[16] - by[4])


def campaign(runs: int) -> None:
    """``kvfault run`` as a user runs it (``-j auto``: one forked worker per usable
    CPU) and in one process (``-j 1``), alternately, with the load average before each:
    the CPU seconds (the command and its workers) are the same work either way."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for i in range(runs):
        for jobs in ("auto", "1"):
            cmd = [sys.executable, "-m", "kvfault.faults.cli", "run", "--no-progress", "-j", jobs]
            load = os.getloadavg()[0]
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
            print(
                f"kvfault run -j {jobs:4s} (default campaign) #{i + 1}: wall {wall:.2f} s, "
                f"cpu {cpu:.2f} s, load average {load:.1f} before, exit {proc.returncode} "
                f"[{last.strip()}]"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=scales, default=[1, 4, 16, 64], metavar="K,K,...")
    parser.add_argument("--scenario", default="restart_burst")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="runs per scale; the fastest (by wall) is kept")  # fmt: skip
    parser.add_argument("--campaign-runs", type=int, default=2, metavar="N")
    parser.add_argument("--skip-campaign", action="store_true")
    args = parser.parse_args(argv)

    load = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"(other processes share the cores: wall > cpu means they took turns)"
    )
    print(interpreter())
    print(f"scenario {args.scenario}, seed 0, fixed stack\n")
    gc.freeze()  # as `kvfault run` does
    gc.set_threshold(50_000, 20, 20)
    measure(args.scenario, 1)  # imports and first-use costs stay out of the table
    rows = []
    for k in args.scales:
        best = min((measure(args.scenario, k) for _ in range(args.repeat)), key=lambda r: r["wall"])
        rows.append(best)
    print(table(rows))
    for key, label in (("wall", "wall"), ("cpu", "cpu")):
        r = ratio(rows, key)
        if r is not None:
            print(f"\n(T(64) - T(16)) / (T(16) - T(4)) by {label}: {r:.2f}", end="")
    top = rows[-1]
    print(
        f"\n\nat scale {top['scale']}: {top['events'] / top['cpu']:,.0f} trace events per "
        f"CPU-second of the whole run, {top['events'] / top['wall']:,.0f} per wall-second "
        f"(target: {TARGET_EVENTS_S:,})\n"
    )
    if not args.skip_campaign:
        campaign(args.campaign_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
