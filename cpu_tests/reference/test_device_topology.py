"""Where a GPU sits on its host (``kvfault.reference.device.topology``): sysfs read from a fake
tree, the placement decision, and the NUMA system calls on this machine's own memory."""

from __future__ import annotations

import ctypes
import mmap
import platform
from pathlib import Path

import pytest

from kvfault.reference.device.topology import (
    GpuTopology,
    NumaPolicy,
    _node_list,
    _sysfs_bus_id,
    placement_target,
    read_topology,
)


def _sysfs(root: Path, bus: str, files: dict[str, str], online: str | None) -> Path:
    dev = root / "bus" / "pci" / "devices" / bus
    dev.mkdir(parents=True)
    for name, text in files.items():
        (dev / name).write_text(text + "\n")
    if online is not None:
        node = root / "devices" / "system" / "node"
        node.mkdir(parents=True)
        (node / "online").write_text(online + "\n")
    return root


def test_a_server_gpu_on_node_one_of_two_at_full_link(tmp_path):
    root = _sysfs(
        tmp_path,
        "0000:c1:00.0",
        {
            "numa_node": "1",
            "current_link_speed": "32.0 GT/s PCIe",
            "current_link_width": "16",
            "max_link_speed": "32.0 GT/s PCIe",
            "max_link_width": "16",
        },
        "0-1",
    )
    # the driver's spelling: an 8-digit domain, upper case
    top = read_topology("00000000:C1:00.0", root)
    assert top == GpuTopology("00000000:C1:00.0", 1, (0, 1), "32.0 GT/s PCIe x16")
    assert placement_target(top) == (1, "")
    assert "NUMA node 1 (host nodes 0,1)" in top.line()


def test_a_downtrained_link_shows_its_maximum(tmp_path):
    files = {
        "numa_node": "-1",
        "current_link_speed": "16.0 GT/s PCIe",
        "current_link_width": "8",
        "max_link_speed": "32.0 GT/s PCIe",
        "max_link_width": "16",
    }
    top = read_topology("0000:18:00.0", _sysfs(tmp_path, "0000:18:00.0", files, "0"))
    assert top.link == "16.0 GT/s PCIe x8 (max 32.0 GT/s PCIe x16)"
    assert top.numa_node is None  # -1: the firmware does not say
    node, why = placement_target(top)
    assert node is None and why == "one NUMA node (0): nothing to place"


def test_several_nodes_but_not_the_gpus_leaves_the_pool_unplaced():
    node, why = placement_target(GpuTopology("x", None, (0, 1), "?"))
    assert node is None and "not the GPU's" in why


def test_no_sysfs_entry_says_so(tmp_path):
    top = read_topology("0000:18:00.0", tmp_path)
    assert top.link == "not shown (no sysfs entry)" and top.numa_node is None and top.nodes == ()
    assert placement_target(top)[0] is None


@pytest.mark.parametrize(
    "text,nodes", [("0", (0,)), ("0-3", (0, 1, 2, 3)), ("0,2-3", (0, 2, 3)), ("", ()), ("x", ())]
)
def test_node_lists(text, nodes):
    assert _node_list(text) == nodes


def test_bus_ids_as_the_driver_and_sysfs_spell_them():
    assert _sysfs_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert _sysfs_bus_id("0000:1b:00.0") == "0000:1b:00.0"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="syscall numbers")
def test_the_numa_calls_work_on_this_machines_memory():
    policy = NumaPolicy()
    online = _node_list(Path("/sys/devices/system/node/online").read_text())
    node = online[0] if online else 0
    with policy.prefer(node):
        buf = mmap.mmap(-1, 1 << 20)
        buf.write(b"\x5a" * (1 << 20))  # resident now, under the policy
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    try:
        nodes = policy.pages_nodes(addr, 1 << 20, samples=8)
    finally:
        del addr
    assert len(nodes) == 8 and set(nodes) <= set(online)
    if len(online) == 1:
        assert set(nodes) == {node}
