"""``auto`` on a real device: it measures every path it can take, takes the fastest,
caches that per device and page size, and then costs no more per restore than the path
it took called by name."""

from __future__ import annotations

import json

import pytest
import torch

from gpu_tests import device_stack as ds
from kvfault.reference import OperationId
from kvfault.reference.device import DeviceKvPages, PinnedHostPool, TorchCopyEngine
from kvfault.reference.device.calibration import CalibrationCache, Calibrator, split_share

KIB = 1024


def _pool_kv(device, block_bytes, n=64):
    elems = block_bytes // 2
    return PinnedHostPool(2 * n, (elems,)), DeviceKvPages(2 * n, (elems,), torch.bfloat16, device)


def _restores_byte_exact(engine, pool, kv, n=40):
    seed = ds.fresh_seed()
    data = ds.random_bytes((pool.num_slots, pool.page_shape[0]), torch.bfloat16, seed)
    pool.buffer.copy_(data)
    g = torch.Generator().manual_seed(seed)
    slots = torch.randperm(pool.num_slots, generator=g)[:n].tolist()
    blocks = torch.randperm(kv.num_blocks, generator=g)[:n].tolist()
    ds.poison(kv)
    ticket = engine.enqueue(OperationId("c", 1), pool.take(slots), blocks, None, "c")
    engine.synchronize()
    assert engine.is_complete(ticket)
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


def _paths(device, block_bytes):
    """The paths auto can take here at this page size (each one measured)."""
    pool, kv = _pool_kv(device, block_bytes)
    engine = TorchCopyEngine(kv, pool, calibrate=Calibrator(None))
    paths = list(engine.choice.seconds) or [engine.choice.path]
    return [p for p in paths if split_share(p) is None]  # a named path, not a split


@pytest.mark.parametrize("block_bytes", [8 * KIB, 2048 * KIB])
def test_auto_takes_the_path_a_fake_timer_says_is_faster(device, block_bytes, tmp_path):
    """The rule auto had (DMA from 256 KiB) never takes the gather at 2 MiB nor DMA at
    8 KiB: a timer saying otherwise is obeyed, and the restore is byte-exact."""
    paths = _paths(device, block_bytes)
    if len(paths) < 2:
        pytest.skip(f"one path here: {paths}")
    for fast in paths:
        timer = {p: (1e-3 if p == fast else 5e-3) for p in paths}
        pool, kv = _pool_kv(device, block_bytes)
        engine = TorchCopyEngine(
            kv, pool, calibrate=Calibrator(None, timer=lambda p, _k, t=timer: t[p])
        )
        assert engine.choice.path == fast and engine.choice.source == "measured"
        assert (engine.method + (f":{engine.gather}" if engine.gather else "")) == fast
        _restores_byte_exact(engine, pool, kv)


@pytest.mark.parametrize("block_bytes", [8 * KIB, 256 * KIB])
def test_auto_takes_the_split_where_a_fake_timer_says_it_is_faster(device, block_bytes):
    """Every split share timed alike: the first share tried (a fifth of the blocks by
    DMA, the rest by the gather), byte-exact."""
    timer = Calibrator(None, timer=lambda p, _k: 1e-3 if p.startswith("split") else 5e-3)
    pool, kv = _pool_kv(device, block_bytes)
    engine = TorchCopyEngine(kv, pool, calibrate=timer)
    if engine.choice.path.startswith("split") is False and "split" not in engine.choice.reason:
        pytest.skip(f"no split here: {engine.choice.line()}")
    assert (engine.choice.path, engine.method, engine.gather) == ("split:0.20", "split", "triton")
    _restores_byte_exact(engine, pool, kv)


def test_auto_measures_once_per_device_and_page_size_then_reads_the_cache(device, tmp_path):
    path = tmp_path / "cal.json"
    pool, kv = _pool_kv(device, 32 * KIB)
    first = TorchCopyEngine(kv, pool, calibrate=Calibrator(CalibrationCache(path)))
    if first.choice.source == "only":
        pytest.skip(f"one path here: {first.choice.path}")
    assert first.choice.source == "measured"
    seconds = first.choice.seconds  # of the large calibration restores
    large = first.choice.large or first.choice.path
    assert seconds[large] <= min(seconds.values()) * 1.03  # the fastest, or tied with it
    doc = json.loads(path.read_text())
    (key,) = doc["entries"]
    assert torch.cuda.get_device_name(device) in key and torch.__version__ in key
    assert doc["entries"][key][str(32 * KIB)]["path"] == first.choice.path

    def never(_path, _blocks):
        raise AssertionError("measured again despite the cache")

    second = TorchCopyEngine(kv, pool, calibrate=Calibrator(CalibrationCache(path), timer=never))
    assert (second.choice.path, second.choice.source) == (first.choice.path, "cached")
    assert (second.choice.large, second.choice.large_from) == (
        first.choice.large,
        first.choice.large_from,
    )
    _restores_byte_exact(second, pool, kv)


def test_a_named_method_is_never_calibrated(device):
    def never(_path, _blocks):
        raise AssertionError("a named method was measured")

    pool, kv = _pool_kv(device, 8 * KIB)
    engine = TorchCopyEngine(kv, pool, method="mapped", calibrate=Calibrator(None, timer=never))
    assert engine.choice.source == "forced" and engine.method == "mapped"


@pytest.mark.parametrize("block_bytes", [8 * KIB, 256 * KIB])
def test_auto_enqueues_through_the_very_path_it_chose(device, block_bytes):
    """No per-restore cost for choosing: auto's move is the named path's own method."""
    pool, kv = _pool_kv(device, block_bytes)
    auto = TorchCopyEngine(kv, pool)
    taken = [(auto.choice.path, (auto._early, auto._move))]
    if auto._large is not None:
        taken.append((auto.choice.large, auto._large))
    for path, (early, move) in taken:
        method, _, gather = path.partition(":")
        if split_share(path) is not None:
            named = TorchCopyEngine(kv, pool, method="split", split=split_share(path))
        else:
            named = TorchCopyEngine(kv, pool, method=method, gather=gather or "auto")
        assert move.__func__ is named._move.__func__
        assert (early is None) == (named._early is None)
        if early is not None:
            assert early.__func__ is named._early.__func__


def test_the_pool_says_where_it_was_placed(device):
    pool, _ = _pool_kv(device, 8 * KIB, n=4)
    assert pool.placement and (
        pool.placement.startswith(("one NUMA node", "on NUMA node", "could not place"))
        or "not the GPU's" in pool.placement
    )
