"""Real LMCache tier throughput beside lmcache's own client, in one run on one server.

Stores and retrieves ``--chunks`` chunks of a realistic KV layout (default: 16 chunks of
256 tokens x 32 layers x 8 KV heads x 128 head dim, bf16 = 32 MiB each, 512 MiB in all,
``--chunks-per-op`` chunks per operation) through a real lmcache MP server on loopback,
three ways:

- ``memcpy``: a plain copy of the same chunks between two warm CPU buffers, with
  torch's ``copy_`` and with numpy (the ceiling of any SHM transfer on this machine);
- ``lmcache``: lmcache's own engine-driven SHM client (``EngineDrivenContextShm``:
  ``prepare_store`` -> copy each chunk into its slot -> ``commit_store``; retrieve =
  ``lookup`` + ``query_prefetch_status`` -> ``prepare_retrieve`` -> copy each slot into a
  preallocated chunk -> ``commit_retrieve``), blocking on its futures as its own worker
  adapter does. Its copies are one contiguous copy per chunk, with torch ``copy_`` (as
  lmcache's own gather/scatter) or, with ``--raw-copy numpy``, through numpy as the
  tier copies;
- ``kvfault``: ``LMCacheTier`` with tensor pages (one page per 16-token block), driven
  by ``submit_*`` and the blocking ``wait``.

Each client has its own mapping of the server's SHM pool. Round 1 is the cold pool
(each client's first touch of the pool's pages, and for the tier of the buffers its
retrieved pages live in). Then both clients page in the whole pool in their mappings
(untimed), and the server is cleared after each round, so rounds 2.. run on a warm
pool; they are reported apart (median and range over the warm rounds). The two
clients alternate operation by operation, taking turns to go first, so both see the
same machine (other jobs' load changes by the second); each warm operation's speed
ratio beside its twin is also reported (median and quartiles over the pairs), which
tells a real gap from the drift between rounds. Bytes are verified after each
round, outside the timed region. The server is
``kvfault.faults.lmcache.server.LMCacheServer`` (127.0.0.1, ``--disable-metrics``,
``LMCACHE_TRACK_USAGE=false``). Prints figures and the kvfault / lmcache ratio;
asserts nothing about time.

    python benchmarks/bench_lmcache.py [--chunks 16] [--rounds 12] [--raw-copy torch|numpy]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvfault.faults.lmcache.server import LMCacheNotInstalled, LMCacheServer  # noqa: E402
from kvfault.reference.interfaces import LookupQuery  # noqa: E402
from kvfault.reference.types import Geometry, OperationId, OpKind  # noqa: E402

CHUNK = 256
LIMIT_S = 120.0  # a reply that takes this long means the server is stuck


def gib_s(nbytes: int, seconds: float) -> float:
    return nbytes / 2**30 / seconds


class RawClient:
    """lmcache's own engine-driven SHM client, used as its worker adapter uses it."""

    def __init__(
        self, url: str, layout: Any, block_size: int, model: str, copy: str, pages: bool
    ) -> None:
        import torch
        from lmcache.v1.distributed.api import MemoryLayoutDesc
        from lmcache.v1.multiprocess.custom_types import (
            IPCCacheServerKey,
            RegisterEngineDrivenContextPayload,
        )
        from lmcache.v1.multiprocess.transfer_context.base import (
            EngineDrivenContextMetadata,
            create_engine_driven_context,
        )
        from lmcache.v1.multiprocess.transport.factory import RequestClientFactory

        self.Key = IPCCacheServerKey
        self.model = model
        self.client = RequestClientFactory.create(url)
        self.iid = random.randrange(1, 2**31)
        payload = RegisterEngineDrivenContextPayload(
            instance_id=self.iid, model_name=model, world_size=1, block_size=block_size,
            num_layers=layout.num_layers, hidden_dim_size=layout.hidden,
            dtype_str=layout.dtype, use_mla=False,
        )  # fmt: skip
        resp = self.client.register_kv_cache_engine_driven_context(payload).result(LIMIT_S)
        shape = torch.Size((2, layout.num_layers, CHUNK, layout.hidden))
        meta = EngineDrivenContextMetadata(
            layout_desc=MemoryLayoutDesc(shapes=[shape], dtypes=[getattr(torch, layout.dtype)]),
            block_size=block_size,
            use_mla=False,
        )
        self.ctx = create_engine_driven_context(
            meta, self.client, LIMIT_S, resp.shm_name, resp.pool_size
        )
        self._n = 0
        self.copy = _copy_numpy if copy == "numpy" else _copy_torch
        # Retrieve's copy out of each slot: into a chunk as is, or (pages) into
        # block-major pages, the permuted copy the tier makes for its tensor pages.
        self.copy_out = _scatter_torch(block_size) if pages else self.copy

    def _key(self, ids: tuple[int, ...], rid: str, worker: int | None) -> Any:
        return self.Key(
            model_name=self.model, world_size=1, worker_id=worker, token_ids=ids, start=0,
            end=len(ids), request_id=rid, num_kv_readers=1,
        )  # fmt: skip

    def _rid(self) -> str:
        self._n += 1
        return f"raw-{self.iid}-{self._n}"

    def store(self, ids: tuple[int, ...], chunks: list[Any]) -> None:
        rid = self._rid()
        key = self._key(ids, rid, 0)
        prepared = self.ctx.prepare_store(key, self.iid)
        assert prepared is not None, "pickle transport: SHM required"
        slots, indices = prepared
        for slot, i in zip(slots, indices, strict=True):
            self.copy(slot, chunks[i])
        del slots
        if indices and not self.ctx.commit_store(key, self.iid, []):
            raise SystemExit("lmcache client: commit_store failed")
        self.client.end_session(rid)

    def retrieve(self, ids: tuple[int, ...], out: list[Any]) -> None:
        rid = self._rid()
        self.client.lookup(self._key(ids, rid, None), 1).result(LIMIT_S)
        while (hit := self.client.query_prefetch_status(rid).result(LIMIT_S)) is None:
            time.sleep(0.001)
        if hit * CHUNK != len(ids):
            raise SystemExit(f"lmcache client: lookup hit {hit} chunks of {len(out)}")
        key = self._key(ids, rid, 0)
        slots = self.ctx.prepare_retrieve(key, self.iid)
        if slots is None:
            raise SystemExit("lmcache client: prepare_retrieve missed")
        for dst, slot in zip(out, slots, strict=True):
            self.copy_out(dst, slot)
        del slots
        self.ctx.commit_retrieve(key, self.iid)
        self.client.end_session(rid)

    def close(self) -> None:
        from kvfault.reference.tiers.lmcache_client import close_client

        self.client.unregister_kv_cache_engine_driven_context(self.iid)
        self.ctx.close()
        close_client(self.client)  # lmcache's own close can wedge the process (issue 20)


