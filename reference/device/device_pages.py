"""The device side of a restore: KV pages in device memory, and which device torch sees.

Device-agnostic through ``torch.cuda`` (CUDA and HIP builds of torch).
"""

from __future__ import annotations

from typing import Any

import torch


def device_available() -> bool:
    """True when torch sees a CUDA or HIP device."""
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def device_backend() -> str:
    """``"hip"`` on a ROCm build of torch, ``"cuda"`` otherwise."""
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


class DeviceKvPages:
    """HBM: ``num_blocks`` KV pages of ``page_shape`` and ``dtype`` on a device, plus one
    recurrent-state tensor per request. Implements ``kvfault.reference.interfaces.KvPages``.

    ``read`` returns a view of the page (clone it to keep a snapshot); ``write`` copies on
    the current stream.
    """

    def __init__(
        self,
        num_blocks: int,
        page_shape: tuple[int, ...],
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str | None = None,
    ):
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.device = torch.device(device) if device is not None else _default_device()
        self.page_shape = tuple(page_shape)
        self.dtype = dtype
        self.num_blocks = num_blocks
        self.pages = torch.empty((num_blocks, *self.page_shape), dtype=dtype, device=self.device)
        self.row_bytes = self.pages[0].numel() * self.pages.element_size()
        self._states: dict[str, torch.Tensor] = {}

    def rows(self, word: torch.dtype) -> torch.Tensor:
        """The pages as ``[num_blocks, words]`` device rows of ``word``."""
        return self.pages.view(self.num_blocks, -1).view(word)

    def read(self, block: int) -> torch.Tensor:
        return self.pages[block]

    def write(self, block: int, page: Any) -> None:
        self.pages[block].copy_(torch.as_tensor(page).reshape(self.page_shape))

    def read_state(self, req_id: str) -> torch.Tensor | None:
        return self._states.get(req_id)

    def write_state(self, req_id: str, state: Any | None) -> None:
        if state is None:
            self._states.pop(req_id, None)
        else:
            self._states[req_id] = torch.as_tensor(state).to(self.device)


def _default_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def device_pci_bus(device: torch.device) -> str:
    """The device's PCI bus id (``0000:18:00.0``), or ``unknown``."""
    try:
        props = torch.cuda.get_device_properties(device)
        domain, bus, dev = props.pci_domain_id, props.pci_bus_id, props.pci_device_id
        return f"{domain:04x}:{bus:02x}:{dev:02x}.0"
    except (AttributeError, RuntimeError, AssertionError):
        return "unknown"


def driver_version() -> str:
    """The GPU driver's version as its kernel module reports it (NVIDIA), else the
    driver API version torch's runtime sees, else ``unknown``."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            first = f.readline()
        for word in first.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    try:
        return (
            str(torch.cuda.driver_version()) if hasattr(torch.cuda, "driver_version") else "unknown"
        )
    except Exception:  # noqa: BLE001 - an informational field
        return "unknown"
