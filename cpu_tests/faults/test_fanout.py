"""The one xdist fan-out (faults/fanout.py), run for real over local workers.

The tasks are stdlib functions (``math:factorial``, ``time:sleep``), so nothing here
ships a test function for the workers to import: the items are made by the plugin.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fresh_python import run_snippet

from kvfault.faults.fanout import FanoutError, WorkItem, fan_out, tx_arg, workers_arg


def test_results_come_back_in_item_order_with_each_failure_explained():
    seen = []
    items = [WorkItem(f"n{n}", n) for n in (3, 4, -1, 5)]
    results, _ = fan_out("math:factorial", items, workers=2, on_result=seen.append)
    assert [r.id for r in results] == ["n3", "n4", "n-1", "n5"]
    assert [r.value for r in results] == [6, 24, None, 120]
    assert [r.ok for r in results] == [True, True, False, True]
    assert "ValueError: factorial() not defined for negative values" in results[2].error
    assert sorted(r.id for r in seen) == sorted(r.id for r in results)  # each, as it came
    assert {r.worker for r in results} <= {"gw0", "gw1"}


def test_gateway_specs_spread_the_items():
    items = [WorkItem(str(n), n) for n in range(6)]
    results, _ = fan_out("math:factorial", items, tx=["popen", "popen"])
    assert [r.value for r in results] == [1, 1, 2, 6, 24, 120]


def test_after_the_deadline_no_worker_starts_an_item_but_the_one_that_always_runs():
    # A deadline of 0 s has passed before any worker starts: only the item named
    # ``always`` runs (a budget's first seed), whichever worker it reaches; not each
    # worker's first, which started seeds past a budget and left gaps in a soak.
    items = [WorkItem(str(n), 0.01) for n in range(8)]
    results, _ = fan_out("time:sleep", items, workers=2, deadline_s=0, always="0")
    ran = [r for r in results if not r.skipped]
    assert [r.id for r in ran] == ["0"] and ran[0].ok, results
    assert all(r.skipped and r.error is None for r in results if r not in ran)
    results, _ = fan_out("time:sleep", items, workers=2, deadline_s=0)
    assert all(r.skipped for r in results)


def test_no_deadline_runs_every_item():
    results, _ = fan_out("time:sleep", [WorkItem(str(n), 0.01) for n in range(4)], workers=2)
    assert all(r.ok for r in results)


def _fan_out_in_a_process(
    tmp_path: Path, module: str, source: str, code: str
) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a Python process of its own, where the task module ``module``
    (written from ``source`` into ``tmp_path``) is importable by the workers."""
    (tmp_path / f"{module}.py").write_text(source)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=120)  # fmt: skip


_NOTES = """
import os, threading
from kvfault.faults.fanout import note

def run(n):
    note({"step": 1})
    t = threading.Thread(target=note, args=({"step": 2, "from": "a thread"},))
    t.start()
    t.join()
    if n < 0:
        os._exit(3)  # a crash: no result, but the notes are home
    return n
"""


def test_a_tasks_notes_arrive_before_its_result_and_outlive_its_worker(tmp_path):
    """``note`` from a task (and from another thread of its worker, as a hang guard's)
    reaches ``on_note`` with the item's id as it is sent: before the item's result,
    and also when the worker dies before it has one. Outside a worker it does nothing."""
    from kvfault.faults.fanout import note

    note("nowhere")  # no item runs here: nothing to send, nothing raised
    code = (
        "from kvfault.faults.fanout import WorkItem, fan_out\n"
        "seen = []\n"
        "results, _ = fan_out('notes_task:run', [WorkItem('ok', 1), WorkItem('dies', -1)],\n"
        "    workers=1, on_note=lambda i, v: seen.append((i, v)),\n"
        "    on_result=lambda r: seen.append((r.id, r.ok)))\n"
        "for s in seen:\n"
        "    print(s)\n"
    )
    done = _fan_out_in_a_process(tmp_path, "notes_task", _NOTES, code)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for item, ok in (("ok", True), ("dies", False)):
        mine = [ln for ln in lines if ln.startswith(f"('{item}'")]
        assert mine == [
            f"('{item}', {{'step': 1}})",
            f"('{item}', {{'step': 2, 'from': 'a thread'}})",
            f"('{item}', {ok})",
        ], done.stdout


