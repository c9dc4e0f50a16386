"""Run plain-data work items over pytest-xdist workers and hand their results back.

The one fan-out of kvfault (``kvfault run -n/--tx``, ``kvfault sweep -j/--tx``). The
caller names a *task* (``"package.module:function"``, importable on every worker) and
gives a list of ``WorkItem``s, each an id and a JSON-able payload. ``fan_out`` runs a
pytest session in this process whose only items are those work items; xdist spreads
them, over ``-n N`` local processes or over execnet gateways (``--tx popen``,
``--tx ssh=host//python=python3``), so many hosts share the work through xdist's own
engine. Each worker calls ``task(payload)``; the JSON of what it returns rides back on
the item's test report (``user_properties``), so no shared file system is needed.

No test functions ship in the library: this module is loaded on the workers as a
plugin (``-p kvfault.faults.fanout``), the items reach them through xdist's ``workerinput``,
and the plugin turns them into pytest items when pytest collects this very module
(``--pyargs kvfault.faults.fanout``). Every worker collects the same node ids, whatever its
host or install path (xdist insists on that).

A deadline stops *starting* items: a worker skips an item once the deadline has passed
(except the one item named ``always``, which runs whatever the time), and finishes the
item it is running. Deadlines travel as seconds
left, not clock readings, so hosts need no common clock.

Importing this module imports neither pytest nor xdist (the CLI imports it cheaply);
the session imports them when it runs.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import pytest  # imported where used: a fan-out's caller may never need it

    from kvfault.faults.processes import StopHandler

from kvfault.faults.errors import KvfaultError

__all__ = [
    "LEAN_SESSION",
    "FanoutError",
    "ItemResult",
    "WorkItem",
    "fan_out",
    "note",
    "tx_arg",
    "workers_arg",
]

# Options of the pytest sessions kvfault runs for itself (never a user's own test run):
# their items need neither hypothesis's plugin nor assertion rewriting, which every
# worker would pay for again.
# No tmpdir plugin: the work items need no tmp_path, and with it every session would
# leave a pytest-of-USER/pytest-N base directory behind in the temp dir.
LEAN_SESSION = ("-p", "no:hypothesispytest", "-p", "no:tmpdir", "--assert=plain")
_KEY = "kvfault_fanout"  # the workerinput entry: task, items, seconds left
_PROP = "kvfault_fanout"  # the user_properties entry carrying an item's result
_NOTE = "kvfault_fanout_note"  # the user_properties entry carrying a note (``note``)
_NODE = "kvfault-fanout"  # the collector's node id on every worker


class FanoutError(KvfaultError, ValueError):
    """The fan-out could not run (bad gateway spec, duplicate item ids): one line."""


@dataclass(frozen=True)
class WorkItem:
    """One unit of work: ``id`` names it (unique, no ``::``), ``payload`` is JSON-able
    data the task receives."""

    id: str
    payload: Any


@dataclass
class ItemResult:
    """What became of one item: its task's return value, or why there is none."""

    id: str
    value: Any = None
    error: str | None = None  # the task raised, its worker crashed, or it never ran
    skipped: bool = False  # not started: the deadline had passed
    worker: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.skipped


# Workers (or gateways) of one fan-out: each is a Python process with the stack
# imported (about 50 MB); more than this on one command is a typo, not a plan.
MAX_WORKERS = 256


def workers_arg(text: str) -> str:
    """``-n``/``-j`` as pytest-xdist reads them: a count (0: no workers, at most
    ``MAX_WORKERS``) or ``auto``. Raises ``ValueError`` with one line otherwise."""
    if text in ("auto", "logical"):
        return text
    if text.isdigit() and int(text) <= MAX_WORKERS:
        return str(int(text))
    if text.isdigit():
        raise ValueError(f"at most {MAX_WORKERS} workers, got {text}")
    raise ValueError(f"wants a number of workers (0: none) or 'auto', got {text!r}")


def gateway_count(spec: str) -> int:
    """How many gateways one ``--tx`` spec starts (``4*popen``: 4)."""
    count, star, _ = spec.partition("*")
    return int(count) if star and count.isdigit() else 1


