"""The reference worker restoring on a real device, in real time, under faults (fix 5).

Deadlines are scaled down from the seed's 30 s so that a slow forward of real device
work (calibrated matrix products) costs about 1.5 s: the legacy deadline (counted from
the retrieve's submission) stops the engine and the fixed one (counted from the copy's
enqueue) survives. A fence that raises keeps the submission clock; a copy that does not
complete in time stops the engine with ``TransferUnprovable``. Every test waits for its
device work in teardown, so nothing stays queued.
"""

from __future__ import annotations

import pytest
import torch

from gpu_tests import device_stack as ds
from kvfault.faults.regressions.legacy import SubmissionDeadline
from kvfault.reference import Ev, Outcome, RestoreFenceError, TransferUnprovable
from kvfault.reference.rules import RestoreDeadline

DEADLINE_S = 1.0  # the seed's 30 s, scaled
SLOW_FORWARD_S = 1.5  # the first forward compiling, scaled: longer than the deadline
PROMPT_TOKENS = 4096  # 256 pages of 32 KiB: 8 MiB restored per load


@pytest.fixture
def rig_factory(device):
    rigs = []

    def build(deadline, method="auto"):
        # "rocm": the path a ROCm build takes (no CUDA runtime calls), forced on CUDA too
        runtime = "torch" if method == "rocm" else "auto"
        try:
            rig = ds.DeviceRig.build(
                device, deadline, method="auto" if method == "rocm" else method, runtime=runtime
            )
        except RuntimeError as exc:  # e.g. no batched DMA on HIP
            pytest.skip(f"restore method {method!r} not available here: {exc}")
        rigs.append(rig)
        return rig

    yield build
    for rig in rigs:
        rig.drain()
        assert rig.engine.stream.query(), "work left queued on the copy stream"


def _prompt(seed: int) -> tuple[int, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, 50_000, (PROMPT_TOKENS,), generator=g).tolist())


def _load(rig, req_id: str, seed: int):
    prompt = _prompt(seed)
    pages, sources = rig.store_prompt(prompt, seed)
    g = torch.Generator().manual_seed(seed + 7)
    blocks = torch.randperm(rig.kv.num_blocks, generator=g)[: len(pages)].tolist()
    return rig.load_op(req_id, prompt, len(pages) * rig.geometry.block_size, blocks), pages, sources


@pytest.mark.parametrize("method", ["auto", "rocm"])
@pytest.mark.parametrize("variant", ["legacy", "fixed"])
def test_slow_first_forward_stops_legacy_and_not_fixed(device_work, rig_factory, variant, method):
    deadline_cls = SubmissionDeadline if variant == "legacy" else RestoreDeadline
    rig = rig_factory(deadline_cls(DEADLINE_S), method)
    seed = ds.fresh_seed()
    load, pages, sources = _load(rig, "req-slow-forward", seed)
    ds.poison(rig.kv)
    rig.worker.start_load([load])  # retrieve submitted: the legacy clock starts here
    took = device_work.forward(SLOW_FORWARD_S)  # the first forward, on the device
    assert took > DEADLINE_S, f"precondition: the forward took {took:.2f}s"
    if variant == "legacy":
        with pytest.raises(TransferUnprovable) as stop:
            rig.worker.get_finished()  # retrieve terminal, copy enqueued ... and stopped
        assert stop.value.op == load.op
        assert stop.value.phase == "restore copy"
        assert stop.value.elapsed > DEADLINE_S
        assert [e.kind for e in rig.trace.of(Ev.COPY_ENQUEUE)] == [Ev.COPY_ENQUEUE]
    else:
        done = rig.worker.get_finished() + rig.poll_until_done()
        assert [(c.op, c.outcome) for c in done] == [(load.op, Outcome.FINISHED)]
        ds.check_restored(rig.kv, sources, list(load.blocks), seed)


def test_fence_that_raises_keeps_submission_clock_and_stops(rig_factory):
    rig = rig_factory(RestoreDeadline(DEADLINE_S / 2))
    seed = ds.fresh_seed()
    load, pages, sources = _load(rig, "req-fence", seed)
    rig.pool.free(pages[17])  # evicted after the lookup: the restore cannot be fenced
    rig.worker.start_load([load])
    with pytest.raises(TransferUnprovable) as stop:
        rig.poll_until_done(timeout_s=10 * DEADLINE_S)
    assert stop.value.op == load.op
    assert stop.value.phase == "restore copy"
    fence_errors = list(rig.trace.of(Ev.COPY_FENCE_ERROR))
    assert fence_errors and "evicted" in fence_errors[0].data["error"]
    assert not list(rig.trace.of(Ev.COPY_ENQUEUE))
    assert rig.engine.in_flight == 0  # nothing reached the device


class _FenceRaisesOnce:
    """Fault injector: the first enqueue's fence raises; later ones go through."""

    def __init__(self, inner):
        self.inner = inner
        self.fired = 0

    def enqueue(self, op, pages, blocks, state, req_id):
        if not self.fired:
            self.fired += 1
            raise RestoreFenceError(f"{op}: injected fence failure")
        return self.inner.enqueue(op, pages, blocks, state, req_id)

    def is_complete(self, ticket):
        return self.inner.is_complete(ticket)


def test_fence_raises_once_then_restore_completes(rig_factory):
    rig = rig_factory(RestoreDeadline(DEADLINE_S))
    injector = _FenceRaisesOnce(rig.engine)
    rig.worker.copy_engine = injector
    seed = ds.fresh_seed()
    load, pages, sources = _load(rig, "req-fence-once", seed)
    ds.poison(rig.kv)
    rig.worker.start_load([load])
    done = rig.poll_until_done()
    assert injector.fired == 1
    assert [(c.op, c.outcome) for c in done] == [(load.op, Outcome.FINISHED)]
    kinds = [e.kind for e in rig.trace.of(Ev.COPY_FENCE_ERROR, Ev.COPY_ENQUEUE, Ev.COPY_COMPLETE)]
    assert kinds == [Ev.COPY_FENCE_ERROR, Ev.COPY_ENQUEUE, Ev.COPY_COMPLETE]
    ds.check_restored(rig.kv, sources, list(load.blocks), seed)


@pytest.mark.parametrize("method", ["auto", "dma", "rocm"])
def test_copy_not_complete_in_time_stops_engine(device_work, rig_factory, method):
    deadline = DEADLINE_S / 2
    rig = rig_factory(RestoreDeadline(deadline), method)
    seed = ds.fresh_seed()
    load, pages, sources = _load(rig, "req-stuck-copy", seed)
    ds.poison(rig.kv)
    # The copy stream is stuck behind ~3 s of device work: the copy is enqueued at once
    # but cannot complete within the deadline.
    device_work.queue(6 * deadline, rig.engine.stream)
    rig.worker.start_load([load])
    with pytest.raises(TransferUnprovable) as stop:
        rig.poll_until_done(timeout_s=10 * deadline)
    assert stop.value.op == load.op
    assert stop.value.phase == "restore copy"
    assert stop.value.elapsed > deadline
    assert list(rig.trace.of(Ev.COPY_ENQUEUE)) and not list(rig.trace.of(Ev.COPY_COMPLETE))
    # After the stop the device finishes what was queued (teardown waits for it), and
    # the late copy is still byte-exact: nothing was left half-written or queued.
    rig.drain()
    assert rig.engine.in_flight == 1  # enqueued, never observed complete by the worker
    ds.check_restored(rig.kv, sources, list(load.blocks), seed)