_STOP_IN_CALLBACK = """
import os, signal, time, weakref

def run(seconds):
    class Box:
        pass

    box = Box()
    weakref.finalize(box, os.kill, os.getpid(), signal.SIGTERM)  # its stop runs in there
    del box
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # ordinary code: where the stop must land
        time.sleep(0.01)
    return "never stopped"
"""


def test_a_workers_stop_swallowed_in_a_weakref_callback_still_stops_it(tmp_path):
    """A worker's stop lands in a weakref callback while its item runs, under pytest's
    own unraisable hook. Before, that hook kept the KeyboardInterrupt for a warning and
    the item ran on to its end (a worker the command stops then held on until its
    SIGKILL, and one whose stop landed there after pytest's hook was gone printed
    "Exception ignored in ..." on the command's stderr). Now it is sent again and ends
    the session as Ctrl-C does, with nothing said. In a process of its own: local
    workers start with the sys.path their controller had when it imported xdist."""
    code = (
        "from kvfault.faults.fanout import WorkItem, fan_out\n"
        "try:\n"
        "    print(fan_out('stop_in_callback:run', [WorkItem('a', 30)], workers=1)[0])\n"
        "except KeyboardInterrupt:\n"
        "    print('stopped')\n"
    )
    done = _fan_out_in_a_process(tmp_path, "stop_in_callback", _STOP_IN_CALLBACK, code)
    assert (done.stdout, done.stderr) == ("stopped\n", ""), done.stdout + done.stderr


def test_a_commands_stop_swallowed_in_a_callback_while_it_fans_out_still_stops_it():
    """The command's stop lands in a weakref callback of its own process while its
    fan-out's session runs (here: in what ``on_result`` leaves behind), under pytest's
    unraisable hook. Before, pytest's hook kept it and the fan-out ran every item to its
    end; now it ends the fan-out with the stop's own ``Interrupted``, nothing said."""
    code = (
        "import os, signal, weakref\n"
        "from kvfault.faults.fanout import WorkItem, fan_out\n"
        "from kvfault.faults.processes import Interrupted, Signals\n"
        "Signals().install()\n"
        "class Box:\n"
        "    pass\n"
        "def seen(result):\n"
        "    box = Box()\n"
        "    weakref.finalize(box, os.kill, os.getpid(), signal.SIGTERM)  # it lands in there\n"
        "    del box\n"
        "try:\n"
        "    items = [WorkItem('a', 0), WorkItem('b', 30)]\n"
        "    print(fan_out('time:sleep', items, workers=1, on_result=seen)[0])\n"
        "except Interrupted as exc:\n"
        "    print('stopped by', exc.signum)\n"
    )
    done = run_snippet(code, timeout_s=120)
    expected = f"stopped by {int(signal.SIGTERM)}\n"
    assert (done.stdout, done.stderr) == (expected, ""), done.stdout + done.stderr


@pytest.mark.parametrize(
    "items, kw, message",
    [
        ([WorkItem("a", 1), WorkItem("a", 2)], {"workers": 2}, "unique"),
        ([WorkItem("a::b", 1)], {"workers": 2}, "'::'"),
        ([WorkItem("a", 1)], {"workers": 2, "tx": ["popen"]}, "not both"),
        ([WorkItem("a", 1)], {}, "no workers"),
    ],
)
def test_bad_fan_outs_are_one_line(items, kw, message):
    with pytest.raises(FanoutError) as exc:
        fan_out("math:factorial", items, **kw)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_nothing_to_do_starts_no_session():
    assert fan_out("math:factorial", [], workers=2) == ([], "")


@pytest.mark.parametrize("text", ["popen", "3*popen", "ssh=host//python=python3", "socket=h:1"])
def test_gateway_specs_xdist_reads(text):
    assert tx_arg(text) == text


@pytest.mark.parametrize("text", ["bogus", "ssh=", "0*popen", ""])
def test_bad_gateway_specs(text):
    with pytest.raises(ValueError, match="bad gateway spec"):
        tx_arg(text)


@pytest.mark.parametrize("text, ok", [("0", True), ("4", True), ("auto", True), ("-1", False)])
def test_worker_counts(text, ok):
    if ok:
        assert workers_arg(text) == text
    else:
        with pytest.raises(ValueError, match="0: none"):
            workers_arg(text)