def tx_arg(text: str) -> str:
    """An execnet gateway spec as pytest-xdist's ``--tx`` reads it (``popen``,
    ``3*popen``, ``ssh=HOST//python=python3``, ``socket=HOST:PORT``). Raises
    ``ValueError`` with one line for anything else."""
    import execnet

    if not text.strip():
        raise ValueError(
            f"bad gateway spec {text!r}: empty; write e.g. popen, 2*popen or "
            "ssh=HOST//python=python3"
        )
    count, star, rest = text.partition("*")
    if star and count.isdigit() and int(count) > MAX_WORKERS:
        raise ValueError(f"at most {MAX_WORKERS} gateways, got {text!r}")
    spec = rest if star and count.isdigit() and int(count) > 0 else text
    try:
        x = execnet.XSpec(spec)
    except Exception as exc:  # execnet's parser raises plain errors for odd text
        raise ValueError(f"bad gateway spec {text!r}: {exc}") from None
    if not (x.popen or x.ssh or x.socket or getattr(x, "vagrant_ssh", None)):
        raise ValueError(
            f"bad gateway spec {text!r}; write e.g. popen, 2*popen or ssh=HOST//python=python3"
        )
    return text


def fan_out(
    task: str,
    items: Sequence[WorkItem],
    *,
    workers: str | int | None = None,
    tx: Sequence[str] = (),
    rsyncdirs: Sequence[str] = (),
    deadline_s: float | None = None,
    always: str | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
    on_note: Callable[[str, Any], None] | None = None,
) -> tuple[list[ItemResult], str]:
    """Run ``task`` on every item's payload over xdist workers: ``workers`` local ones
    (a count or ``auto``), or one per execnet gateway spec in ``tx`` (``N*SPEC`` for N
    of them); ``rsyncdirs`` are sent to the remote gateways first. With ``deadline_s``,
    workers start no item later than that many seconds from now, except the item whose
    id is ``always`` (a budgeted campaign's ``Session.always_runs`` seed). ``on_result`` sees each result as it arrives, in completion order;
    ``on_note(item_id, value)`` each ``note`` a task sends while it runs, before that
    item's result (and even when its worker dies before it has one).

    Returns the results in ``items`` order (an item that never reported has an
    ``error``) and the session's own output, for diagnostics. Raises ``FanoutError``
    when the session could not start its workers, ``KeyboardInterrupt`` on Ctrl-C."""
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids) or any("::" in i for i in ids):
        raise FanoutError("work item ids must be unique and free of '::'")
    if not items:
        return [], ""
    if workers is not None and tx:
        raise FanoutError("give a number of workers or gateway specs (--tx), not both")
    if workers is None and not tx:
        raise FanoutError("no workers: give a number of workers or gateway specs (--tx)")
    import pytest

    spec = {"task": task, "items": [[i.id, i.payload] for i in items], "always": always}
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    stdout, stderr = sys.stdout, sys.stderr

    def report(result: ItemResult) -> None:
        if on_result:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                on_result(result)

    def noted(item_id: str, value: Any) -> None:
        if on_note:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                on_note(item_id, value)

    from kvfault.faults.processes import StopHandler

    # The calling command's stop handler (``processes.Signals``), if its layer is on top.
    controller = _Controller(spec, deadline, ids, report, noted, StopHandler.of(sys.unraisablehook))
    # No capture: a worker's stderr is then this process's, so what a worker says as it
    # dies (a hang guard's stacks) reaches the user instead of a capture file.
    # The config file goes as one `--config-file=...` word: for an ssh gateway (or one
    # with a chdir) xdist rewrites every argument naming an existing path relative to an
    # rsync root, and refuses `-c /dev/null` ("not relative to an rsync root").
    args = [
        "-p", __name__, "--pyargs", __name__, "-q", "-p", "no:cacheprovider", "--noconftest",
        f"--config-file={os.devnull}", *LEAN_SESSION, "--dist", "load", "--capture=no",
    ]  # fmt: skip
    if tx:
        for t in tx:
            args += ["--tx", t]
    else:
        args += ["-n", str(workers)]
    if deadline is not None:
        # Hand out items one by one, in order, rather than in up-front chunks: the
        # deadline, not the split, then decides which items run.
        args += ["--maxschedchunk", "1"]
    for d in rsyncdirs:  # absolute, for the same rewrite: a relative one is refused too
        args += ["--rsyncdir", os.path.abspath(d)]
    log = io.StringIO()
    # The session's own report (dots, xdist's lines, failures) is kept for diagnostics,
    # not shown: the caller prints the results its own way.
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        code = pytest.main(args, plugins=[controller])
    text = log.getvalue()
    if code == pytest.ExitCode.INTERRUPTED:
        # The signal's own exception (an ``Interrupted`` naming SIGTERM or SIGHUP), which
        # pytest caught: a plain KeyboardInterrupt would say SIGINT.
        raise controller.interrupt or KeyboardInterrupt()
    if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR) and not (
        controller.results
    ):
        raise FanoutError(f"pytest-xdist could not run: {_why(text)}")
    tail = "\n".join(text.rstrip().splitlines()[-30:])
    out = []
    for i in ids:
        if i not in controller.results:
            controller.results[i] = ItemResult(
                i, error=f"never ran (pytest exit {int(code)})\n{tail}"
            )
            report(controller.results[i])
        out.append(controller.results[i])
    return out, text


