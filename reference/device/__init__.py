"""The device restore path: a pinned host pool, device KV pages, and a copy engine that
restores scattered blocks from the pool into the pages as one batched operation.

One job per module:

- ``host_pool``: ``PinnedHostPool``, its ``HostPage`` handles and ``HostPageBatch``, and
  ``map_pinned`` (pinned host memory viewed by the device in place);
- ``device_pages``: ``DeviceKvPages`` (a ``reference.interfaces.KvPages`` in device
  memory), ``device_available``, ``device_backend``;
- ``copy_engine``: ``TorchCopyEngine`` (a ``reference.interfaces.CopyEngine``) and how a
  restore picks ``dma``, ``mapped`` or ``staged``;
- ``ticket``: a restore in flight: its ``RestoreTicket`` and its pinned index buffer;
- ``launch``: what the engine queues its work through (batched DMA through the CUDA
  runtime, the Triton gather kernel, stream ordering), each with its fallback.

Importing this package imports neither torch nor triton: each name below loads its
module (and torch with it) on first use. Only this package imports torch at module
level; the rest of ``reference/`` never does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reference.device.copy_engine import (
        DMA_MIN_BLOCK_BYTES,
        Gather,
        Method,
        TorchCopyEngine,
        word_dtype,
    )
    from reference.device.device_pages import DeviceKvPages, device_available, device_backend
    from reference.device.host_pool import HostPage, HostPageBatch, PinnedHostPool, map_pinned
    from reference.device.ticket import RestoreTicket

# public name -> the module (under reference.device) that defines it
_EXPORTS = {
    "PinnedHostPool": "host_pool",
    "HostPage": "host_pool",
    "HostPageBatch": "host_pool",
    "map_pinned": "host_pool",
    "DeviceKvPages": "device_pages",
    "device_available": "device_pages",
    "device_backend": "device_pages",
    "TorchCopyEngine": "copy_engine",
    "RestoreTicket": "ticket",
    "Method": "copy_engine",
    "Gather": "copy_engine",
    "DMA_MIN_BLOCK_BYTES": "copy_engine",
    "word_dtype": "copy_engine",
}

__all__ = [
    "DMA_MIN_BLOCK_BYTES",
    "DeviceKvPages",
    "Gather",
    "HostPage",
    "HostPageBatch",
    "Method",
    "PinnedHostPool",
    "RestoreTicket",
    "TorchCopyEngine",
    "device_available",
    "device_backend",
    "map_pinned",
    "word_dtype",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
