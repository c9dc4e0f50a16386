"""The kvfault campaign (docs/design.md: #faults, #planted-regressions, #interfaces): what ``kvfault run`` runs and how it judges.

A campaign is a list of *targets*, each run over the same seeds:

- ``regression`` — a planted regression A/B: its legacy rules and the fixed stack on
  its scenario. A seed is FIXED when the legacy run violates the regression's
  signature property and the fixed run holds every property.
- ``fault`` — the fixed stack under one injector of ``faults.injectors.plans.INJECTORS`` (on the
  injector's scenario with its defaults). A seed passes when every property holds
  *and* the injector fired: a fault that never fired is NOT EXERCISED, a failure.
- ``scenario`` — the fixed stack on a plain scenario (docs/design.md#scenarios).
- ``swarm`` — the fixed stack on a scenario under a random subset of injectors drawn
  from the seed (``faults.injectors.plans.swarm_plan``); an injector some swarm run enabled must
  fire in at least one of them.

Whether stopping was right is the properties' call (``no_false_stop``, ``liveness``);
in addition, every scenario and fault row meets the ending its catalog entry declares
(``Expect``: run to the end, stop with a named error on a named operation within a
bound, or refuse to start with a named error), and a regression's legacy run ends as
its entry declares; any other ending fails the row and names what happened. This module does no I/O: the session
(``faults.campaign.session``) runs the cases, in this process or over workers.
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from faults.campaign.outcomes import CaseOutcome, signature
from faults.campaign.targets import Case, Target
from faults.verdicts import Verdict

if TYPE_CHECKING:
    from faults.campaign.execute import CaseResult, Executor
    from faults.injectors.plans import FaultPlan

FIXED = Verdict.FIXED
STILL_FAILING = Verdict.STILL_FAILING
NOT_REPRODUCED = Verdict.NOT_REPRODUCED
ERROR = Verdict.ERROR
PASS = Verdict.PASS
FAIL = Verdict.FAIL
NOT_EXERCISED = Verdict.NOT_EXERCISED


class _Recording:
    """An injector factory that remembers what it built, so a case counts only the
    firings of *its* faults (a scenario's own injectors may share a name)."""

    def __init__(self, build: Callable[[], list[Any]]):
        self.build = build
        self.made: list[list[Any]] = []

    def __call__(self) -> list[Any]:
        injs = self.build()
        self.made.append(injs)
        return injs

    def fired(self) -> dict[str, int]:
        from faults.injectors.plans import fired_report

        return fired_report(self.made[0] if self.made else [])


class CaseRunner:
    """Runs and judges cases on one tier (``executor``; default: the in-process tier).
    Remembers fixed-stack runs without faults, so a regression's fixed side and the
    plain scenario with the same seed run once per campaign.

    ``keep_runs`` says which outcomes keep their runs (for timelines): ``"failing"``
    (cases that did not pass), ``"all"`` or ``"none"``. ``digests=False`` leaves every
    outcome's trace digest empty: only a report shows it, and digesting every judged
    run costs about a tenth of a campaign (the determinism re-run compares events, and
    digests both runs only when they differ, either way)."""

    def __init__(
        self, keep_runs: str = "failing", executor: Executor | None = None, digests: bool = True
    ):
        from faults.campaign.execute import MemoryExecutor

        if keep_runs not in ("failing", "all", "none"):
            raise ValueError(f"keep_runs must be failing, all or none, got {keep_runs!r}")
        self.keep_runs = keep_runs
        self.digests = digests
        self.executor = executor or MemoryExecutor()
        self._fixed: dict[tuple[str, int, int, str | None], CaseResult] = {}

    def fixed(
        self, scenario: str, seed: int, scale: int = 1, stack: Target | None = None
    ) -> CaseResult:
        """The plain run of ``scenario`` by the stack under test (``stack``'s: the fixed
        stack by default), computed once per runner."""
        from faults.campaign.execute import run_case

        key = (scenario, seed, scale, stack.stack if stack is not None else None)
        if key not in self._fixed:
            rules = stack.rules() if stack is not None else None
            res = run_case(scenario, seed, rules, executor=self.executor, scale=scale)
            if res.ok and self.keep_runs != "all":
                # The cache outlives the case: keep only what is judged.
                res.drop_run(keep_digest=self.digests)
            self._fixed[key] = res
        return self._fixed[key]

    def run(self, case: Case) -> CaseOutcome:
        """Run and judge ``case``; an exception becomes an ERROR verdict, not a crash."""
        t0 = time.perf_counter()
        try:
            out = self._judge(case)
        except Exception as exc:  # a crash of one case must not end the campaign
            out = CaseOutcome(
                case,
                ERROR,
                signature=f"{type(exc).__name__}: {exc}",
                error=traceback.format_exc(),
            )
        finally:
            self.executor.case_done()
        # A fixed run shared with an earlier target (cached) still shows its own cost.
        shared = out.fixed_result.wall_seconds if out.fixed_result is not None else 0.0
        out.wall_seconds = max(time.perf_counter() - t0, shared)
        if self.keep_runs == "none" or (self.keep_runs == "failing" and out.ok):
            out.legacy_result = out.fixed_result = None
        return out

    def _judge(self, case: Case) -> CaseOutcome:
        from faults.campaign.execute import run_case

        t = case.target
        if t.kind == "regression":
            return self._judge_regression(case)
        plan = case.plan()
        if t.kind == "fault" and t.tier == "lmcache":
            from faults.lmcache.wire_faults import WIRE_FAULTS

            info = WIRE_FAULTS[str(t.injector)]
            rec = _Recording(lambda: [info.factory(case.seed)])
            res = run_case(t.scenario, case.seed, injectors=rec, executor=self.executor)
            fired = rec.fired()
        elif plan is None:
            res = self.fixed(t.scenario, case.seed, t.scale, t)
            fired = {}
        else:
            rec = _Recording(plan.injectors)
            res = run_case(
                t.scenario,
                case.seed,
                rules=t.rules(),
                injectors=rec,
                # The hash-order shuffle salts request ids: the plan says how.
                request_map=_plan_map(plan, "request_map"),
                replay_map=_plan_map(plan, "replay_map"),
                executor=self.executor,
                scale=plan.scale,
            )
            fired = rec.fired()
        out = CaseOutcome.of_run(case, res, fired, digest=self.digests)
        if not res.ok:
            out.verdict, out.signature = FAIL, signature(res)
        elif t.kind == "fault" and not fired.get(str(t.injector)):
            # Checked before the expected ending: a fault that never fired cannot have
            # caused one, and "not exercised" says what is wrong.
            out.verdict = NOT_EXERCISED
            out.signature = f"{t.injector} never fired on {t.scenario} with seed {case.seed}"
        else:
            unmet = _unmet_ending(t, res)
            if unmet:
                out.verdict, out.signature = FAIL, unmet
        return out

    def _judge_regression(self, case: Case) -> CaseOutcome:
        from faults.campaign.execute import properties_of, run_case
        from faults.regressions.legacy import REGRESSIONS

        reg = REGRESSIONS[str(case.target.regression)]
        scenario = case.target.scenario
        props = properties_of(scenario, self.executor)
        if reg.signature != "determinism":
            # The legacy side only has to show its signature; its determinism re-run
            # would double the cost of every regression for nothing.
            props = [p for p in props if p != "determinism"]
        scale = case.target.scale
        legacy = run_case(
            scenario, case.seed, rules=reg.rules, properties=props, executor=self.executor,
            scale=scale,
        )  # fmt: skip
        fixed = self.fixed(scenario, case.seed, scale)
        out = CaseOutcome(
            case,
            FIXED,
            violations=[str(v) for v in fixed.violations],
            legacy_violations=[str(v) for v in legacy.violations],
            stop=fixed.stop,
            legacy_stop=legacy.stop,
            sim_seconds=legacy.sim_seconds + fixed.sim_seconds,
            digest=fixed.digest if self.digests else "",
            checked=list(fixed.checked),
            legacy_result=legacy,
            fixed_result=fixed,
        )
        caught = any(v.prop == reg.signature for v in legacy.violations)
        fixed_unmet = _unmet_ending(Target("scenario", scenario, scenario), fixed)
        legacy_unmet = _unmet_legacy(reg, legacy)
        if not fixed.ok:
            out.verdict, out.signature = STILL_FAILING, signature(fixed)
        elif fixed_unmet:
            out.verdict, out.signature = STILL_FAILING, f"fixed stack: {fixed_unmet}"
        elif not caught:
            out.verdict = NOT_REPRODUCED
            if legacy.violations:
                out.signature = f"legacy failed, but not with its signature {reg.signature}: {signature(legacy)}"
            else:
                out.signature = f"legacy passed every property; {reg.signature} expected to fail"
        elif legacy_unmet:
            out.verdict, out.signature = NOT_REPRODUCED, legacy_unmet
        else:
            out.signature = signature(legacy, reg.signature)
        return out


def _plan_map(plan: FaultPlan, which: str) -> Any:
    fn = getattr(plan, which, None)
    return fn() if fn is not None else None


def _unmet_ending(target: Target, res: CaseResult) -> str | None:
    """How the run's ending differs from what the target's catalog entry declares for
    the fixed stack (None: as declared). A scenario row answers to its scenario, a
    fault row to its injector; a swarm draws its faults and is judged by the
    properties alone. An entry that declares nothing fails: no row accepts anything."""
    if target.kind == "swarm":
        return None
    if target.kind == "fault" and target.tier == "lmcache":
        return _unmet_wire(target, res)
    if target.kind == "fault":
        from faults.injectors.plans import INJECTORS

        expect, who = (
            INJECTORS[str(target.injector)].expect,
            f"{target.injector} on {target.scenario}",
        )
    else:
        from faults.scenarios import SCENARIOS

        expect, who = SCENARIOS[target.scenario].expect, target.scenario
    if expect is None:
        return f"{who}: its catalog entry declares no expected ending"
    got = res.ending
    if got is None:
        return f"{who}: the run left no ending to judge"
    unmet = expect.unmet(got)
    return f"{who}: the fixed stack was {unmet}" if unmet else None


def _unmet_legacy(reg: Any, res: CaseResult) -> str | None:
    """How a regression's legacy run ended otherwise than its entry declares."""
    if not reg.legacy_expect:
        return f"{reg.name}: its catalog entry declares no expected legacy ending"
    got = res.ending
    if got is None or all(e.unmet(got) for e in reg.legacy_expect):
        want = " or ".join(str(e) for e in reg.legacy_expect)
        return f"{reg.name}: the legacy stack was expected to {want}; it {got or 'left no ending'}"
    return None


def _unmet_wire(target: Target, res: CaseResult) -> str | None:
    """A wire fault's ending on the real tier (``WireFaultInfo.expect``)."""
    from faults.lmcache.wire_faults import WIRE_FAULTS

    ends = WIRE_FAULTS[str(target.injector)].expect
    error = "TransferUnprovable"
    stopped = res.stop_error
    got = f"stopped with {stopped}" if stopped else "did not stop"
    what = None
    if ends == "stop" and stopped != error:
        what = f"stop with {error}"
    elif ends == "finish" and stopped:
        what, got = "finish", f"stopped: {res.stop}"
    elif ends == "either" and stopped not in (None, error):
        what = f"finish or stop with {error}"
    if what is None:
        return None
    return f"{target.injector} on {target.scenario}: the fixed stack must {what}; it {got}"