def _why(text: str) -> str:
    """The line of a failed session's output that says why."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        for mark in ("E   ", "INTERNALERROR> E ", "ERROR: "):
            if ln.startswith(mark.strip()) and len(ln) > len(mark.strip()) + 1:
                return ln.removeprefix("INTERNALERROR>").strip()
    return lines[-1] if lines else "no output"


class _Controller:
    """The plugin object of the session in the calling process: hands the items to
    each worker and turns the workers' reports into results."""

    def __init__(
        self,
        spec: dict[str, Any],
        deadline: float | None,
        ids: list[str],
        report: Callable[[ItemResult], None],
        noted: Callable[[str, Any], None],
        stop: StopHandler | None = None,
    ):
        self.spec = spec
        self.noted = noted
        self.stop = stop
        self.deadline = deadline
        self.ids = set(ids)
        self.report = report
        self.results: dict[str, ItemResult] = {}
        self.interrupt: BaseException | None = None

    def pytest_sessionstart(self, session: Any) -> None:
        _stops_over_pytests_hook(self.stop)

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.interrupt = excinfo.value

    def pytest_configure_node(self, node: Any) -> None:  # xdist hook, controller side
        left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        node.workerinput[_KEY] = {**self.spec, "seconds_left": left}

    def pytest_runtest_logreport(self, report: Any) -> None:
        name = report.nodeid.rpartition("::")[2]
        if name not in self.ids or name in self.results:
            return
        sent = dict(report.user_properties)
        if _NOTE in sent:  # a note on the way (``note``), not the item's end
            self.noted(name, json.loads(sent[_NOTE]))
            return
        if report.when == "call" or report.failed or report.skipped:
            worker = getattr(getattr(report, "node", None), "gateway", None)
            res = ItemResult(name, worker=getattr(worker, "id", ""))
            if report.passed:
                res.value = json.loads(dict(report.user_properties)[_PROP])
            elif report.skipped:
                res.skipped = True
            else:
                res.error = report.longreprtext or "failed"
            self.results[name] = res
            self.report(res)


# -- the worker side: module-level hooks (this module is the ``-p`` plugin) --------------


class _WorkerState:
    def __init__(self, spec: dict[str, Any]):
        from kvfault.faults.processes import StopHandler

        module, _, fn = spec["task"].partition(":")
        self.task: Callable[[Any], Any] = getattr(importlib.import_module(module), fn)
        self.items: list[list[Any]] = spec["items"]
        left = spec.get("seconds_left")
        self.deadline = None if left is None else time.monotonic() + left
        self.always: str | None = spec.get("always")
        self.running: Any = None  # the item whose task runs now, for ``note``
        # SIGINT, SIGTERM or SIGHUP (the controller's stop, execnet's own interrupt, a
        # hangup) end the session as Ctrl-C does, once: the next ones are dropped, so the
        # running item's finally blocks remove what it made (a kvfault-rpc-* directory)
        # without being cut short by the signal that follows.
        self.stop = StopHandler(lambda _signum: KeyboardInterrupt())


