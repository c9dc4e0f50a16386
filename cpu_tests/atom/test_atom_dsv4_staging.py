"""The tier's CPU twin of ATOM's DSV4 PAGE/SLOT region kernels copies the bytes ATOM's
own kernels copy: ATOM's ``triton_page_slot`` (plan builder, launchers and kernels, read
from the checkout) runs under a CPU interpreter of Triton's language over host memory,
and every byte of the buffer and of the regions must match the twin's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from triton_on_cpu import load_kernel_module

from kvfault.faults.atom import dsv4_staging

pytestmark = pytest.mark.atom

KERNELS = "atom/kv_transfer/offload/hybrid/dsv4/triton_page_slot.py"
# Unit sizes under one tile, exactly one, and over two: the kernels' tiles and their
# last partial tile are all exercised.
UNITS = (40, 1024, 2100)
GAP = 24  # bytes between regions, so an address past a region's end shows
ITEMS = 5


@dataclass(frozen=True)
class Region:
    base_addr: int
    total_bytes: int
    unit_bytes: int


@pytest.fixture
def atom_kernels(atom_src, monkeypatch):
    return load_kernel_module(Path(atom_src) / KERNELS, monkeypatch)


def _memory(seed: int) -> torch.Tensor:
    size = sum(u * ITEMS + GAP for u in UNITS) + 64
    return torch.randint(
        0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def _regions(memory: torch.Tensor) -> list[Region]:
    regions, at = [], 16
    for unit in UNITS:
        regions.append(Region(memory.data_ptr() + at, unit * ITEMS, unit))
        at += unit * ITEMS + GAP
    return regions


def _buffer(nbytes: int, seed: int) -> torch.Tensor:
    return torch.randint(
        0, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def _copy_both(atom_kernels, op: str, reverse: bool, ids, offset: int, theirs, ours) -> None:
    """``op`` ("gather" or "scatter") of the items ``ids`` at ``offset`` of the buffer, by
    ATOM's kernel on ``theirs`` and by the twin on ``ours``, each a (memory, buffer)."""
    memory, buffer = theirs
    plan = atom_kernels.build_region_plan(
        _regions(memory), item_count=ITEMS, device="cuda", reverse=reverse
    )
    launch = getattr(atom_kernels, f"_{op}_region_items_unchecked")
    launch(plan, ids, buffer, buffer_offset=offset, stream=None)
    memory, buffer = ours
    twin = dsv4_staging.build_region_plan(_regions(memory), item_count=ITEMS, reverse=reverse)
    getattr(dsv4_staging, f"{op}_region_items")(twin, ids, buffer, buffer_offset=offset)


@pytest.mark.parametrize("reverse", [False, True], ids=["page", "slot"])
def test_gather_copies_the_bytes_atoms_kernel_copies(atom_kernels, reverse):
    ids, offset = (3, 0, 4), 7
    memory = _memory(1)
    before = memory.clone()
    per_item = sum(UNITS)
    theirs = _buffer(offset + len(ids) * per_item + 5, 2)
    ours = theirs.clone()
    untouched = theirs.clone()
    _copy_both(atom_kernels, "gather", reverse, ids, offset, (memory, theirs), (memory, ours))
    assert not torch.equal(theirs, untouched)  # ATOM's kernel ran and copied
    assert torch.equal(ours, theirs)
    assert torch.equal(memory, before)  # a gather writes only the buffer


@pytest.mark.parametrize("reverse", [False, True], ids=["page", "slot"])
def test_scatter_writes_the_bytes_atoms_kernel_writes(atom_kernels, reverse):
    ids, offset = (1, 4), 3
    source = _buffer(offset + len(ids) * sum(UNITS), 3)
    theirs, ours = _memory(4), _memory(4)
    _copy_both(atom_kernels, "scatter", reverse, ids, offset, (theirs, source), (ours, source))
    assert not torch.equal(theirs, _memory(4))
    assert torch.equal(ours, theirs)


def test_a_scatter_inverts_a_gather_into_other_items():
    memory = _memory(5)
    plan = dsv4_staging.build_region_plan(_regions(memory), item_count=ITEMS, reverse=True)
    buf = torch.zeros(2 * plan.bytes_per_item, dtype=torch.uint8)
    dsv4_staging.gather_region_items(plan, (0, 2), buf)
    dsv4_staging.scatter_region_items(plan, (3, 1), buf)
    again = torch.zeros_like(buf)
    dsv4_staging.gather_region_items(plan, (3, 1), again)
    assert torch.equal(again, buf)


@pytest.mark.parametrize(
    "change, item_count",
    [
        ({"unit_bytes": 0}, ITEMS),
        ({"total_bytes": 10}, ITEMS),
        ({}, 0),
    ],
    ids=["zero_unit", "region_too_small", "no_items"],
)
def test_plans_refuse_what_atoms_builder_refuses(atom_kernels, change, item_count):
    memory = _memory(6)
    regions = [Region(**{**vars(r), **change}) for r in _regions(memory)]
    with pytest.raises(ValueError):
        atom_kernels.build_region_plan(regions, item_count=item_count, device="cuda", reverse=False)
    with pytest.raises(ValueError):
        dsv4_staging.build_region_plan(regions, item_count=item_count, reverse=False)


def test_launches_refuse_duplicate_and_outside_ids():
    plan = dsv4_staging.build_region_plan(_regions(_memory(7)), item_count=ITEMS, reverse=False)
    buf = torch.zeros(3 * plan.bytes_per_item, dtype=torch.uint8)
    for ids in ((1, 1), (ITEMS,), (-1,)):
        with pytest.raises(ValueError):
            dsv4_staging.gather_region_items(plan, ids, buf)
    with pytest.raises(ValueError):
        dsv4_staging.gather_region_items(plan, (0, 1, 2, 3), buf)  # buffer too small
