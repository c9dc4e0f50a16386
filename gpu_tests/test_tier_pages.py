"""The lmcache tier's slot copies with pages on the device: a GPU engine's pages go into a
host slot block by block (across devices, converting dtype), host pages of the slot's
dtype through the threaded gather, and a retrieve copies the slot back out as contiguous
host pages. No lmcache server is needed: the slot is a host tensor shaped as the
server's, and the copies are the tier's own (``kvfault.reference.tiers.lmcache_pages``)."""

from __future__ import annotations

import pytest
import torch

from kvfault.reference.tiers.lmcache_pages import CopyThreads, KVLayout, _PageCodec, _Recycler

CHUNK, BLOCK = 256, 16
PER_CHUNK = CHUNK // BLOCK


class _Codec(_PageCodec):
    """The tier's page codec with only what its copies read."""

    def __init__(self, threads: int):
        self._torch = torch
        self._arange_cache = {}
        self.block_size = BLOCK
        self.layout = KVLayout(num_layers=3, num_heads=2, head_dim=8)
        self._recycler = _Recycler(torch, (PER_CHUNK, *self.block_shape()), torch.bfloat16, 4)
        self._copy_threads = CopyThreads(threads)


def _slot(codec: _Codec) -> torch.Tensor:
    two, layers, _, hidden = codec.block_shape()
    slot = torch.empty((two, layers, CHUNK, hidden), dtype=torch.bfloat16)
    slot.view(torch.int16).fill_(-1)  # poisoned: every block must be written
    return slot


def _words(codec: _Codec, seed: int, device) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = codec.block_shape()
    return [torch.randint(-(2**15), 2**15, shape, dtype=torch.int16, generator=gen).to(device)
            for _ in range(PER_CHUNK)]  # fmt: skip


@pytest.mark.parametrize("threads", [1, 3])
def test_device_pages_round_trip_through_a_host_slot(device, threads: int) -> None:
    codec = _Codec(threads)
    try:
        words = _words(codec, threads, device)
        slot = _slot(codec)
        codec._copy_in(slot, [w.view(torch.bfloat16) for w in words])
        got = codec._copy_out(slot, 0, PER_CHUNK)
        assert len(got) == PER_CHUNK
        for page, want in zip(got, words, strict=True):
            assert page.device.type == "cpu" and page.is_contiguous()
            assert torch.equal(page.view(torch.int16), want.cpu())
    finally:
        codec._copy_threads.close()


def test_device_pages_of_another_dtype_are_converted(device) -> None:
    codec = _Codec(2)
    try:
        gen = torch.Generator().manual_seed(7)
        pages = [torch.randn(codec.block_shape(), generator=gen).half().to(device)
                 for _ in range(PER_CHUNK)]  # fmt: skip
        slot = _slot(codec)
        codec._copy_in(slot, pages)
        got = codec._copy_out(slot, 2, PER_CHUNK - 1)
        want = pages[2 : PER_CHUNK - 1]
        assert len(got) == len(want)
        for page, src in zip(got, want, strict=True):
            assert torch.equal(page, src.to(torch.bfloat16).cpu())
    finally:
        codec._copy_threads.close()


def test_host_copies_of_device_pages_take_the_threaded_gather(device) -> None:
    """The same pages brought to the host first go through the split gather, and give
    the same slot bytes as the device pages' block-by-block copy."""
    codec = _Codec(3)
    try:
        words = _words(codec, 11, device)
        from_device, from_host = _slot(codec), _slot(codec)
        codec._copy_in(from_device, [w.view(torch.bfloat16) for w in words])
        codec._copy_in(from_host, [w.cpu().view(torch.bfloat16) for w in words])
        assert torch.equal(from_device.view(torch.int16), from_host.view(torch.int16))
        assert codec._copy_threads._pool is not None  # the host pages were split
    finally:
        codec._copy_threads.close()
