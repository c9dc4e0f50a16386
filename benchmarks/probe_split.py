"""The split path at fixed shares: how a restore's wall time moves with the share of the
blocks the copy engines take (the rest by the gather kernel, at once), beside the
share ``method="split"`` measures as best; and ``dma`` with its batch calls capped at
``dma_chunk_max`` copies (0: doubling without bound, as before the cap). One line per
(size, block size, share or cap).

    python benchmarks/probe_split.py [--json OUT.json]
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

from kvfault.reference import OperationId  # noqa: E402
from kvfault.reference.device import DeviceKvPages, PinnedHostPool, TorchCopyEngine  # noqa: E402

KIB = 1024
SHARES = [0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0]
OP = OperationId("probe", 1)


def _wall(engine: TorchCopyEngine, batch, blocks, reps: int) -> float:
    walls = []
    for i in range(reps + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ticket = engine.enqueue(OP, batch, blocks, None, "p")
        while not engine.is_complete(ticket):
            pass
        if i >= 2:
            walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_split: no CUDA device visible to torch; nothing measured")
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    print(f"device: {torch.cuda.get_device_name(device)}")
    out = []
    for mib in (128, 16):
        for bs in (8 * KIB, 32 * KIB):
            n = mib * 1024 * 1024 // bs
            pool = PinnedHostPool(2 * n, (bs // 2,), torch.bfloat16)
            kv = DeviceKvPages(2 * n, (bs // 2,), torch.bfloat16, device)
            pool.buffer.view(torch.uint8).random_(0, 256)
            kv.pages.copy_(pool.buffer)  # the pool read once
            g = torch.Generator().manual_seed(mib * bs)
            slots = torch.randperm(2 * n, generator=g)[:n]
            blocks = tuple(torch.randperm(2 * n, generator=g)[:n].tolist())
            batch = pool.take(slots)
            src, dst = pool.buffer[:n], kv.pages[:n]
            walls = []
            for _ in range(args.reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize()
                walls.append(time.perf_counter() - t0)
            contig = statistics.median(walls)
            try:
                best = TorchCopyEngine(kv, pool, method="split").choice
            except RuntimeError as exc:
                print(f"split not available here: {exc}")
                return 1
            print(f"{mib} MiB {bs // KIB}K x{n}: contiguous {contig * 1e6:.0f} us; "
                  f"measured best {best.path} ({best.reason})", flush=True)  # fmt: skip
            for share in SHARES:
                engine = TorchCopyEngine(kv, pool, method="split", split=share)
                wall = _wall(engine, batch, blocks, args.reps)
                line = {"mib": mib, "block": bs, "share": share, "wall_s": wall,
                        "ratio": contig / wall, "best": best.path}  # fmt: skip
                out.append(line)
                print(
                    f"  share {share:.2f}: {wall * 1e6:7.0f} us  {contig / wall:4.0%} of contiguous"
                )
            for cap in (0, 128, 512, 2048):
                engine = TorchCopyEngine(kv, pool, method="dma", dma_chunk_max=cap or n)
                wall = _wall(engine, batch, blocks, args.reps)
                out.append({"mib": mib, "block": bs, "dma_chunk_max": cap, "wall_s": wall,
                            "ratio": contig / wall})  # fmt: skip
                print(f"  dma, calls of at most {cap or 'unbounded'} copies: {wall * 1e6:7.0f} us  "
                      f"{contig / wall:4.0%} of contiguous")  # fmt: skip
            del pool, kv, batch
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
