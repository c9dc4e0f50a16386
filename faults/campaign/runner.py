"""The kvfault campaign (docs/design.md: #faults, #planted-regressions, #interfaces): what ``kvfault run`` runs and how it judges.

A campaign is a list of *targets*, each run over the same seeds. ``CaseRunner`` runs
one case on one tier and hands it to its target's kind to judge
(``kvfault.faults.campaign.kinds``: regression, fault, scenario, swarm, each with its judge);
a crash of the judge is an ERROR verdict, not a crash of the campaign.

Whether stopping was right is the properties' call (``no_false_stop``, ``liveness``);
in addition, every scenario and fault row meets the ending its catalog entry declares
(``Expect``: run to the end, stop with a named error on a named operation within a
bound, or refuse to start with a named error), and a regression's legacy run ends as
its entry declares; any other ending fails the row and names what happened. This
module does no I/O: the session (``kvfault.faults.campaign.session``) runs the cases, in
this process or over workers.
"""

from __future__ import annotations

import time
import traceback

from kvfault.faults.campaign.execute import Executor, JudgedRun, default_executor, run_case
from kvfault.faults.campaign.kinds import kind_of
from kvfault.faults.campaign.outcomes import CaseOutcome
from kvfault.faults.campaign.targets import Case, Target
from kvfault.faults.verdicts import Verdict

ERROR = Verdict.ERROR


class CaseRunner:
    """Runs and judges cases on one tier (``executor``; default: the default tier's).
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
        if keep_runs not in ("failing", "all", "none"):
            raise ValueError(f"keep_runs must be failing, all or none, got {keep_runs!r}")
        self.keep_runs = keep_runs
        self.digests = digests
        self.executor = executor or default_executor()
        self._fixed: dict[tuple[str, int, int, str | None], JudgedRun] = {}

    def fixed(
        self, scenario: str, seed: int, scale: int = 1, stack: Target | None = None
    ) -> JudgedRun:
        """The plain run of ``scenario`` by the stack under test (``stack``'s: the fixed
        stack by default), computed once per runner."""
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
            out = kind_of(case.target).judge(self, case)
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
