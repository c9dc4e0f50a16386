"""``preempt_after_load`` resets vLLM's prefix cache only when the reset can preempt:
vLLM's ``Scheduler.reset_prefix_cache(reset_running_requests=True)`` preempts the
running requests and then raises ``RuntimeError`` unless every block is free, which a
request waiting for its load (or a finished one whose save is pending) prevents. Before,
the row reset as soon as a loaded request ran and, when another still waited for its
load, recorded a reset that raised and preempted nothing the test could follow."""

from __future__ import annotations

from types import SimpleNamespace

from vllm.v1.request import RequestStatus

from kvfault.faults.vllm.events import EventLog
from kvfault.faults.vllm.stories import Faults


class _Scheduler:
    """The state the story reads; ``reset_prefix_cache`` raises as vLLM 0.32's does
    when a request that is not running still holds blocks."""

    def __init__(self, **requests: RequestStatus) -> None:
        self.requests = {r: SimpleNamespace(request_id=r, status=s) for r, s in requests.items()}
        self.resets = 0

    @property
    def running(self) -> list[SimpleNamespace]:
        return [r for r in self.requests.values() if r.status == RequestStatus.RUNNING]

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        self.resets += 1
        if any(r.status != RequestStatus.RUNNING for r in self.requests.values()):
            raise RuntimeError("Failed to reset KV cache even when all the running ...")
        return True


def test_the_reset_waits_until_every_request_the_scheduler_holds_runs() -> None:
    sched = _Scheduler(**{"b0-s0": RequestStatus.RUNNING,
                          "b1-s0": RequestStatus.WAITING_FOR_REMOTE_KVS})  # fmt: skip
    server = SimpleNamespace(scheduler=sched, loads_applied=[("b0-s0", 0)])
    log = EventLog()
    faults = Faults("preempt_after_load", log)
    faults.after_step(server)  # b1's load is in flight: a reset would raise
    assert sched.resets == 0 and faults.fired == 0
    sched.requests["b1-s0"].status = RequestStatus.RUNNING
    faults.after_step(server)
    assert sched.resets == 1 and faults.fired == 1
    fault = next(e["data"] for e in log.events if e["kind"] == "fault")
    assert fault["preempted"] == ["b0-s0", "b1-s0"] and fault["reset"] is True
    faults.after_step(server)  # once per run
    assert sched.resets == 1
