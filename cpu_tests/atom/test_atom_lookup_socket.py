"""The lookup socket taken away while the server runs (``lookup_socket_removed``,
``lookup_socket_stolen``): lmcache's client, once it reconnects, reaches no worker;
each later lookup waits its timeout and answers 0, ATOM recomputes, and every request
is answered right with nothing held. The control (the same lost reply, the socket
left alone) hits again: the misses are the socket's loss, not the story's."""

from __future__ import annotations

import dataclasses

import pytest

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.atom.scenarios import LOST_SOCKET_TIMEOUT_MS
from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.campaign.execute import run_case
from kvfault.reference.trace import Ev

ROWS = ("lookup_socket_removed", "lookup_socket_stolen")


@pytest.fixture(scope="module")
def runs(atom_src: str) -> dict[str, object]:
    control = dataclasses.replace(
        catalog.ROWS["lookup_socket_removed"], faults=FaultSpec(drop_lookup_reply=2)
    )
    out = {}
    with atom_executor(atom_src) as executor:
        chosen = [*((n, catalog.ROWS[n]) for n in (*ROWS, "lost_hit_reply")), ("control", control)]
        for name, row in chosen:
            faults = [row.factory(0)]
            out[name] = (
                run_case(row.scenario, 0, injectors=lambda f=faults: f, executor=executor),
                faults[0],
            )
    return out


def _lookups(res) -> dict[str, dict]:
    return {e.req_id: e.data for e in res.run.trace.of(Ev.LOOKUP)}


@pytest.mark.parametrize("name", ROWS)
def test_a_lost_socket_costs_a_timeout_per_lookup_and_every_request_ends_right(runs, name):
    res, fault = runs[name]
    assert fault.fired == 1
    assert [f"{v.prop}: {v.message}" for v in res.violations] == []
    lookups = _lookups(res)
    bound = LOST_SOCKET_TIMEOUT_MS / 1000
    for req in ("between", "again", "longer"):  # the lost reply, then the reconnected client
        assert lookups[req]["kv_hit"] == 0, lookups[req]
        assert lookups[req]["unanswered_s"] >= 0.9 * bound, lookups[req]
    assert set(res.run.outcomes[0].outputs) == {"first", "between", "again", "longer"}


def test_the_same_lost_reply_with_the_socket_left_alone_hits_again(runs):
    res, _ = runs["control"]
    lookups = _lookups(res)
    assert "unanswered_s" in lookups["between"]
    assert lookups["again"]["kv_hit"] >= 192 and "unanswered_s" not in lookups["again"]


def test_a_lost_reply_to_a_hit_leaves_its_pin(runs):
    """A lead at ffdf3bb5d, shared with lmcache: the worker pinned what it found,
    lmcache's synchronous client reports the timeout as 0, and the scheduler never
    lists the request for an unpin."""
    res, fault = runs["lost_hit_reply"]
    assert fault.fired == 1
    lookups = _lookups(res)
    assert lookups["again"]["kv_hit"] == 0 and "unanswered_s" in lookups["again"]
    assert [f"{v.prop}: {v.message}" for v in res.violations] == [
        "resources: A quiescent but still holds lookup_pins=1"
    ]
