"""Where a GPU sits on its host, as the operating system shows it: its PCIe link and its
NUMA node (sysfs), and a way to put pinned host memory on that node.

Host memory a GPU reads over PCIe crosses the socket interconnect when it lives on the
other socket's node: on a server that alone can cost a restore a third of its
bandwidth. ``on_node`` sets the calling thread's memory policy to prefer the GPU's node
while the pool is allocated (the pages are made resident then, when they are pinned),
and ``pages_nodes`` reads back where the pages really are (``move_pages`` with no
target), so the pool reports what happened, not what was asked.

A VM usually shows one node and an emulated link: then there is nothing to place, and
the placement line says so. Imports no torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# syscall numbers by machine: set_mempolicy, move_pages
_SYSCALLS = {"x86_64": (238, 279), "aarch64": (237, 239)}
_MPOL_DEFAULT, _MPOL_PREFERRED = 0, 1


@dataclass(frozen=True)
class GpuTopology:
    """A GPU's place on its host: PCI bus id, NUMA node (None: not shown), the nodes the
    host has online, and the PCIe link as sysfs reports it."""

    pci_bus: str
    numa_node: int | None
    nodes: tuple[int, ...]
    link: str

    def line(self) -> str:
        node = "not shown" if self.numa_node is None else str(self.numa_node)
        nodes = ",".join(map(str, self.nodes)) or "?"
        return f"PCI {self.pci_bus}, PCIe link {self.link}, NUMA node {node} (host nodes {nodes})"


def read_topology(pci_bus: str, sys_root: Path = Path("/sys")) -> GpuTopology:
    """What sysfs under ``sys_root`` says about the device at ``pci_bus``
    (``0000:18:00.0``; case and a longer domain as the driver prints it are accepted)."""
    dev = sys_root / "bus" / "pci" / "devices" / _sysfs_bus_id(pci_bus)
    node = _read_int(dev / "numa_node")
    speed, width = _read(dev / "current_link_speed"), _read(dev / "current_link_width")
    top_speed, top_width = _read(dev / "max_link_speed"), _read(dev / "max_link_width")
    if speed is None:
        link = "not shown (no sysfs entry)"
    else:
        link = f"{speed} x{width}"
        if (top_speed, top_width) != (speed, width):
            link += f" (max {top_speed} x{top_width})"
    nodes = _node_list(_read(sys_root / "devices" / "system" / "node" / "online") or "")
    return GpuTopology(
        pci_bus=pci_bus,
        numa_node=node if node is not None and node >= 0 else None,
        nodes=nodes,
        link=link,
    )


def placement_target(top: GpuTopology) -> tuple[int | None, str]:
    """The node to put the pool on, or None with the reason there is nothing to do."""
    if len(top.nodes) <= 1:
        return None, f"one NUMA node ({top.nodes[0] if top.nodes else '?'}): nothing to place"
    if top.numa_node is None:
        return None, "the host shows several NUMA nodes but not the GPU's: pool left unplaced"
    return top.numa_node, ""


class NumaPolicy:
    """The calling thread's memory policy, through the raw system calls (no libnuma)."""

    def __init__(self) -> None:
        numbers = _SYSCALLS.get(platform.machine())
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        if numbers is None or not hasattr(libc, "syscall"):
            raise OSError(f"no NUMA system calls known for {platform.machine()}")
        self._set_mempolicy, self._move_pages = numbers
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long

    @contextlib.contextmanager
    def prefer(self, node: int) -> Iterator[None]:
        """Allocations made by this thread inside prefer ``node``."""
        mask = (ctypes.c_ulong * 16)()
        mask[node // 64] = 1 << (node % 64)
        self._call(self._set_mempolicy, _MPOL_PREFERRED, mask, ctypes.c_ulong(16 * 64 + 1))
        try:
            yield
        finally:
            self._call(self._set_mempolicy, _MPOL_DEFAULT, None, ctypes.c_ulong(0))

    def pages_nodes(self, addr: int, nbytes: int, samples: int = 64) -> list[int]:
        """The node of up to ``samples`` pages spread over ``[addr, addr + nbytes)``
        (negative: an errno for that page, e.g. not resident)."""
        page = os.sysconf("SC_PAGE_SIZE")
        first, last = addr // page, (addr + max(nbytes, 1) - 1) // page
        count = min(samples, last - first + 1)
        step = max(1, (last - first + 1) // count)
        pages = (ctypes.c_void_p * count)(*[(first + i * step) * page for i in range(count)])
        status = (ctypes.c_int * count)()
        self._call(self._move_pages, 0, ctypes.c_ulong(count), pages, None, status, 0)
        return list(status)

    def _call(self, number: int, *args: object) -> None:
        if self._syscall(ctypes.c_long(number), *args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syscall {number}: {os.strerror(err) or errno.errorcode[err]}")


def _sysfs_bus_id(pci_bus: str) -> str:
    # The driver prints 00000000:18:00.0 (8-digit domain); sysfs names it 0000:18:00.0.
    bus = pci_bus.strip().lower()
    domain, _, rest = bus.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest and len(domain) > 4 else bus


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _node_list(text: str) -> tuple[int, ...]:
    """``0-1,4`` -> (0, 1, 4); what cannot be read, ()."""
    nodes: list[int] = []
    try:
        for part in filter(None, text.strip().split(",")):
            lo, _, hi = part.partition("-")
            nodes += range(int(lo), int(hi or lo) + 1)
    except ValueError:
        return ()
    return tuple(nodes)
