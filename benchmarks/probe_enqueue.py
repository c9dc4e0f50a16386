"""Where one restore's time goes, and which engine settings pay, on the device.

GPU only; a helper for tuning ``reference/device/``, not the benchmark of record
(that is ``bench_gpu_restore.py``). For 128 MiB restores of random scattered blocks it
prints, median of ``--reps``:

- the host time of each phase of ``enqueue`` (index buffer, blocks, sources, issue);
- batched DMA issued as one call vs in doubling chunks from the first chunk's size
  (``dma_chunk``): wall ratio to a contiguous copy, and enqueue µs;
- with ``--shapes``: the gather kernel's shape (words per program, warps), device-side
  GB/s and wall ratio; with ``--upload``: indices uploaded first vs read in place.

    python benchmarks/probe_enqueue.py --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.bench_gpu_restore import Gate  # noqa: E402
from kvfault.reference import OperationId  # noqa: E402
from kvfault.reference.device import (  # noqa: E402
    DeviceKvPages,
    PinnedHostPool,
    TorchCopyEngine,
    launch,
)

KIB = 1024
OP = OperationId("probe", 1)


def setup(device, total, block_bytes, seed=7):
    n = total // block_bytes
    pool = PinnedHostPool(2 * n, (block_bytes // 2,), torch.bfloat16)
    kv = DeviceKvPages(2 * n, (block_bytes // 2,), torch.bfloat16, device)
    pool.buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, (pool.buffer.numel() * 2,), dtype=torch.uint8, device=device).view(
            pool.buffer.shape[0], -1
        )
    )
    g = torch.Generator().manual_seed(seed)
    slots = torch.randperm(2 * n, generator=g)[:n]
    blocks = tuple(torch.randperm(2 * n, generator=g)[:n].tolist())
    return n, pool, kv, pool.take(slots), blocks, slots


def timed(engine, batch, blocks, reps, gate=None):
    """(median wall s, median device s or None, median enqueue s)."""
    walls, devs, enq = [], [], []
    for i in range(reps + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        t = engine.enqueue(OP, batch, blocks, None, "p")
        t1 = time.perf_counter()
        while not engine.is_complete(t):
            pass
        if i >= 3:
            walls.append(time.perf_counter() - t0)
            enq.append(t1 - t0)
    if gate is not None:
        for i in range(reps + 3):
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            gate.close(engine.stream)
            a.record(engine.stream)
            t = engine.enqueue(OP, batch, blocks, None, "p")
            b.record(engine.stream)
            b.synchronize()
            assert engine.is_complete(t)
            if i >= 3:
                devs.append(a.elapsed_time(b) / 1e3)
    med = statistics.median
    return med(walls), (med(devs) if devs else None), med(enq)


def phases(engine, batch, blocks, reps):
    """Median host µs of each enqueue phase (called one by one, as enqueue does)."""
    out = {"buffer": [], "blocks": [], "sources": [], "issue": [], "total": []}
    n = len(blocks)
    for _ in range(reps + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        buf = engine._buffer(n)
        t1 = time.perf_counter()
        engine._put_blocks(OP, buf, blocks, n)
        t2 = time.perf_counter()
        f = engine._put_sources(OP, buf, batch, n)
        t3 = time.perf_counter()
        t = engine._issue(OP, buf, n, f, None, "p")
        t4 = time.perf_counter()
        engine.synchronize()
        engine.is_complete(t)
        for k, v in zip(out, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0), strict=True):
            out[k].append(v)
    return {k: round(statistics.median(v[3:]) * 1e6, 1) for k, v in out.items()}


class UploadIdx(TorchCopyEngine):
    """The gather with its indices uploaded to a device buffer first (one H2D copy)."""

    def _move_triton(self, out, buf, n):
        dev = getattr(self, "_dev_idx", None)
        if dev is None or dev.shape[1] < buf.cap:
            self._dev_idx = dev = torch.empty((2, buf.cap), dtype=torch.int64, device=self.device)
        cur = torch.cuda.current_stream(self.device)
        torch.cuda.set_stream(self.stream)
        try:
            dev[:, : buf.cap].copy_(buf.host[:2], non_blocking=True)
        finally:
            torch.cuda.set_stream(cur)
        ptr = dev.data_ptr()
        self._tg(self._stream_handle, self._mapped_ptr, out.data_ptr(), ptr, ptr + buf.cap * 8, n)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--shapes", action="store_true", help="sweep the gather kernel's shape")
    ap.add_argument("--upload", action="store_true", help="indices uploaded vs read in place")
    args = ap.parse_args()
    device = torch.device("cuda", torch.cuda.current_device())
    gate = Gate(device)
    total = 128 * 1024 * 1024
    shape = (launch.GATHER_BLOCK_WORDS, launch.GATHER_WARPS)
    res: dict = {"phases": {}, "shapes": {}, "upload": {}, "dma_chunk": {}, "wall": {}}

    for bs in (8 * KIB, 32 * KIB, 256 * KIB, 2048 * KIB):
        n, pool, kv, batch, blocks, slots = setup(device, total, bs)
        # contiguous yardstick, same bytes
        src, dst = pool.buffer[:n], kv.pages[:n]
        s = torch.cuda.Stream(device)
        w = []
        for i in range(args.reps + 3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.cuda.stream(s):
                dst.copy_(src, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(s)
            while not ev.query():
                pass
            if i >= 3:
                w.append(time.perf_counter() - t0)
        contig = statistics.median(w)
        key = f"{bs // KIB}K"
        for method in ("auto", "mapped", "dma") if bs >= 256 * KIB else ("auto",):
            try:
                e = TorchCopyEngine(kv, pool, method=method)
            except RuntimeError:
                continue
            res["phases"][f"{key} {method}:{e.gather or ''}"] = phases(e, batch, blocks, args.reps)
            wall, dev, enq = timed(e, batch, blocks, args.reps, gate)
            res["wall"][f"{key} {method}:{e.gather or ''}"] = {
                "wall_ratio": round(contig / wall, 3),
                "dev_GBs": round(total / dev / 1e9, 1),
                "enqueue_us": round(enq * 1e6, 1),
                "fast_launch": e._tg is not None,
            }
            got = kv.rows(torch.uint8)[list(blocks)].cpu()
            assert torch.equal(got, pool.rows(torch.uint8)[slots]), (key, method)
        if args.shapes and bs <= 256 * KIB:
            for words, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16)):
                launch.GATHER_BLOCK_WORDS, launch.GATHER_WARPS = words, warps
                e = TorchCopyEngine(kv, pool, method="mapped")
                wall, dev, _ = timed(e, batch, blocks, args.reps, gate)
                res["shapes"][f"{key} {words}w/{warps}"] = [
                    round(total / dev / 1e9, 1),
                    round(contig / wall, 3),
                ]
            launch.GATHER_BLOCK_WORDS, launch.GATHER_WARPS = shape
        if args.upload and bs <= 256 * KIB:
            e = UploadIdx(kv, pool, method="mapped")
            wall, dev, _ = timed(e, batch, blocks, args.reps, gate)
            res["upload"][key] = [round(total / dev / 1e9, 1), round(contig / wall, 3)]
        if bs >= 256 * KIB:
            for chunk in (0, 4, 8, 16):
                try:
                    e = TorchCopyEngine(kv, pool, method="dma", dma_chunk=chunk)
                except RuntimeError:
                    break
                wall, dev, enq = timed(e, batch, blocks, args.reps)
                res["dma_chunk"][f"{key} {chunk}"] = [round(contig / wall, 3), round(enq * 1e6)]
        res["wall"][f"{key} contiguous GB/s"] = round(total / contig / 1e9, 1)
        print(key, "done", flush=True)
        del pool, kv, batch
        torch.cuda.empty_cache()

    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
