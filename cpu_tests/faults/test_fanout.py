"""The one xdist fan-out (faults/fanout.py), run for real over local workers.

The tasks are stdlib functions (``math:factorial``, ``time:sleep``), so nothing here
ships a test function for the workers to import: the items are made by the plugin.
"""

from __future__ import annotations

import pytest

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
