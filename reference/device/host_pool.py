"""The tier side of a device restore: pinned host pages a copy engine reads from.

``PinnedHostPool`` holds ``num_slots`` pages in one pinned tensor; ``HostPage`` is a
handle to one slot that goes stale when the slot is freed (an eviction), and
``HostPageBatch`` holds many handles as two int64 arrays so a copy engine checks and
indexes them without a Python loop per block. ``map_pinned`` views pinned host memory
as a device tensor at the same address (unified virtual addressing), which is what lets
the device read the pool in place.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import torch

# __cuda_array_interface__ typestrs of the word types a block may be moved as.
_TYPESTR = {
    torch.int64: "<i8",
    torch.int32: "<i4",
    torch.int16: "<i2",
    torch.uint8: "|u1",
    torch.complex128: "<c16",
}


class _MappedArray:
    """A ``__cuda_array_interface__`` over pinned host memory, so torch sees it as a
    device tensor at the same address (unified virtual addressing)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: torch.dtype):
        self.__cuda_array_interface__ = {
            "data": (ptr, False),
            "shape": shape,
            "typestr": _TYPESTR[dtype],
            "strides": None,
            "version": 3,
        }


def map_pinned(host: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    """A device tensor aliasing the pinned, contiguous ``host`` tensor, or None where the
    device cannot read it in place (no unified addressing, an old torch, a HIP build
    without the interface). The caller keeps ``host`` alive as long as the view."""
    if not (host.is_pinned() and host.is_contiguous()) or host.dtype not in _TYPESTR:
        return None
    try:
        view = torch.as_tensor(
            _MappedArray(host.data_ptr(), tuple(host.shape), host.dtype), device=device
        )
    except Exception:  # noqa: BLE001 - any failure means: no mapped path here
        return None
    if view.data_ptr() != host.data_ptr() or view.device.type != "cuda":
        return None
    return view


@dataclass(frozen=True, eq=False)
class HostPage:
    """A handle to one slot of a ``PinnedHostPool``. It goes stale when its slot is freed
    (an eviction); the copy engine refuses a stale page at enqueue."""

    pool: PinnedHostPool
    slot: int
    generation: int

    @property
    def live(self) -> bool:
        return self.pool.generation(self.slot) == self.generation

    @property
    def tensor(self) -> torch.Tensor:
        """The slot's pinned storage (a view; valid while the page is live)."""
        return self.pool.buffer[self.slot]


class HostPageBatch(Sequence[HostPage]):
    """Pages of one pool held as two int64 arrays (slots, generations): what a tier
    built on ``PinnedHostPool`` returns for a retrieve. The copy engine checks and
    indexes a batch without a Python loop per block (numpy views of the two arrays, no
    attribute access per page); indexing yields ``HostPage``s."""

    def __init__(
        self,
        pool: PinnedHostPool,
        slots: torch.Tensor,
        generations: torch.Tensor,
        epoch: int | None = None,
    ):
        if slots.shape != generations.shape or slots.dim() != 1:
            raise ValueError("slots and generations must be 1-d and of one length")
        self.pool = pool
        self.slots = slots.to("cpu", torch.int64).contiguous()
        self.generations = generations.to("cpu", torch.int64).contiguous()
        self.slots_np = self.slots.numpy()
        self.generations_np = self.generations.numpy()
        # ``pool.frees`` when every page was known live (None: unknown). While the pool
        # has freed nothing since, every page still is: the engine skips the check.
        self.epoch = epoch
        # one unsigned max checks both ends (a negative slot reads as a huge one)
        if self.slots_np.size and int(self.slots_np.view(np.uint64).max()) >= pool.num_slots:
            raise ValueError(f"a slot outside [0, {pool.num_slots})")

    def __len__(self) -> int:
        return self.slots_np.size

    @overload
    def __getitem__(self, i: int) -> HostPage: ...

    @overload
    def __getitem__(self, i: slice) -> HostPageBatch: ...

    def __getitem__(self, i: int | slice) -> HostPage | HostPageBatch:
        if isinstance(i, slice):
            return HostPageBatch(self.pool, self.slots[i], self.generations[i], self.epoch)
        return HostPage(self.pool, int(self.slots_np[i]), int(self.generations_np[i]))

    def all_live(self) -> bool:
        """No slot of the batch was freed since the batch was taken."""
        if self.epoch is not None and self.epoch == self.pool.frees:
            return True
        return bool((self.pool.generations_np.take(self.slots_np) == self.generations_np).all())

    def stale(self) -> torch.Tensor:
        """Positions of pages whose slot was freed since the batch was taken."""
        current = self.pool.generations_np.take(self.slots_np)
        return torch.from_numpy(np.flatnonzero(current != self.generations_np))


class PinnedHostPool:
    """Tier-side pinned host memory: ``num_slots`` pages of ``page_shape`` and ``dtype``.

    ``put`` copies a page in and returns a live ``HostPage``; ``free`` makes every handle
    to that slot stale. Slots are handed out in FIFO order so a freed slot is not reused
    at once (a stale handle then still points at unrelated but valid memory).

    The pool is allocated on the NUMA node of ``device`` (default: the current one)
    where the host shows several nodes and the GPU's (``kvfault.reference.device.topology``);
    ``placement`` says where it went, read back from the pages. Where it could not be
    placed on a host that has several nodes, one line on stderr says so.
    """

    def __init__(
        self,
        num_slots: int,
        page_shape: tuple[int, ...],
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | int | None = None,
        place: bool = True,
    ):
        if num_slots <= 0:
            raise ValueError(f"num_slots must be positive, got {num_slots}")
        self.page_shape = tuple(page_shape)
        self.dtype = dtype
        shape = (num_slots, *self.page_shape)
        self.placement = "not placed (place=False)"
        if place:
            self.buffer, self.placement = _placed(shape, dtype, device)
        else:
            self.buffer = torch.empty(shape, dtype=dtype, pin_memory=True)
        self.row_bytes = self.buffer[0].numel() * self.buffer.element_size()
        self._free: deque[int] = deque(range(num_slots))
        # one counter per slot, bumped on free (only there: ``frees`` counts the bumps)
        self.generations = torch.zeros(num_slots, dtype=torch.int64)
        self.generations_np = self.generations.numpy()  # the same memory, for the engine
        self.frees = 0  # bumped with every generation: batches taken since are all live
        self._mapped: dict[tuple[torch.dtype, str], torch.Tensor | None] = {}

    @property
    def num_slots(self) -> int:
        return self.buffer.shape[0]

    @property
    def num_free(self) -> int:
        return len(self._free)

    def generation(self, slot: int) -> int:
        return int(self.generations_np[slot])

    def alloc(self) -> HostPage:
        """A live page whose content is whatever the slot held; raises when full."""
        if not self._free:
            raise MemoryError(f"pinned host pool is full ({self.num_slots} slots)")
        slot = self._free.popleft()
        return HostPage(self, slot, self.generation(slot))

    def put(self, page: torch.Tensor) -> HostPage:
        """Copy ``page`` (any device, same element count) into a fresh slot.

        Blocking when ``page`` lives on a device: stores are not on the restore path.
        """
        hp = self.alloc()
        self.buffer[hp.slot].copy_(page.reshape(self.page_shape))
        return hp

    def free(self, page: HostPage) -> None:
        """Return the slot; every handle to it goes stale. Freeing a stale handle is a
        no-op (an eviction racing a release)."""
        if page.pool is not self or not page.live:
            return
        self.generations_np[page.slot] += 1
        self.frees += 1
        self._free.append(page.slot)

    def batch(self, pages: Sequence[HostPage]) -> HostPageBatch:
        """The same pages as one ``HostPageBatch`` (generations as the handles say)."""
        if any(p.pool is not self for p in pages):
            raise ValueError("a page of another pool")
        return HostPageBatch(
            self,
            torch.tensor([p.slot for p in pages], dtype=torch.int64),
            torch.tensor([p.generation for p in pages], dtype=torch.int64),
        )

    def take(self, slots: Sequence[int]) -> HostPageBatch:
        """Live handles to ``slots`` as they are now, as one batch (no copy)."""
        idx = torch.as_tensor(slots, dtype=torch.int64).reshape(-1)
        return HostPageBatch(self, idx, self.generations.index_select(0, idx), self.frees)

    def rows(self, word: torch.dtype) -> torch.Tensor:
        """The pool as ``[num_slots, words]`` host rows of ``word``."""
        return self.buffer.view(self.num_slots, -1).view(word)

    def mapped_rows(self, word: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """The pool as device-readable ``[num_slots, words]`` rows, or None (see
        ``map_pinned``). Cached per word type and device."""
        key = (word, str(device))
        if key not in self._mapped:
            self._mapped[key] = map_pinned(self.rows(word), device)
        return self._mapped[key]


def _placed(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | int | None
) -> tuple[torch.Tensor, str]:
    """A pinned tensor on the NUMA node of ``device`` where that means anything, and a
    line saying where it went."""
    from kvfault.reference.device.device_pages import device_pci_bus
    from kvfault.reference.device.topology import NumaPolicy, placement_target, read_topology

    def plain() -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, pin_memory=True)

    if not torch.cuda.is_available():
        return plain(), "not placed (no device)"
    if isinstance(device, torch.device):
        dev = device
    else:
        dev = torch.device("cuda", torch.cuda.current_device() if device is None else device)
    top = read_topology(device_pci_bus(dev))
    node, why = placement_target(top)
    if node is None:
        return plain(), why
    try:
        policy = NumaPolicy()
        with policy.prefer(node):
            buf = plain()
        nodes = policy.pages_nodes(buf.data_ptr(), buf.numel() * buf.element_size())
    except OSError as exc:
        line = f"could not place the pinned pool on NUMA node {node}, the GPU's: {exc}"
        print(f"kvfault: {line}", file=sys.stderr, flush=True)
        return plain(), line
    on = sum(1 for x in nodes if x == node)
    if on == len(nodes):
        return buf, f"on NUMA node {node}, the GPU's ({on}/{len(nodes)} sampled pages)"
    seen = sorted({x for x in nodes})
    line = (
        f"could not place the pinned pool on NUMA node {node}, the GPU's: "
        f"{on}/{len(nodes)} sampled pages there (nodes seen: {seen})"
    )
    print(f"kvfault: {line}", file=sys.stderr, flush=True)
    return buf, line
