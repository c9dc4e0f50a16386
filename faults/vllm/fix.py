"""kvfault's demonstration guard for vLLM 0.32's completion handling
(docs/vllm/findings.md), as a wrapper at one function:
``Scheduler._update_from_kv_xfer_finished``.

vLLM asserts that every ``finished_recving`` names a live request that is waiting for
its load (or finished), and that every ``finished_sending`` names a live request.
LMCache's connector reports every engine-finished request in ``finished_sending``,
including requests it never stored and requests whose retrieve is still pending, so a
request that finishes while its load is in flight (an abort, a failed load) is freed by
that report and the load's completion then fails an assert.

The guard hands vLLM's own function only the first load completion of each live
request, only send completions of live requests, and drops (does not hold back) the
send completion of a request whose load is still outstanding (its load completion
frees it instead), also when both come in one output. A request id that is freed, or
that waits for a load again, may complete a load again. vLLM's code runs unchanged on
what is left. It shows where the crashes come from; a real fix needs LMCache's
connector and vLLM's scheduler (docs/vllm/findings.md, "The guard").
"""

from __future__ import annotations

import dataclasses
from typing import Any


def guard_completions(scheduler: Any, log: Any = None) -> None:
    """Wrap ``scheduler._update_from_kv_xfer_finished`` (this instance only)."""
    original = scheduler._update_from_kv_xfer_finished
    consumed: set[str] = set()  # requests whose load completion vLLM already applied
    awaiting: set[str] = set()  # requests seen waiting for a load not yet completed

    def _update_from_kv_xfer_finished(kv_connector_output: Any) -> None:
        from vllm.v1.request import RequestStatus

        live = scheduler.requests
        waiting = {
            rid for rid, r in live.items() if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
        }
        # A freed id forgets its load (the id may come again); a request waiting for
        # a load again (preempted, then looked up anew) may complete that load.
        consumed.intersection_update(live)
        consumed.difference_update(waiting)
        awaiting.update(waiting)
        awaiting.intersection_update(live)
        # Sends are filtered before the loads below leave ``awaiting``: LMCache may
        # report a request as finished loading and done sending in one output, and
        # vLLM frees a finished request on its load completion.
        send = {
            rid
            for rid in kv_connector_output.finished_sending or ()
            if rid in live and rid not in awaiting
        }
        recv = set()
        for rid in kv_connector_output.finished_recving or ():
            if rid in live and rid not in consumed:
                consumed.add(rid)
                recv.add(rid)
        awaiting.difference_update(recv)
        dropped = (set(kv_connector_output.finished_recving or ()) - recv) | (
            set(kv_connector_output.finished_sending or ()) - send
        )
        if dropped and log is not None:
            log.dropped_by_fix = sorted(set(getattr(log, "dropped_by_fix", [])) | dropped)
        original(
            dataclasses.replace(
                kv_connector_output, finished_recving=recv or None, finished_sending=send or None
            )
        )

    scheduler._update_from_kv_xfer_finished = _update_from_kv_xfer_finished
