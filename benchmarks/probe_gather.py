"""What limits the mapped gather on this host: the device-side rate of gather-kernel
variants against the copy engines, one table per run.

GPU only; a tuning helper for ``reference/device/launch.py``, not the benchmark of
record (``bench_gpu_restore.py``). For each page size and restore size it times, with
``triton.testing.do_bench`` (median, device events):

- ``dma-contig``: one host-to-device copy of the bytes (the copy engines' ceiling);
- ``sm-contig``: the gather kernel with identity indices (SM reads of host memory with
  no gather at all: the SMs' ceiling on this host);
- gather variants: words per program, warps, rows per program, cache modifiers, and a
  persistent grid.

    python benchmarks/probe_gather.py --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kvfault.reference.device import map_pinned  # noqa: E402

KIB = 1024


@triton.jit
def _g_cols(src, dst, si, di, words, BLOCK: tl.constexpr, CG: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    s = tl.load(si + row).to(tl.int64)
    d = tl.load(di + row).to(tl.int64)
    m = col < words
    if CG:
        v = tl.load(src + s * words + col, mask=m, cache_modifier=".cg")
        tl.store(dst + d * words + col, v, mask=m, cache_modifier=".cs")
    else:
        tl.store(dst + d * words + col, tl.load(src + s * words + col, mask=m), mask=m)


@triton.jit
def _g_rows(src, dst, si, di, n, words, ROWS: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    # ROWS rows per program, BLOCK words of each (a 2-d tile): more bytes in flight
    # per program when pages are small
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    rm = r < n
    s = tl.load(si + r, mask=rm, other=0).to(tl.int64)
    d = tl.load(di + r, mask=rm, other=0).to(tl.int64)
    m = rm[:, None] & (col[None, :] < words)
    v = tl.load(src + s[:, None] * words + col[None, :], mask=m)
    tl.store(dst + d[:, None] * words + col[None, :], v, mask=m)


@triton.jit
def _g_persist(src, dst, si, di, n, words, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):  # type: ignore[no-untyped-def]
    # a persistent grid: each program walks chunks pid, pid + P, ... of the flat
    # (row, chunk) space
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    total = n * CHUNKS
    for t in range(pid, total, nprog):
        row = t // CHUNKS
        col = (t % CHUNKS) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(si + row).to(tl.int64)
        d = tl.load(di + row).to(tl.int64)
        m = col < words
        tl.store(dst + d * words + col, tl.load(src + s * words + col, mask=m), mask=m)


@triton.jit
def _g_tma(src, dst, si, di, words, R: tl.constexpr):  # type: ignore[no-untyped-def]
    # the tensor memory accelerator (bulk copies) reads R x 256 words of the source row
    # into shared memory, and writes them out the same way
    row = tl.program_id(0)
    c = tl.program_id(1)
    s = tl.load(si + row).to(tl.int64)
    d = tl.load(di + row).to(tl.int64)
    sd = tl.make_tensor_descriptor(
        src + s * words, shape=[words // 256, 256], strides=[256, 1], block_shape=[R, 256]
    )
    dd = tl.make_tensor_descriptor(
        dst + d * words, shape=[words // 256, 256], strides=[256, 1], block_shape=[R, 256]
    )
    dd.store([c * R, 0], sd.load([c * R, 0]))


def variants(words: int, sms: int):
    out = {}
    for block, warps in [(4096, 8), (2048, 8), (1024, 4), (512, 4), (4096, 16), (256, 2)]:
        b = min(block, triton.next_power_of_2(words))
        out[f"cols {b}w/{warps}"] = ("cols", b, warps, 0, 0)
    b = min(4096, triton.next_power_of_2(words))
    out[f"cols {b}w/8 .cg"] = ("cols", b, 8, 1, 0)
    for rows, block, warps in [(4, 1024, 8), (8, 512, 8), (2, 2048, 8)]:
        if words <= block:
            out[f"rows {rows}x{block}w/{warps}"] = ("rows", block, warps, rows, 0)
    for k, block, warps in [(4, 1024, 4), (8, 512, 4), (2, 2048, 8)]:
        b = min(block, triton.next_power_of_2(words))
        out[f"persist {k}/SM {b}w/{warps}"] = ("persist", b, warps, 0, k * sms)
    if words % 256 == 0:
        for r, warps in [(4, 4), (16, 4)]:
            rr = min(r, words // 256)
            out[f"tma {rr}x256w/{warps}"] = ("tma", 256, warps, rr, 0)
    return out


def launch(kind, block, warps, rows, grid, src, dst, si, di, n, words):
    if kind == "cols":
        _g_cols[(n, triton.cdiv(words, block))](
            src, dst, si, di, words, BLOCK=block, CG=bool(rows), num_warps=warps
        )
    elif kind == "rows":
        _g_rows[(triton.cdiv(n, rows), triton.cdiv(words, block))](
            src, dst, si, di, n, words, ROWS=rows, BLOCK=block, num_warps=warps
        )
    elif kind == "tma":
        _g_tma[(n, words // 256 // rows)](src, dst, si, di, words, R=rows, num_warps=warps)
    else:
        _g_persist[(grid,)](
            src,
            dst,
            si,
            di,
            n,
            words,
            BLOCK=block,
            CHUNKS=triton.cdiv(words, block),
            num_warps=warps,
        )


def probe_one(dev, sms, total, kib):
    bb = kib * KIB
    n = total * 1024 * KIB // bb
    words = bb // 8
    host = torch.empty((2 * n, words), dtype=torch.int64, pin_memory=True)
    host.view(torch.uint8).copy_(torch.randint(0, 256, (2 * n, bb), dtype=torch.uint8, device=dev))
    src = map_pinned(host, dev)
    dst = torch.empty((2 * n, words), dtype=torch.int64, device=dev)
    g = torch.Generator().manual_seed(1)
    si = torch.randperm(2 * n, generator=g)[:n].to(dev)
    di = torch.randperm(2 * n, generator=g)[:n].to(dev)
    ident = torch.arange(n, device=dev)
    nbytes = n * bb
    row: dict = {"MiB": total, "block": bb, "n": n}

    def gbps(fn):
        return nbytes / (do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e-3) / 1e9

    row["dma-contig"] = gbps(lambda: dst[:n].copy_(host[:n], non_blocking=True))
    b0 = min(4096, triton.next_power_of_2(words))
    row["sm-contig"] = gbps(lambda: launch("cols", b0, 8, 0, 0, src, dst, ident, ident, n, words))
    for name, (kind, block, warps, rows, grid) in variants(words, sms).items():
        try:
            dst.fill_(-1)
            launch(kind, block, warps, rows, grid, src, dst, si, di, n, words)
            torch.cuda.synchronize()
            ok = torch.equal(dst[di].cpu(), host[si.cpu()])
            row[name] = gbps(
                lambda k=kind, b=block, w=warps, r=rows, gr=grid: launch(
                    k, b, w, r, gr, src, dst, si, di, n, words
                )
            )
            if not ok:
                row[name] = f"WRONG {row[name]:.1f}"
        except Exception as exc:  # noqa: BLE001 - a variant that fails is reported
            row[name] = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument("--total-mib", type=int, nargs="+", default=[128, 16])
    ap.add_argument("--blocks", type=int, nargs="+", default=[8, 32, 256, 2048], help="KiB")
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    if hasattr(triton, "set_allocator"):  # scratch for descriptors made on the device
        triton.set_allocator(
            lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev)
        )
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    res: dict = {"device": torch.cuda.get_device_name(dev), "rows": []}
    print(res["device"], "SMs", sms, flush=True)
    for total in args.total_mib:
        for kib in args.blocks:
            row = probe_one(dev, sms, total, kib)
            res["rows"].append(row)
            cells = ", ".join(
                f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                for k, v in row.items()
                if k not in ("MiB", "block", "n")
            )
            print(f"{total} MiB {kib}K x{row['n']}: {cells}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
