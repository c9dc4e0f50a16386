"""What the GPU tests put around the reference worker on a real device: random pages
in a pinned tier, a forward that really costs device time, and a stalled copy stream.

Imported only from fixtures (it imports torch), so collecting gpu_tests needs no torch.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from kvfault.fakes import MemoryTier
from kvfault.reference import Geometry, LoadOp, OperationId, OpKind, Trace
from kvfault.reference.clock import RealClock
from kvfault.reference.device import (
    DeviceKvPages,
    HostPage,
    PinnedHostPool,
    TorchCopyEngine,
)
from kvfault.reference.rules import RestoreDeadline
from kvfault.reference.stack import QueueChannel, RestoreWorker

POISON = 0xA5  # every byte of a destination before a restore


def fresh_seed() -> int:
    """A new seed per check, printed by the tests that use it (so a failure replays)."""
    return int.from_bytes(os.urandom(4), "little")


def random_bytes(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A CPU tensor of ``shape``/``dtype`` whose bytes are uniformly random (never zeros;
    NaN patterns included: the copy moves bytes, it never interprets them)."""
    g = torch.Generator().manual_seed(seed)
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).view(shape)


def poison(kv: DeviceKvPages) -> None:
    kv.pages.view(torch.uint8).fill_(POISON)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(torch.uint8).cpu()


def check_restored(
    kv: DeviceKvPages, sources: list[torch.Tensor], blocks: list[int], seed: int
) -> None:
    """Every mapped block equals its source byte for byte; every other block still holds
    the poison."""
    got = kv.pages.view(kv.num_blocks, -1).view(torch.uint8).cpu()
    mapped = set(blocks)
    for src, b in zip(sources, blocks, strict=True):
        if not torch.equal(got[b], as_bytes(src)):
            bad = int((got[b] != as_bytes(src)).sum())
            raise AssertionError(f"seed {seed}: block {b}: {bad} bytes differ from source")
    untouched = [b for b in range(kv.num_blocks) if b not in mapped]
    if untouched:
        rest = got[untouched]
        if not bool((rest == POISON).all()):
            hit = sorted({untouched[i] for i in torch.nonzero(rest != POISON)[:, 0].tolist()})
            raise AssertionError(f"seed {seed}: unmapped blocks written: {hit[:8]}")


# -- a forward and a stall that really cost device time -------------------------------


@dataclass
class DeviceWork:
    """Repeated bf16 matrix products, calibrated once, to keep a stream busy for about a
    given time. Every product is a real kernel: a 'slow forward' here costs real time."""

    device: torch.device
    n: int = 8192
    per_product_s: float = 0.0

    def __post_init__(self) -> None:
        g = torch.Generator(device=self.device).manual_seed(1)
        self.a = torch.randn(self.n, self.n, device=self.device, generator=g).to(torch.bfloat16)
        self.b = torch.randn(self.n, self.n, device=self.device, generator=g).to(torch.bfloat16)
        self.out = torch.empty_like(self.a)
        for _ in range(3):  # warm-up: handles and kernels loaded before calibrating
            torch.mm(self.a, self.b, out=self.out)
        torch.cuda.synchronize(self.device)
        reps = 20
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(self.a, self.b, out=self.out)
        torch.cuda.synchronize(self.device)
        self.per_product_s = (time.perf_counter() - t0) / reps

    def queue(self, seconds: float, stream: torch.cuda.Stream | None = None) -> int:
        """Queue about ``seconds`` of products on ``stream`` (default: current); returns
        the count. Does not wait."""
        count = max(1, round(seconds / self.per_product_s))
        with torch.cuda.stream(stream or torch.cuda.current_stream(self.device)):
            for _ in range(count):
                torch.mm(self.a, self.b, out=self.out)
        return count

    def forward(self, seconds: float) -> float:
        """A forward step: the products on the current stream, waited for as an engine
        waits for its logits. Returns the wall seconds it took."""
        t0 = time.perf_counter()
        self.queue(seconds)
        torch.cuda.current_stream(self.device).synchronize()
        return time.perf_counter() - t0


# -- the worker on the device -----------------------------------------------------------


@dataclass
class DeviceRig:
    """One real-time worker restoring from a pinned tier into device pages."""

    geometry: Geometry
    pool: PinnedHostPool
    kv: DeviceKvPages
    engine: TorchCopyEngine
    tier: MemoryTier
    worker: RestoreWorker
    trace: Trace
    clock: RealClock

    @classmethod
    def build(
        cls,
        device: torch.device,
        deadline: RestoreDeadline,
        page_elems: int = 16 * 1024,  # 32 KiB bf16 pages
        num_blocks: int = 4096,
        pool_slots: int = 4096,
        block_size: int = 16,
        chunk_size: int = 256,
        method: str = "auto",
        runtime: str = "auto",
    ) -> DeviceRig:
        clock = RealClock()
        geometry = Geometry(block_size=block_size, chunk_size=chunk_size)
        pool = PinnedHostPool(pool_slots, (page_elems,), torch.bfloat16)
        kv = DeviceKvPages(num_blocks, (page_elems,), torch.bfloat16, device)
        engine = TorchCopyEngine(kv, pool, method=method, runtime=runtime)
        tier = MemoryTier(clock, geometry, latency_s=1e-3, bandwidth_bytes_s=1e15)
        trace = Trace(clock.now)
        worker = RestoreWorker(clock, tier, engine, kv, QueueChannel(), trace, deadline)
        return cls(geometry, pool, kv, engine, tier, worker, trace, clock)

    def store_prompt(
        self, prompt: tuple[int, ...], seed: int
    ) -> tuple[list[HostPage], list[torch.Tensor]]:
        """Put random pages for every full chunk of ``prompt`` into the tier; returns
        the pinned pages and a private copy of each page's bytes."""
        per_page = self.pool.page_shape
        num_pages = (len(prompt) // self.geometry.chunk_size) * (
            self.geometry.chunk_size // self.geometry.block_size
        )
        data = random_bytes((num_pages, *per_page), self.pool.dtype, seed)
        pages = [self.pool.put(data[i]) for i in range(num_pages)]
        op = OperationId("store", seed, OpKind.SAVE)
        end = num_pages * self.geometry.block_size
        ticket = self.tier.submit_store(op, prompt, 0, end, pages, [])
        while (reply := self.tier.poll(ticket)) is None:
            self.clock.sleep(1e-3)
        assert reply.ok, reply.error
        return pages, [data[i].clone() for i in range(num_pages)]

    def load_op(self, req_id: str, prompt: tuple[int, ...], end: int, blocks: list[int]) -> LoadOp:
        return LoadOp(
            op=OperationId(req_id, 1),
            tier_ids=prompt,
            kv_end=end,
            claim=end,
            blocks=tuple(blocks),
        )

    def poll_until_done(self, timeout_s: float = 20.0, tick_s: float = 1e-3) -> list:
        """Idle ticks (no forward to run) until nothing is pending; returns the
        completions. A stop raises out of here, as out of the engine's step loop."""
        done = []
        give_up = self.clock.now() + timeout_s
        while self.worker.has_pending():
            if self.clock.now() > give_up:
                raise AssertionError(f"worker still pending after {timeout_s}s")
            done += self.worker.get_finished()
            self.clock.sleep(tick_s)
        return done

    def drain(self) -> None:
        """Teardown: wait for everything queued on the device by this rig."""
        self.engine.synchronize()
        torch.cuda.synchronize(self.kv.device)
