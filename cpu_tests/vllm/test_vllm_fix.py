"""``faults/vllm/fix.py``'s guard on the two cases the tier's rows do not reach: a load
completion and a send completion for the same aborted request in one output, and a
request that loads a second time under the same id (preempted, then loaded again).
A stub scheduler records what the guard hands vLLM's function; vLLM's own
``KVConnectorOutput`` and ``RequestStatus`` are used."""

from __future__ import annotations

from types import SimpleNamespace

from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import RequestStatus

from kvfault.faults.vllm.fix import guard_completions


class _Scheduler:
    """What the guard touches of vLLM's ``Scheduler``: its live requests and the
    function it wraps (here: record what it was handed)."""

    def __init__(self) -> None:
        self.requests: dict[str, SimpleNamespace] = {}
        self.handed: list[tuple[set[str], set[str]]] = []

    def _update_from_kv_xfer_finished(self, out: KVConnectorOutput) -> None:
        self.handed.append((set(out.finished_recving or ()), set(out.finished_sending or ())))


def _step(s: _Scheduler, recv: set[str] = frozenset(), send: set[str] = frozenset()):
    s._update_from_kv_xfer_finished(
        KVConnectorOutput(finished_recving=set(recv) or None, finished_sending=set(send) or None)
    )
    return s.handed[-1]


def test_a_load_and_a_send_in_one_output_pass_only_the_load() -> None:
    # LMCache reports an aborted request as finished loading and done sending in one
    # output when its load lands the step after the abort: vLLM frees the request on
    # the load (it is finished) and would then assert on the send.
    s = _Scheduler()
    guard_completions(s)
    s.requests["a"] = SimpleNamespace(status=RequestStatus.WAITING_FOR_REMOTE_KVS)
    assert _step(s) == (set(), set())
    s.requests["a"].status = RequestStatus.FINISHED_ABORTED
    assert _step(s, recv={"a"}, send={"a"}) == ({"a"}, set())


def test_a_second_load_under_the_same_id_is_passed_and_a_repeat_is_not() -> None:
    s = _Scheduler()
    guard_completions(s)
    s.requests["a"] = SimpleNamespace(status=RequestStatus.WAITING_FOR_REMOTE_KVS)
    assert _step(s, recv={"a"}) == ({"a"}, set())
    s.requests["a"].status = RequestStatus.RUNNING
    assert _step(s, recv={"a"}) == (set(), set())  # a repeat while running: dropped
    s.requests["a"].status = RequestStatus.PREEMPTED  # computed tokens reset
    assert _step(s, recv={"a"}) == (set(), set())  # no load outstanding: still dropped
    s.requests["a"].status = RequestStatus.WAITING_FOR_REMOTE_KVS  # loads again
    assert _step(s, recv={"a"}) == ({"a"}, set())


def test_a_freed_id_forgets_its_load() -> None:
    s = _Scheduler()
    guard_completions(s)
    s.requests["a"] = SimpleNamespace(status=RequestStatus.WAITING_FOR_REMOTE_KVS)
    assert _step(s, recv={"a"}) == ({"a"}, set())
    del s.requests["a"]
    assert _step(s, recv={"a"}, send={"a"}) == (set(), set())  # freed: nothing passes
    s.requests["a"] = SimpleNamespace(status=RequestStatus.FINISHED_ERROR)  # the id again
    assert _step(s, recv={"a"}) == ({"a"}, set())
