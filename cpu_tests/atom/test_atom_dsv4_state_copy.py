"""The tier's CPU twin of ATOM's paged state-checkpoint copy kernel
(``launch_copy_descriptor``, ``atom/model_ops/attentions/paged_state_copy.py``) copies
the bytes ATOM's own kernel copies: ATOM's module (its copy planner, descriptor writer,
launcher and kernel, read from the checkout) runs under a CPU interpreter of Triton's
language over host memory, and every byte of both streams must match the twin's, for
a store (slot ranges into PAGE units) and a restore (back), spans under one 4 KiB tile
and over two."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from triton_on_cpu import load_kernel_module

from kvfault.faults.atom import dsv4_state_copy

pytestmark = pytest.mark.atom

MODULE = "atom/model_ops/attentions/paged_state_copy.py"
# A slot's checkpointed ranges (source segments) and a checkpoint's PAGE-unit regions
# (destination segments): sizes that cut spans under a tile, of several tiles, and
# across segment boundaries on both sides.
SRC = (40, 9000, 128)
DST = (3000, 3000, 3168)
COPIES = 2


@pytest.fixture
def atom_copy(atom_src, monkeypatch):
    return load_kernel_module(Path(atom_src) / MODULE, monkeypatch)


def _memory(seed: int) -> torch.Tensor:
    n = COPIES * (sum(SRC) + sum(DST)) + 4096
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


def _bases(memory: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Each copy's source and destination segment addresses, apart from each other."""
    at, src, dst = memory.data_ptr() + 8, [], []
    for sizes, rows in ((SRC, src), (DST, dst)):
        for _ in range(COPIES):
            row = []
            for size in sizes:
                row.append(at)
                at += size + 16  # a gap: a write past a segment's end shows
            rows.append(row)
    return np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)


def _copy(launch, atom_copy, forward: bool) -> torch.Tensor:
    memory = _memory(0)
    plan = atom_copy.plan_segmented_copy(SRC, DST, sum(SRC))
    src, dst = _bases(memory)
    descriptor = np.zeros((COPIES * plan.num_spans, 3), dtype=np.int64)
    plan.write_descriptor(descriptor, src, dst, forward=forward)
    launch(torch.from_numpy(descriptor), plan)
    return memory


@pytest.mark.parametrize("forward", [True, False], ids=["store", "restore"])
def test_the_twin_copies_the_bytes_atoms_kernel_copies(atom_copy, forward):
    theirs = _copy(atom_copy.launch_copy_descriptor, atom_copy, forward)
    ours = _copy(dsv4_state_copy.copy_descriptor, atom_copy, forward)
    assert not torch.equal(theirs, _memory(0))  # the kernel copied something
    assert torch.equal(theirs, ours)


def test_the_twin_refuses_what_atoms_launcher_refuses(atom_copy):
    plan = atom_copy.plan_segmented_copy(SRC, DST, sum(SRC))
    bad = [
        torch.zeros((plan.num_spans, 3), dtype=torch.int32),
        torch.zeros((plan.num_spans, 4), dtype=torch.int64),
        torch.zeros((plan.num_spans + 1, 3), dtype=torch.int64),
    ]
    for descriptor in bad:
        for launch in (atom_copy.launch_copy_descriptor, dsv4_state_copy.copy_descriptor):
            with pytest.raises(ValueError):
                launch(descriptor, plan)
