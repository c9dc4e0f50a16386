"""Real LMCache tier figures: server start time, store / retrieve throughput and lookup
latency through a real lmcache MP server on loopback, for 256-token chunks of a
realistic KV layout (default: 32 layers x 8 KV heads x 128 head dim, bf16 = 32 MiB per
chunk). Prints figures; asserts nothing about time.

    python benchmarks/bench_lmcache.py [--chunks 16] [--layers 32] [--heads 8]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faults.lmcache.server import LMCacheServer  # noqa: E402
from reference.interfaces import LookupQuery  # noqa: E402
from reference.types import Geometry, OperationId, OpKind  # noqa: E402


def wait(tier, ticket, limit_s: float = 120.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        reply = tier.poll(ticket)
        if reply is not None:
            return reply
    raise SystemExit(f"no reply within {limit_s}s (stage {ticket.stage})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=16, help="chunks stored and retrieved")
    ap.add_argument("--chunks-per-op", type=int, default=4)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--lookups", type=int, default=200)
    ap.add_argument("--page-format", choices=["tensor", "fingerprint"], default="tensor")
    args = ap.parse_args()

    import torch

    from reference.tiers.lmcache import KVLayout, LMCacheTier

    cs = 256
    geometry = Geometry(block_size=args.block_size, chunk_size=cs)
    layout = KVLayout(num_layers=args.layers, num_heads=args.heads, head_dim=args.head_dim)
    chunk_mb = layout.chunk_bytes(cs) / 2**20
    pool_gb = max(0.25, 1.5 * args.chunks * layout.chunk_bytes(cs) / 2**30)
    print(f"layout {args.layers}x{args.heads}x{args.head_dim} bf16, chunk {cs} tokens = "
          f"{chunk_mb:.1f} MiB, block {args.block_size}, pool {pool_gb:.2f} GiB, "
          f"page format {args.page_format}")  # fmt: skip
    with LMCacheServer(chunk_size=cs, l1_size_gb=round(pool_gb, 3)) as server:
        print(f"server start (spawn -> answering): {server.start_seconds:.2f} s")
        t0 = time.perf_counter()
        tier = LMCacheTier(server.url, geometry, layout=layout, page_format=args.page_format)
        print(f"tier connect + register: {(time.perf_counter() - t0) * 1e3:.1f} ms")
        rng = random.Random(0)
        per_op = args.chunks_per_op
        n_ops = args.chunks // per_op
        blocks_per_op = per_op * cs // args.block_size
        shape = tier.block_shape()
        prompts, payloads = [], []
        for _ in range(n_ops):
            prompts.append(tuple(rng.randrange(2**32) for _ in range(per_op * cs)))
            if args.page_format == "tensor":
                payloads.append([torch.randn(shape).to(torch.bfloat16)
                                 for _ in range(blocks_per_op)])  # fmt: skip
            else:
                payloads.append([rng.randrange(2**63) for _ in range(blocks_per_op)])
        op_mb = per_op * chunk_mb

        t0 = time.perf_counter()
        for i, (ids, pages) in enumerate(zip(prompts, payloads, strict=True)):
            reply = wait(tier, tier.submit_store(OperationId("b", i, OpKind.SAVE), ids, 0,
                                                 len(ids), pages, []))  # fmt: skip
            assert reply.ok, reply.error
        st = time.perf_counter() - t0
        print(f"store: {n_ops * op_mb:.0f} MiB in {st:.2f} s = {n_ops * op_mb / st:.0f} MiB/s "
              f"({n_ops} ops of {per_op} chunks)")  # fmt: skip

        lat = []
        for i in range(args.lookups):
            ids = prompts[i % n_ops]
            t1 = time.perf_counter()
            hit = tier.lookup(LookupQuery(ids)).kv_hit
            lat.append(time.perf_counter() - t1)
            assert hit == len(ids), hit
        lat.sort()
        print(f"lookup ({per_op} chunks, hit): median {statistics.median(lat) * 1e3:.2f} ms, "
              f"p99 {lat[int(0.99 * len(lat)) - 1] * 1e3:.2f} ms, max {lat[-1] * 1e3:.2f} ms "
              f"over {len(lat)}")  # fmt: skip

        t0 = time.perf_counter()
        for i, ids in enumerate(prompts):
            reply = wait(tier, tier.submit_retrieve(OperationId("b", 10**6 + i), ids, 0,
                                                    len(ids), None))  # fmt: skip
            assert reply.ok, reply.error
            if args.page_format == "tensor":
                assert all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                           for a, b in zip(reply.pages, payloads[i], strict=True))  # fmt: skip
            else:
                assert reply.pages == payloads[i]
        rt = time.perf_counter() - t0
        print(f"retrieve (byte-exact checked): {n_ops * op_mb:.0f} MiB in {rt:.2f} s = "
              f"{n_ops * op_mb / rt:.0f} MiB/s")  # fmt: skip
        tier.close()


if __name__ == "__main__":
    main()
