"""The one campaign loop (faults/campaign/session.py) behind a toy backend: what every
backend gets from the session without writing it itself."""

from __future__ import annotations

import signal
import socket
from itertools import count
from pathlib import Path

import pytest

from kvfault.faults.campaign import CaseOutcome, scenario_target
from kvfault.faults.campaign.artifacts import CampaignArtifacts, artifact_path, read_artifact
from kvfault.faults.campaign.pool import ForkPool, can_fork
from kvfault.faults.campaign.runner import CaseRunner
from kvfault.faults.campaign.session import InProcess, Session, run_session
from kvfault.faults.campaign.targets import Case
from kvfault.faults.processes import Interrupted
from kvfault.faults.verdicts import Verdict

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

    def abandon(self, token: object) -> None:
        self.calls.append(("abandon", token))


class Backwards:
    """Runs nothing: hands the cases back newest first, the last one as a dead worker's."""

    def run(self, session: Session) -> None:
        cases = [Case(t, s) for s in session.seeds if session.may_start(s) for t in session.targets]
        for c in cases:
            session.stage(c)
            session.stage(c)  # once: a case handed out again keeps its staging
        for c in cases:
            session.starting(c)
        for c in reversed(cases[1:]):
            session.finished(c, CaseOutcome(c, Verdict.PASS))
        session.lost(cases[0], "it was killed")


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


def test_xdist_in_a_budget_sends_seeds_in_waves_and_none_once_spent(monkeypatch):
    # A budget under -n/--tx: the fan-out gets a first wave of seeds, then doubling ones,
    # and none once the budget is spent (each wave here takes 0.2 s of a 0.3 s budget on
    # a clock of the test's own): 100,000 seeds are not all handed to pytest to be
    # collected and skipped.
    from types import SimpleNamespace

    import kvfault.faults.campaign.xdist as xdist

    now = [0.0]
    waves = []

    def fan_out(task, items, *, deadline_s=None, on_result=None, **kw):  # type: ignore[no-untyped-def]
        waves.append((len(items), deadline_s))
        now[0] += 0.2

    monkeypatch.setattr(xdist, "fan_out", fan_out)
    monkeypatch.setattr(xdist, "time", SimpleNamespace(monotonic=lambda: now[0]))
    xdist.Xdist(workers="2").run(Session(TARGETS, range(100_000), budget_s=0.3))
    assert waves == [(xdist.FIRST_WAVE, 0.3), (2 * xdist.FIRST_WAVE, pytest.approx(0.1))]
    waves.clear()
    xdist.Xdist(workers="2").run(Session(TARGETS, range(100_000)))  # no budget: one fan-out
    assert waves == [(100_000 * len(TARGETS), None)]


# -- a crash of kvfault keeps the case's staged artifact; only an interrupt undoes it ----

# (what escapes the case, whether its artifact stays): an ordinary exception is a bug in
# kvfault, whose artifact the user needs to replay it; Ctrl-C, a stop signal
# (faults.processes.Interrupted is a KeyboardInterrupt) and a SystemExit (a pool
# worker's SIGTERM unwinding) leave a case with no verdict to keep.
ENDINGS = [
    pytest.param(RuntimeError("a bug in kvfault"), True, id="crash"),
    pytest.param(KeyboardInterrupt(), False, id="ctrl-c"),
    pytest.param(Interrupted(15), False, id="sigterm"),
    pytest.param(SystemExit(143), False, id="system-exit"),
]
CASE = Case(TARGETS[0], 0)


def _left(directory: Path, kept: bool) -> None:
    left = sorted(directory.glob("*.json"))
    if not kept:
        assert left == []
        return
    assert [p.name for p in left] == [artifact_path(CASE, directory).name]
    case, _ = read_artifact(left[0])  # whole, and it replays the case that crashed
    assert case.id == CASE.id


def _campaign(where: Path) -> None:
    run_session([CASE.target], [CASE.seed], InProcess(), artifacts=CampaignArtifacts(where))


def _repro(where: Path) -> None:
    from kvfault.faults.repro import reproduce

    reproduce(CASE, where)


@pytest.mark.parametrize("command", [_campaign, _repro], ids=["run", "repro"])
@pytest.mark.parametrize("escape, kept", ENDINGS)
def test_in_process_a_crash_keeps_the_staged_artifact_and_an_interrupt_undoes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, escape: BaseException, kept: bool, command
) -> None:
    def run(self: CaseRunner, case: Case) -> CaseOutcome:
        raise escape

    monkeypatch.setattr(CaseRunner, "run", run)
    with pytest.raises(type(escape)):
        command(tmp_path / "artifacts")
    _left(tmp_path / "artifacts", kept)


