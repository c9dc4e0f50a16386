"""The CPU pack/unpack that stands in for ATOM's Triton staging kernels keeps their
chunk-major byte layout: byte ``b`` of block ``i`` of a chunk's segment ``s`` lies at
``chunk base + (bytes of segments before s) * blocks in chunk + i * seg bytes + b``."""

from __future__ import annotations

import torch

from kvfault.faults.atom import boundary


def _segments(num_blocks: int = 6):
    # Two segments with different per-block sizes, filled with distinct bytes.
    a = torch.arange(num_blocks * 8, dtype=torch.int64).remainder(251).to(torch.uint8)
    b = torch.arange(num_blocks * 4, dtype=torch.int64).add(100).remainder(251).to(torch.uint8)
    return [a.view(num_blocks, 8), b.view(num_blocks, 4)], [8, 4]


def test_pack_lays_chunks_out_segment_major_within_each_chunk():
    segs, sizes = _segments()
    counts, blocks = [2, 1], [4, 1, 3]
    buf = torch.zeros(sum(counts) * sum(sizes), dtype=torch.uint8)
    boundary.fused_pack_chunk_major(segs, sizes, counts, blocks, buf)
    flat = [s.reshape(-1) for s in segs]
    expected = []
    offset = 0
    for n in counts:
        ids = blocks[offset : offset + n]
        for seg, nb in zip(flat, sizes, strict=True):
            for b in ids:
                expected.extend(seg[b * nb : (b + 1) * nb].tolist())
        offset += n
    assert buf.tolist() == expected


def test_unpack_inverts_pack_into_other_blocks():
    segs, sizes = _segments()
    counts, src, dst = [2, 1], [4, 1, 3], [0, 2, 5]
    buf = torch.zeros(sum(counts) * sum(sizes), dtype=torch.uint8)
    boundary.fused_pack_chunk_major(segs, sizes, counts, src, buf)
    out, _ = _segments()
    for o in out:
        o.zero_()
    boundary.fused_unpack_chunk_major(buf, out, sizes, counts, dst)
    for o, s in zip(out, segs, strict=True):
        for a, b in zip(src, dst, strict=True):
            assert torch.equal(o[b], s[a])
        untouched = [i for i in range(6) if i not in dst]
        assert all(int(o[i].sum()) == 0 for i in untouched)


def test_host_device_reads_as_cuda_and_allocates_on_the_host():
    dev = boundary.HostDevice()
    assert dev.type == "cuda"
    assert torch.empty(4, device=dev).device.type == "cpu"
