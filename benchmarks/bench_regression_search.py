"""How many hypothesis examples the property search needs to find each planted regression.

For every regression of ``kvfault.faults.regressions.legacy.REGRESSIONS`` a hypothesis search draws
cases and runs them with the regression's legacy rules until one violates the
regression's signature property, then shrinks it. Two searches per regression:

- ``known``:   the regression's own scenario; the search draws fault plans x seeds.
- ``scratch``: nothing known; the search draws the scenario too (every registered one),
               plus fault plans x seeds — what a property search finds from scratch.

Each search runs ``--trials`` times with different hypothesis seeds. Printed per
regression: examples until the first failing case (per trial, and the worst), examples
run in all including shrinking, and the shrunk case of the first trial. The fixed stack
is run on each shrunk case as a sanity check (it must hold the signature property).
Figures, not assertions: the target is to find every regression within hypothesis's
default 100 examples.

    python benchmarks/bench_regression_search.py            # 3 trials, both modes
    python benchmarks/bench_regression_search.py --trials 5 --mode scratch --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvfault.faults import SCENARIOS  # noqa: E402
from kvfault.faults.campaign import run_case  # noqa: E402
from kvfault.faults.injectors import FaultPlan  # noqa: E402
from kvfault.faults.properties import Prop  # noqa: E402
from kvfault.faults.regressions import REGRESSIONS  # noqa: E402
from kvfault.faults.strategies import WorkloadParams, fault_plans, workload_params  # noqa: E402


@dataclass
class Trial:
    first: int | None  # examples until the first failing case (None: not found)
    total: int  # examples run, shrinking included
    shrunk: tuple[WorkloadParams, FaultPlan] | None
    wall: float
    fixed_ok: bool | None  # the fixed stack holds the signature on the shrunk case


class _Found(Exception):
    pass


def _props(scenario: str, signature: str) -> tuple[str, ...]:
    props = SCENARIOS[scenario].properties
    # determinism doubles every run; leave it out unless it is the signature
    return tuple(p for p in props if p != Prop.DETERMINISM or signature == Prop.DETERMINISM)


def search(name: str, mode: str, trial: int, max_examples: int) -> Trial:
    reg = REGRESSIONS[name]
    scenarios = [reg.scenario] if mode == "known" else None
    strategy = st.tuples(workload_params(scenarios), fault_plans(seeds=st.just(0)))
    cache: dict[tuple[str, FaultPlan], bool] = {}
    calls, first, found = [0], [None], [None]

    def caught(work: WorkloadParams, plan: FaultPlan) -> bool:
        # One seed drives everything: the workload's seed is the plan's seed.
        plan = FaultPlan(plan.faults, work.seed)
        key = (work.scenario, plan)
        if key not in cache:
            res = run_case(
                work.scenario,
                plan.seed,
                rules=reg.rules,
                injectors=plan.injectors,
                properties=_props(work.scenario, reg.signature),
                request_map=plan.request_map(),
                replay_map=plan.replay_map(),
            )
            cache[key] = any(v.prop == reg.signature for v in res.violations)
        return cache[key]

    @hypothesis_seed(trial)
    @settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(strategy)
    def probe(case) -> None:
        calls[0] += 1
        work, plan = case
        if caught(work, plan):
            first[0] = first[0] or calls[0]
            found[0] = (work, FaultPlan(plan.faults, work.seed))
            raise _Found

    t0 = time.perf_counter()
    try:
        probe()
    except _Found:
        pass
    wall = time.perf_counter() - t0
    fixed_ok = None
    if found[0] is not None:
        work, plan = found[0]
        res = run_case(
            work.scenario,
            plan.seed,
            injectors=plan.injectors,
            properties=_props(work.scenario, reg.signature),
            request_map=plan.request_map(),
            replay_map=plan.replay_map(),
        )
        fixed_ok = not any(v.prop == reg.signature for v in res.violations)
    return Trial(first[0], calls[0], found[0], wall, fixed_ok)


def describe(shrunk: tuple[WorkloadParams, FaultPlan] | None) -> str:
    if shrunk is None:
        return "not found"
    work, plan = shrunk
    faults = ", ".join(f.describe() for f in plan.faults) or "no faults"
    return f"{work.scenario} seed {work.seed}: {faults}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="hypothesis seeds per search")
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--mode", choices=("known", "scratch", "both"), default="both")
    parser.add_argument("--regression", action="append", default=None, metavar="NAME")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    names = args.regression or list(REGRESSIONS)
    unknown = [n for n in names if n not in REGRESSIONS]
    if unknown:
        parser.error(f"unknown regression {unknown[0]!r}")
    modes = ("known", "scratch") if args.mode == "both" else (args.mode,)
    out: list[dict] = []
    t0 = time.perf_counter()
    print(
        f"{'regression':34s} {'mode':8s} {'first hit per trial':22s} {'worst':>5s} "
        f"{'total':>6s} {'wall s':>7s}  shrunk case (trial 0)"
    )
    for name in names:
        for mode in modes:
            trials = [search(name, mode, k, args.max_examples) for k in range(args.trials)]
            firsts = [t.first for t in trials]
            found = [f for f in firsts if f is not None]
            worst = max(found) if len(found) == len(firsts) else None
            row = {
                "regression": name,
                "mode": mode,
                "first": firsts,
                "worst": worst,
                "median": statistics.median(found) if found else None,
                "total": [t.total for t in trials],
                "wall_s": round(sum(t.wall for t in trials), 2),
                "shrunk": describe(trials[0].shrunk),
                "fixed_holds_on_shrunk": [t.fixed_ok for t in trials],
            }
            out.append(row)
            print(
                f"{name:34s} {mode:8s} {','.join('-' if f is None else str(f) for f in firsts):22s} "
                f"{'-' if worst is None else worst:>5} {max(row['total']):>6} {row['wall_s']:>7.1f}  "
                f"{row['shrunk']}"
                + (
                    "" if all(t.fixed_ok in (True, None) for t in trials) else "  [fixed fails too]"
                ),
                flush=True,
            )
    wall = time.perf_counter() - t0
    missed = [r for r in out if r["worst"] is None or r["worst"] > args.max_examples]
    print(
        f"\n{len(out) - len(missed)}/{len(out)} searches found their regression in every trial "
        f"within {args.max_examples} examples; {wall:.1f}s wall"
    )
    if args.json:
        args.json.write_text(json.dumps({"trials": args.trials, "rows": out}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