@pytest.mark.parametrize("escape, kept", ENDINGS)
def test_on_an_xdist_worker_a_crash_keeps_the_staged_artifact_and_an_interrupt_undoes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, escape: BaseException, kept: bool
) -> None:
    from kvfault.faults.campaign import xdist

    def run(self: CaseRunner, case: Case) -> CaseOutcome:
        raise escape

    monkeypatch.setattr(CaseRunner, "run", run)
    payload = {
        "targets": [CASE.target.as_json()],
        "seeds": [CASE.seed],
        "host": socket.gethostname(),  # the host that stages artifacts
        "artifacts": str(tmp_path / "artifacts"),
    }
    with pytest.raises(type(escape)):
        xdist.cases_task(payload)
    _left(tmp_path / "artifacts", kept)


@pytest.mark.skipif(not can_fork(), reason="the pool forks its workers")
@pytest.mark.parametrize("escape, kept", ENDINGS)
def test_in_the_pool_a_crash_keeps_the_running_cases_artifact_and_an_interrupt_undoes_it(
    tmp_path: Path, escape: BaseException, kept: bool
) -> None:
    # The parent fails while its worker runs the case: through the progress hook, the
    # first thing the parent calls once the case has started.
    def progress(done: int, total: int, label: str) -> None:
        raise escape

    store = CampaignArtifacts(tmp_path / "artifacts")
    with pytest.raises(type(escape)):
        run_session([CASE.target], [CASE.seed], ForkPool(1), artifacts=store, progress=progress)
    _left(tmp_path / "artifacts", kept)


class StopInside(CampaignArtifacts):
    """Artifacts that get Ctrl-C in the middle of a call: once a case's staging is on
    disk but not yet returned, or as a case's outcome is being recorded."""

    def __init__(self, directory: Path, where: str):
        super().__init__(directory)
        self.where = where

    def before(self, case: Case) -> tuple[Path, bytes | None]:
        staged = super().before(case)
        if self.where == "staging":
            signal.raise_signal(signal.SIGINT)
        return staged

    def after(self, case: Case, outcome: CaseOutcome, staged: object) -> None:
        if self.where == "outcome":
            signal.raise_signal(signal.SIGINT)
        super().after(case, outcome, staged)  # type: ignore[arg-type]


@pytest.fixture
def ctrl_c_raises():
    # Python ignores SIGINT when it starts ignored (a background job of a script, as CI
    # may run it): make it raise KeyboardInterrupt here, as at a terminal.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


BACKENDS = [pytest.param(InProcess, id="in-process")]
if can_fork():
    BACKENDS.append(pytest.param(lambda: ForkPool(2), id="pool"))


@pytest.mark.parametrize("where", ["staging", "outcome"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_inside_a_staging_or_an_outcome_lands_after_it_and_leaves_no_artifact(
    tmp_path: Path, backend, where: str, ctrl_c_raises: None
) -> None:
    # CI once found a passing case's artifact left after Ctrl-C under -j 2: the signal
    # had landed while the parent recorded the case's outcome, before it dropped it.
    store = StopInside(tmp_path / "artifacts", where)
    with pytest.raises(KeyboardInterrupt):
        run_session(TARGETS, [0, 1], backend(), artifacts=store)
    assert sorted((tmp_path / "artifacts").glob("*.json")) == []


@pytest.mark.parametrize("where", ["staging", "outcome"])
def test_on_an_xdist_worker_ctrl_c_inside_a_staging_or_an_outcome_leaves_no_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, ctrl_c_raises: None
) -> None:
    from kvfault.faults.campaign import xdist

    monkeypatch.setattr(xdist, "CampaignArtifacts", lambda d: StopInside(d, where))
    payload = {
        "targets": [CASE.target.as_json()],
        "seeds": [0, 1],
        "host": socket.gethostname(),
        "artifacts": str(tmp_path / "artifacts"),
    }
    with pytest.raises(KeyboardInterrupt):
        xdist.cases_task(payload)
    assert sorted((tmp_path / "artifacts").glob("*.json")) == []


def test_an_interrupted_repro_leaves_an_artifact_that_was_there_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvfault.faults.campaign.artifacts import write_artifact
    from kvfault.faults.repro import reproduce

    before = write_artifact(CASE, tmp_path).read_bytes()  # a reviewer's, from an earlier repro

    def run(self: CaseRunner, case: Case) -> CaseOutcome:
        raise KeyboardInterrupt

    monkeypatch.setattr(CaseRunner, "run", run)
    with pytest.raises(KeyboardInterrupt):
        reproduce(CASE, tmp_path)
    assert artifact_path(CASE, tmp_path).read_bytes() == before


@pytest.mark.parametrize("seed", [-1, 2**40, "x", True, 1.0])
def test_the_library_refuses_a_seed_the_command_line_refuses(seed) -> None:
    from kvfault.faults.errors import KvfaultError

    with pytest.raises(KvfaultError, match="a seed is a whole number from 0 to 4294967295"):
        run_session(TARGETS, [0, seed])


def test_an_unknown_scenario_is_a_kvfault_error_in_one_line() -> None:
    from kvfault.faults.campaign.execute import run_case
    from kvfault.faults.catalog import UnknownName

    with pytest.raises(UnknownName, match="unknown scenario 'nope'; known: two_servers"):
        run_case("nope", 0)
