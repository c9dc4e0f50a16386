"""CPU twin of ATOM's DSV4 PAGE/SLOT region kernels (``hybrid/dsv4/triton_page_slot``).

ATOM's DSV4 codec moves raw bytes between its staging buffers and memory it names only
by address: each ``KVTransferRegion`` is a ``base_addr`` integer, a ``total_bytes`` and
a ``unit_bytes``. Item ``i`` of a region lies at ``base + i * unit`` (PAGE: forward) or
at ``base + total - (i + 1) * unit`` (SLOT: reverse-indexed). One item of a plan is the
concatenation of its units over the regions in order, so the buffer holds item ``k`` of
a launch at ``buffer_offset + k * bytes_per_item``, region ``r``'s unit at the sum of
the units before ``r``. The Triton kernels copy those bytes in 1 KiB tiles; this twin
copies each unit whole through a byte view of the host memory at its address (the
tier's "device" memory is host memory). ``cpu_tests/atom/test_atom_dsv4_staging.py``
runs ATOM's own kernels and plan builder under a CPU interpreter of Triton's language
and compares their bytes with this twin's.
"""

from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

TILE_BYTES = 1024  # the kernels' tile: kept because ATOM's codec may read the name


@dataclass(frozen=True)
class HostRegionPlan:
    """The regions of one payload kind, as the twin copies them: plain integers."""

    bases: tuple[int, ...]
    totals: tuple[int, ...]
    units: tuple[int, ...]
    item_count: int
    reverse: bool

    @property
    def bytes_per_item(self) -> int:
        return sum(self.units)

    def unit_address(self, region: int, item: int) -> int:
        """Where ``item``'s unit of ``region`` starts in memory."""
        if self.reverse:
            return self.bases[region] + self.totals[region] - (item + 1) * self.units[region]
        return self.bases[region] + item * self.units[region]


def build_region_plan(
    regions: Sequence[Any],
    *,
    item_count: int,
    device: Any = None,
    reverse: bool,
    stream: Any = None,
) -> HostRegionPlan:
    """The plan of ``regions`` (each with integer ``base_addr``, ``total_bytes`` and
    ``unit_bytes``) for ``item_count`` items; refuses what ATOM's builder refuses
    (no region, a non-positive count, address or size, a region too small)."""
    if not regions:
        raise ValueError("DSV4 region plan requires at least one region")
    count = operator.index(item_count)
    if count <= 0:
        raise ValueError("DSV4 region plan item_count must be positive")
    bases, totals, units = [], [], []
    for i, region in enumerate(regions):
        base = operator.index(region.base_addr)
        total = operator.index(region.total_bytes)
        unit = operator.index(region.unit_bytes)
        if base <= 0 or total <= 0 or unit <= 0:
            raise ValueError("region addresses and sizes must be positive")
        if total < count * unit:
            raise ValueError(f"region {i} has {total} bytes, need {count * unit}")
        bases.append(base)
        totals.append(total)
        units.append(unit)
    return HostRegionPlan(tuple(bases), tuple(totals), tuple(units), count, bool(reverse))


def _host_bytes(address: int, nbytes: int) -> Any:
    """A writable uint8 tensor over ``nbytes`` of host memory at ``address``."""
    import torch

    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=torch.uint8)


def _checked(plan: HostRegionPlan, item_ids: Sequence[int], buffer: Any, offset: int) -> None:
    if len(set(item_ids)) != len(item_ids):
        raise ValueError("duplicate item ids are not supported")
    if any(not 0 <= i < plan.item_count for i in item_ids):
        raise ValueError(f"item id outside plan pool [0, {plan.item_count})")
    if offset < 0 or offset + len(item_ids) * plan.bytes_per_item > int(buffer.numel()):
        raise ValueError("buffer is too small for the launch")


def _units(
    plan: HostRegionPlan, item_ids: Sequence[int], offset: int
) -> Iterator[tuple[int, int, int]]:
    """``(unit address, unit bytes, buffer position)`` of every unit a launch copies."""
    for pos, item in enumerate(item_ids):
        at = offset + pos * plan.bytes_per_item
        for region, unit in enumerate(plan.units):
            yield plan.unit_address(region, int(item)), unit, at
            at += unit


def _gather_region_items_unchecked(
    plan: HostRegionPlan,
    item_ids: Sequence[int],
    dst: Any,
    *,
    buffer_offset: int = 0,
    stream: Any = None,
) -> None:
    """Each item's units, region by region, into ``dst`` from ``buffer_offset``."""
    flat = dst.view(-1)
    for address, unit, at in _units(plan, item_ids, buffer_offset):
        flat[at : at + unit] = _host_bytes(address, unit)


def _scatter_region_items_unchecked(
    plan: HostRegionPlan,
    item_ids: Sequence[int],
    src: Any,
    *,
    buffer_offset: int = 0,
    stream: Any = None,
) -> None:
    """The inverse of the gather: ``src``'s bytes back into each item's units."""
    flat = src.view(-1)
    for address, unit, at in _units(plan, item_ids, buffer_offset):
        _host_bytes(address, unit).copy_(flat[at : at + unit])


def gather_region_items(
    plan: HostRegionPlan,
    item_ids: Sequence[int],
    dst: Any,
    *,
    buffer_offset: int = 0,
    stream: Any = None,
) -> None:
    """The gather, after the launch checks ATOM's launcher makes."""
    _launch(_gather_region_items_unchecked, plan, item_ids, dst, buffer_offset)


def scatter_region_items(
    plan: HostRegionPlan,
    item_ids: Sequence[int],
    src: Any,
    *,
    buffer_offset: int = 0,
    stream: Any = None,
) -> None:
    """The scatter, after the launch checks ATOM's launcher makes."""
    _launch(_scatter_region_items_unchecked, plan, item_ids, src, buffer_offset)


def _launch(
    move: Callable[..., None],
    plan: HostRegionPlan,
    item_ids: Sequence[int],
    buffer: Any,
    offset: int,
) -> None:
    ids = [operator.index(i) for i in item_ids]
    _checked(plan, ids, buffer, offset)
    move(plan, ids, buffer, buffer_offset=offset)


KERNEL_MODULE = "atom.kv_transfer.offload.hybrid.dsv4.triton_page_slot"
