"""``kvfault gpu-info``: the GPU this machine restores KV pages on, where its host pool
goes, and which path ``TorchCopyEngine(method="auto")`` takes for each page size, with
why (measured now, or read from the calibration cache)."""

from __future__ import annotations

import argparse

from kvfault.faults.errors import UsageError

PAGE_KIB = (8, 32, 256, 2048)
# a calibration restore is at most 16 MiB: pools of this many bytes let it take that
POOL_BYTES = 32 * 1024 * 1024


def command(args: argparse.Namespace) -> int:
    """Print the device, its topology, the pool placement and one line per page size;
    exit 0. No torch or no device: one line, exit 2."""
    try:
        import torch
    except ImportError:
        raise UsageError(
            "gpu-info: torch is not installed here; install the torch extra: pip install '.[torch]' (see README)"
        ) from None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise UsageError(f"gpu-info: no CUDA or HIP device visible to torch {torch.__version__}")
    from kvfault.reference.device import DeviceKvPages, PinnedHostPool, TorchCopyEngine
    from kvfault.reference.device.calibration import CalibrationCache, Calibrator, cache_path
    from kvfault.reference.device.device_pages import device_backend, device_pci_bus, driver_version
    from kvfault.reference.device.topology import read_topology

    device = torch.device(
        "cuda", args.device if args.device is not None else torch.cuda.current_device()
    )
    build = torch.version.hip if device_backend() == "hip" else torch.version.cuda
    path = cache_path()
    calibrator = Calibrator(None if args.recalibrate else CalibrationCache(path))
    out = [
        f"device: {torch.cuda.get_device_name(device)} (cuda:{device.index}), driver {driver_version()}",
        f"torch {torch.__version__} ({device_backend()} {build}), triton {_triton()}",
        f"topology: {read_topology(device_pci_bus(device)).line()}",
    ]
    print("\n".join(out), flush=True)
    for kib in args.page_kib:
        elems = kib * 1024 // 2
        slots = max(2, POOL_BYTES // (kib * 1024))
        pool = PinnedHostPool(slots, (elems,), torch.bfloat16, device=device)
        if kib == args.page_kib[0]:
            print(f"host pool: {pool.placement}", flush=True)
        kv = DeviceKvPages(slots, (elems,), torch.bfloat16, device)
        engine = TorchCopyEngine(kv, pool, calibrate=calibrator)
        if args.recalibrate:
            CalibrationCache(path).put(engine._device_key(), kv.row_bytes, engine.choice)
        print(f"{kib:>5} KiB pages: {engine.choice.line()}", flush=True)
        del engine, kv, pool
    print(f"calibration cache: {path}" + (" (rewritten)" if args.recalibrate else ""))
    return 0


def _triton() -> str:
    try:
        import triton
    except Exception:  # noqa: BLE001 - not installed: the gather runs without it
        return "not installed"
    return str(triton.__version__)


def _page_kib(text: str) -> int:
    try:
        kib = int(text)
    except ValueError:
        kib = 0
    if kib <= 0:
        raise argparse.ArgumentTypeError(f"a page size is a positive number of KiB, got {text!r}")
    return kib


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--page-kib", type=_page_kib, nargs="+", default=list(PAGE_KIB), metavar="KIB",
                        help="page sizes to show, KiB (default: 8 32 256 2048)")  # fmt: skip
    parser.add_argument("--recalibrate", action="store_true",
                        help="measure every page size again and rewrite the cache")  # fmt: skip
    parser.add_argument("--device", type=int, default=None, metavar="N",
                        help="the device index (default: torch's current device)")  # fmt: skip