_STATE: dict[int, _WorkerState] = {}  # id(config) -> state: one per worker session


def pytest_configure(config: Any) -> None:
    spec = getattr(config, "workerinput", {}).get(_KEY)
    if spec is not None:
        from kvfault.faults.processes import STOP_SIGNALS

        state = _STATE[id(config)] = _WorkerState(spec)
        state.stop.install(STOP_SIGNALS)


def pytest_sessionstart(session: Any) -> None:
    state = _STATE.get(id(session.config))
    if state is not None:
        _stops_over_pytests_hook(state.stop)


def _stops_over_pytests_hook(stop: StopHandler | None) -> None:
    """pytest puts its own unraisable hook (which keeps what it gets, for a warning) over
    the one a ``StopHandler`` installed, for the session: a stop swallowed while the
    session runs must still reach its handler, so the handler's layer goes over pytest's
    too (pytest puts the one it found back when the session ends)."""
    if stop is not None:
        sys.unraisablehook = stop.over(sys.unraisablehook)


def note(value: Any) -> None:
    """From a task running on a fan-out worker: send ``value`` (JSON-able) to the
    calling process now, where ``fan_out``'s ``on_note`` sees it with the item's id.
    It arrives even if the worker dies afterwards, so a task can say how far it got.
    It may be called from another thread of the worker (a hang guard's). Anywhere
    else (no item running on a worker here) it does nothing."""
    for state in list(_STATE.values()):
        if state.running is not None:
            state.running.send_note(value)


def pytest_unconfigure(config: Any) -> None:
    _STATE.pop(id(config), None)


def _is_this_module(path: Path) -> bool:
    try:
        return path.samefile(__file__)
    except OSError:
        return False


def pytest_pycollect_makemodule(module_path: Path, parent: Any) -> Any:
    # Instead of importing this module as a test module, collect the work items.
    if id(parent.config) in _STATE and _is_this_module(module_path):
        return _collector().from_parent(parent, path=module_path, nodeid=_NODE)
    return None


_CLASSES: dict[str, type[pytest.File]] = {}


def _collector() -> type[pytest.File]:
    """The collector and item classes, made on first use (pytest is imported lazily)."""
    if not _CLASSES:
        import pytest

        class Item(pytest.Item):
            def __init__(self, *, payload: Any, **kw: Any):
                super().__init__(**kw)
                self.payload = payload

            def runtest(self) -> None:
                state = _STATE[id(self.config)]
                if state.deadline is not None and self.name != state.always:
                    if time.monotonic() >= state.deadline:
                        pytest.skip("the deadline had passed")
                state.running = self
                try:
                    value = state.task(self.payload)
                finally:
                    state.running = None
                self.user_properties.append((_PROP, json.dumps(value)))

            def send_note(self, value: Any) -> None:
                # A report of a phase that passed ("setup", which no count shows),
                # carrying the note: xdist sends a worker's reports back as they come.
                report = pytest.TestReport(
                    self.nodeid, self.location, {}, "passed", None, "setup",
                    user_properties=[(_NOTE, json.dumps(value))],
                )  # fmt: skip
                self.ihook.pytest_runtest_logreport(report=report)

            def repr_failure(self, excinfo: Any, style: Any = None) -> str:
                # The task's own traceback, not pytest's machinery around it.
                import traceback

                return "".join(traceback.format_exception(excinfo.value)).rstrip()

            def reportinfo(self) -> tuple[Any, int | None, str]:
                return self.path, None, self.name

        class Items(pytest.File):
            def collect(self) -> Any:
                for item_id, payload in _STATE[id(self.config)].items:
                    yield Item.from_parent(self, name=item_id, payload=payload)

        _CLASSES["items"] = Items
    return _CLASSES["items"]
