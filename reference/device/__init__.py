"""The device restore path: a pinned host pool, device KV pages, and a copy engine that
restores scattered blocks from the pool into the pages as one batched operation.

One job per module:

- ``host_pool``: ``PinnedHostPool``, its ``HostPage`` handles and ``HostPageBatch``, and
  ``map_pinned`` (pinned host memory viewed by the device in place);
- ``device_pages``: ``DeviceKvPages`` (a ``kvfault.reference.interfaces.KvPages`` in device
  memory), ``device_available``, ``device_backend``;
- ``copy_engine``: ``TorchCopyEngine`` (a ``kvfault.reference.interfaces.CopyEngine``) and how a
  restore picks ``dma``, ``mapped`` or ``staged``;
- ``ticket``: a restore in flight: its ``RestoreTicket`` and its pinned index buffer;
- ``launch``: what the engine queues its work through (batched DMA through the CUDA
  runtime, the Triton gather kernel, stream ordering), each with its fallback.

Importing this package imports neither torch nor triton: each name below loads its
module (and torch with it) on first use. Only this package imports torch at module
level; the rest of ``reference/`` never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvfault.reference._lazy import lazy_exports

if TYPE_CHECKING:
    from kvfault.reference.device.copy_engine import (
        DMA_MIN_BLOCK_BYTES,
        Gather,
        Method,
        TorchCopyEngine,
        word_dtype,
    )
    from kvfault.reference.device.device_pages import (
        DeviceKvPages,
        device_available,
        device_backend,
    )
    from kvfault.reference.device.host_pool import (
        HostPage,
        HostPageBatch,
        PinnedHostPool,
        map_pinned,
    )
    from kvfault.reference.device.ticket import RestoreTicket

# public name -> the module that defines it
_EXPORTS = {
    "PinnedHostPool": "kvfault.reference.device.host_pool",
    "HostPage": "kvfault.reference.device.host_pool",
    "HostPageBatch": "kvfault.reference.device.host_pool",
    "map_pinned": "kvfault.reference.device.host_pool",
    "DeviceKvPages": "kvfault.reference.device.device_pages",
    "device_available": "kvfault.reference.device.device_pages",
    "device_backend": "kvfault.reference.device.device_pages",
    "TorchCopyEngine": "kvfault.reference.device.copy_engine",
    "RestoreTicket": "kvfault.reference.device.ticket",
    "Method": "kvfault.reference.device.copy_engine",
    "Gather": "kvfault.reference.device.copy_engine",
    "DMA_MIN_BLOCK_BYTES": "kvfault.reference.device.copy_engine",
    "word_dtype": "kvfault.reference.device.copy_engine",
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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
