"""The one campaign loop (faults/campaign/session.py) behind a toy backend: what every
backend gets from the session without writing it itself."""

from __future__ import annotations

from itertools import count

from faults.campaign import CaseOutcome, scenario_target
from faults.campaign.session import Session, run_session
from faults.campaign.targets import Case
from faults.verdicts import Verdict

TARGETS = [scenario_target("two_servers"), scenario_target("two_images")]


class Recorder:
    """Artifacts that record the calls the session makes."""

    directory = None

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def before(self, case: Case) -> str:
        self.calls.append(("before", case.id))
        return f"token-{case.id}"

    def after(self, case: Case, outcome: CaseOutcome, token: object) -> None:
        self.calls.append(("after", case.id, str(outcome.verdict), token))


class Backwards:
    """Runs nothing: hands the cases back newest first, the last one as a dead worker's."""

    def run(self, session: Session) -> None:
        cases = [Case(t, s) for s in session.seeds if session.may_start(s) for t in session.targets]
        tokens = {c.id: session.stage(c) for c in cases}
        for c in cases:
            session.starting(c)
        for c in reversed(cases[1:]):
            session.finished(c, CaseOutcome(c, Verdict.PASS), tokens[c.id])
        session.lost(cases[0], "it was killed", token=tokens[cases[0].id])


def test_outcomes_come_back_in_campaign_order_and_a_dead_worker_is_an_error():
    store, shown = Recorder(), []
    result = run_session(
        TARGETS, [0, 1], Backwards(), artifacts=store,
        progress=lambda done, total, label: shown.append((done, total, label)),
    )  # fmt: skip
    assert [c.case.id for c in result.cases] == [
        "scenario:two_servers@seed0", "scenario:two_servers@seed1",
        "scenario:two_images@seed0", "scenario:two_images@seed1",
    ]  # fmt: skip
    first = result.cases[0]
    assert first.verdict == Verdict.ERROR
    assert first.signature == "the worker running it failed: it was killed"
    assert ("after", first.case.id, "ERROR", f"token-{first.case.id}") in store.calls
    assert [c[0] for c in store.calls[:4]] == ["before"] * 4
    assert shown[-1] == (4, 4, "done") and [s for s in shown if s[2] == "done"] == [shown[-1]]
    assert result.exit_code == 2


def test_a_budget_lets_the_first_seed_run_and_starts_none_once_spent():
    ticks = count()  # every look at the clock is one second later
    session = Session(TARGETS, [5, 6, 7], budget_s=1.5, clock=lambda: float(next(ticks)))
    assert session.may_start(5)  # the first seed: no look at the clock
    assert session.may_start(5)  # a started seed runs whole: no look either
    assert session.may_start(6)  # 1 s
    assert not session.may_start(7)  # 2 s: spent
    assert session.may_start(6)
    assert session.started == {5, 6}