def _copy_torch(dst: Any, src: Any) -> None:
    dst.copy_(src)


def _scatter_torch(bs: int) -> Callable[[Any, Any], None]:
    def scatter(dst: Any, slot: Any) -> None:
        two, layers, tokens, hidden = slot.shape
        dst.copy_(slot.view(two, layers, tokens // bs, bs, hidden).permute(2, 0, 1, 3, 4))

    return scatter


def as_chunk(out: Any, shape: Any) -> Any:
    """A retrieve buffer in the chunk layout (a view of it or, for pages, a copy)."""
    return out if out.shape == shape else out.permute(1, 2, 0, 3, 4).reshape(shape)


def _copy_numpy(dst: Any, src: Any) -> None:
    import torch

    dst.view(torch.int16).numpy()[...] = src.view(torch.int16).numpy()


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=16, help="chunks stored and retrieved")
    ap.add_argument("--chunks-per-op", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=12, help="round 1 cold, the rest warm")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--lookups", type=int, default=200)
    ap.add_argument("--raw-copy", choices=("torch", "numpy"), default="torch",
                    help="how lmcache's client copies chunks in and out of its slots")  # fmt: skip
    ap.add_argument("--raw-pages", action="store_true",
                    help="lmcache's client retrieves into 16-token block pages (the permuted "
                         "copy the tier makes) instead of into chunks")  # fmt: skip
    args = ap.parse_args()
    if args.chunks <= 0 or args.chunks_per_op <= 0 or args.chunks % args.chunks_per_op:
        print("bench_lmcache: --chunks must be a positive multiple of --chunks-per-op",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    if args.rounds < 2 or args.lookups < 1 or args.block_size <= 0 or CHUNK % args.block_size:
        print("bench_lmcache: need --rounds >= 2, --lookups >= 1 and a --block-size "
              "dividing 256", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    try:
        run(args)
    except LMCacheNotInstalled as exc:
        print(f"bench_lmcache: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("bench_lmcache: interrupted", file=sys.stderr)
        sys.exit(130)


def run(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    from kvfault.reference.tiers import KVLayout, LMCacheTier

    geometry = Geometry(block_size=args.block_size, chunk_size=CHUNK)
    layout = KVLayout(num_layers=args.layers, num_heads=args.heads, head_dim=args.head_dim)
    chunk_bytes = layout.chunk_bytes(CHUNK)
    total = args.chunks * chunk_bytes
    per_op = args.chunks_per_op
    n_ops = args.chunks // per_op
    bs = args.block_size
    per_chunk = CHUNK // bs
    pool_gb = max(0.25, 1.5 * 2 * total / 2**30)  # both clients' data, under the watermark
    print(f"layout {args.layers}x{args.heads}x{args.head_dim} bf16, chunk {CHUNK} tokens = "
          f"{chunk_bytes / 2**20:.1f} MiB, {args.chunks} chunks = {total / 2**20:.0f} MiB, "
          f"{per_op} chunks per op, block {bs}, pool {pool_gb:.2f} GiB, "
          f"torch threads {torch.get_num_threads()}, lmcache client copies with "
          f"{args.raw_copy}, retrieves into {'pages' if args.raw_pages else 'chunks'}")  # fmt: skip

    shape = (2, args.layers, CHUNK, layout.hidden)
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.randint(-(2**15), 2**15, shape, dtype=torch.int16, generator=gen)
              .view(torch.bfloat16) for _ in range(args.chunks)]  # fmt: skip
    # The tier's pages: one contiguous tensor per block, as an engine's paged KV holds them.
    pages = [[c[:, :, b * bs : (b + 1) * bs, :].contiguous() for c in chunks[o * per_op :
              (o + 1) * per_op] for b in range(per_chunk)] for o in range(n_ops)]  # fmt: skip
    out = [torch.empty((per_chunk, 2, args.layers, bs, layout.hidden), dtype=c.dtype)
           if args.raw_pages else torch.empty_like(c) for c in chunks]  # fmt: skip
    for o in out:
        o.zero_()  # first touch outside any timing

    # memcpy: the same chunks between two buffers already paged in.
    for name, fn in (("torch copy_", _copy_torch), ("numpy", _copy_numpy)):
        rates = [gib_s(total, timed(lambda fn=fn: [fn(d.view(s.shape), s) for d, s in zip(out, chunks,
                                                                         strict=True)]))
                 for _ in range(args.rounds)]  # fmt: skip
        print(f"memcpy ({name}, {chunk_bytes / 2**20:.0f} MiB chunks): median "
              f"{statistics.median(rates):.2f} GiB/s (range {min(rates):.2f}-"
              f"{max(rates):.2f}) over {len(rates)}")  # fmt: skip

    rng = random.Random(0)
    prompts = [tuple(rng.randrange(2**32) for _ in range(per_op * CHUNK)) for _ in range(n_ops)]

    with LMCacheServer(chunk_size=CHUNK, l1_size_gb=round(pool_gb, 3)) as server:
        print(f"server start (spawn -> answering): {server.start_seconds:.2f} s")
        t0 = time.perf_counter()
        tier = LMCacheTier(server.url, geometry, layout=layout, page_format="tensor",
                           model_name="bench-kvfault")  # fmt: skip
        print(f"tier connect + register: {(time.perf_counter() - t0) * 1e3:.1f} ms")
        raw = RawClient(server.url, layout, bs, "bench-lmcache", args.raw_copy, args.raw_pages)

        replies: list[Any] = [None] * n_ops
        # Where a retrieve's time goes: the seconds spent copying out of the slots,
        # per client and round (the rest is requests, waits and bookkeeping).
        copying = {"lmcache": [0.0] * args.rounds, "kvfault": [0.0] * args.rounds}
        now = [0]  # the round being run

        def copy_timer(who: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def timed_copy(*a: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(*a)
                finally:
                    copying[who][now[0]] += time.perf_counter() - t0

            return timed_copy

        tier._copy_out = copy_timer("kvfault", tier._copy_out)  # type: ignore[method-assign]
        raw.copy_out = copy_timer("lmcache", raw.copy_out)

        def finish(ticket: Any) -> Any:
            reply = tier.wait(ticket, LIMIT_S)
            if reply is None:
                raise SystemExit(f"kvfault tier: no reply within {LIMIT_S:g}s "
                                 f"(stage {ticket.stage})")  # fmt: skip
            if not reply.ok:
                raise SystemExit(f"kvfault tier: {reply.error}")
            return reply

        def lmcache_store(o: int) -> None:
            raw.store(prompts[o], chunks[o * per_op : (o + 1) * per_op])

        def lmcache_retrieve(o: int) -> None:
            raw.retrieve(prompts[o], out[o * per_op : (o + 1) * per_op])

        def kvfault_store(o: int) -> None:
            ids = prompts[o]
            op = OperationId("bench", o, OpKind.SAVE)
            finish(tier.submit_store(op, ids, 0, len(ids), pages[o], []))

        def kvfault_retrieve(o: int) -> None:
            ids = prompts[o]
            op = OperationId("bench", 10**6 + o, OpKind.LOAD)
            replies[o] = finish(tier.submit_retrieve(op, ids, 0, len(ids), None))

        def verify() -> None:
            for d, c in zip(out, chunks, strict=True):
                if not torch.equal(as_chunk(d, c.shape).view(torch.int16), c.view(torch.int16)):
                    raise SystemExit("lmcache client: retrieved bytes differ")
                d.zero_()  # so the next round must really write them
            for o, reply in enumerate(replies):
                got = reply.pages
                if len(got) != len(pages[o]) or not all(
                    torch.equal(a.view(torch.int16), b.view(torch.int16))
                    for a, b in zip(got, pages[o], strict=True)
                ):
                    raise SystemExit("kvfault tier: retrieved bytes differ")
                replies[o] = None  # the tier recycles the pages' buffers

        fns = {"lmcache store": lmcache_store, "kvfault store": kvfault_store,
               "lmcache retrieve": lmcache_retrieve, "kvfault retrieve": kvfault_retrieve}  # fmt: skip
        figures: dict[str, list[float]] = {k: [] for k in fns}
        # kvfault / lmcache speed of each warm operation beside its twin (run just
        # before or after it): the machine's drift cancels out of each pair.
        paired: dict[str, list[float]] = {"store": [], "retrieve": []}
        for r in range(args.rounds):
            now[0] = r
            if r == 1:
                # Each client maps the pool itself, and after a clear the server may hand
                # a client slots only the other one touched: page in the whole pool in
                # both mappings once (untimed), so warm rounds are warm whatever slots.
                for shm in (raw.ctx._shm_buffer, tier._kv_ctx._shm_buffer):
                    int(np.frombuffer(shm, dtype=np.uint8)[::4096].sum())
            spent = dict.fromkeys(fns, 0.0)
            for what in ("store", "retrieve"):
                for o in range(n_ops):
                    # Operation by operation, taking turns to go first: both see the
                    # same machine (the other agents' load changes by the second).
                    pair = [f"lmcache {what}", f"kvfault {what}"]
                    took = {}
                    for name in pair[:: 1 if (r + o) % 2 == 0 else -1]:
                        took[name] = timed(lambda name=name, o=o: fns[name](o))
                        spent[name] += took[name]
                    if r:
                        paired[what].append(took[pair[0]] / took[pair[1]])
                if r == 0 and what == "store":
                    lookup_latency(tier, prompts, args.lookups)
            verify()
            tier.client.clear(True).result(LIMIT_S)  # the next round reuses the same slots
            for name, seconds in spent.items():
                figures[name].append(gib_s(total, seconds))
            print(
                f"round {r + 1} ({'cold' if r == 0 else 'warm'} pool): "
                + ", ".join(f"{k} {v[-1]:.2f}" for k, v in figures.items())
                + " GiB/s"
            )
        raw.close()
        tier.close()

    print(f"\n{'GiB/s':<18}{'cold pool':>10}{'warm median':>13}{'warm range':>14}")
    for k, v in figures.items():
        warm = v[1:]
        print(f"{k:<18}{v[0]:>10.2f}{statistics.median(warm):>13.2f}"
              f"{min(warm):>8.2f}-{max(warm):.2f}")  # fmt: skip
    print("retrieve, warm rounds, ms per op (median): copying out of the slots + the rest")
    for who in ("lmcache", "kvfault"):
        whole = [total / 2**30 / rate * 1e3 / n_ops for rate in figures[f"{who} retrieve"][1:]]
        copy = [c * 1e3 / n_ops for c in copying[who][1:]]
        rest = [w - c for w, c in zip(whole, copy, strict=True)]
        print(
            f"  {who:<8} {statistics.median(whole):7.2f} = copy "
            f"{statistics.median(copy):6.2f} + rest {statistics.median(rest):6.2f}"
        )
    for what in ("store", "retrieve"):
        k, lm = figures[f"kvfault {what}"][1:], figures[f"lmcache {what}"][1:]
        ratios = [a / b for a, b in zip(k, lm, strict=True)]
        q1, q2, q3 = statistics.quantiles(paired[what], n=4)
        print(f"kvfault / lmcache {what} (warm): median "
              f"{statistics.median(k) / statistics.median(lm):.2f}x, per round "
              f"{min(ratios):.2f}-{max(ratios):.2f}x; paired operations: median "
              f"{q2:.2f}x, quartiles {q1:.2f}-{q3:.2f}x over {len(paired[what])}")  # fmt: skip


def lookup_latency(tier: Any, prompts: list[tuple[int, ...]], n: int) -> None:
    lat = []
    for i in range(n):
        ids = prompts[i % len(prompts)]
        t1 = time.perf_counter()
        hit = tier.lookup(LookupQuery(ids)).kv_hit
        lat.append(time.perf_counter() - t1)
        if hit != len(ids):
            raise SystemExit(f"kvfault tier: lookup hit {hit} of {len(ids)}")
    lat.sort()
    print(f"lookup ({len(prompts[0]) // CHUNK} chunks, hit): median "
          f"{statistics.median(lat) * 1e3:.2f} ms, p99 {lat[int(0.99 * len(lat)) - 1] * 1e3:.2f}"
          f" ms, max {lat[-1] * 1e3:.2f} ms over {len(lat)}")  # fmt: skip


if __name__ == "__main__":
    main()
