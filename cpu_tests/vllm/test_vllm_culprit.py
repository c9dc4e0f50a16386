"""What a vllm-tier run's ``stop`` names when vLLM's scheduler raised: the report vLLM
was handling, read from the loop its raising line is in. vLLM's own
``Scheduler._update_from_kv_xfer_finished`` runs on a stub scheduler (its live
requests, and a ``_free_blocks`` that only forgets the request), with vLLM's own
``KVConnectorOutput`` and ``RequestStatus``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import RequestStatus

from kvfault.faults.vllm.stories import _culprit


class _Scheduler:
    def __init__(self, **requests: RequestStatus) -> None:
        self.connector = None
        self.requests = {rid: SimpleNamespace(status=s) for rid, s in requests.items()}
        self.finished_recving_kv_req_ids: set[str] = set()

    def _set_kv_fetch_stage(self, request: object, stage: object) -> None:
        pass

    def _free_blocks(self, request: object) -> None:
        rid = next(r for r, req in self.requests.items() if req is request)
        del self.requests[rid]


def _stop(s: _Scheduler, recv: set[str] = frozenset(), send: set[str] = frozenset()):
    out = KVConnectorOutput(finished_recving=set(recv) or None, finished_sending=set(send) or None)
    with pytest.raises(AssertionError) as caught:
        Scheduler._update_from_kv_xfer_finished(s, out)  # type: ignore[arg-type]
    return _culprit(caught.value)


def test_an_id_in_both_sets_that_vllm_freed_on_its_load_names_the_save() -> None:
    # stale_completion, abort_load_same_step: vLLM applies the load (frees the finished
    # request) and asserts in the finished_sending loop.
    s = _Scheduler(a=RequestStatus.FINISHED_ABORTED)
    assert _stop(s, recv={"a"}, send={"a"}) == ("a", 0, "save")


def test_an_id_in_both_sets_that_vllm_does_not_hold_names_the_load() -> None:
    # The finished_recving loop asserts first.
    assert _stop(_Scheduler(), recv={"a"}, send={"a"}) == ("a", 0, "load")


def test_a_repeated_load_and_a_lone_send_name_what_they_are() -> None:
    assert _stop(_Scheduler(a=RequestStatus.RUNNING), recv={"a"}) == ("a", 0, "load")
    assert _stop(_Scheduler(), send={"a"}) == ("a", 0, "save")


def _loops(out: SimpleNamespace) -> None:
    for req_id in (
        out.finished_recving
    ):  # fmt: skip
        assert req_id == "ok"
    for req_id in out.finished_sending:
        if req_id:
            assert req_id == "ok"


def test_the_loop_is_read_across_a_header_split_over_lines_and_nested_blocks() -> None:
    for recv, send, kind in ((["x"], [], "load"), (["ok"], ["x"], "save")):
        with pytest.raises(AssertionError) as caught:
            _loops(SimpleNamespace(finished_recving=recv, finished_sending=send))
        assert _culprit(caught.value) == ("x", 0, kind)
