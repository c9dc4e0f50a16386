"""``KvPages`` over ATOM's DSV4 PAGE and SLOT regions, for the tier's fake forward.

A page's fingerprint fills every PAGE region's unit of its block (the compressed main
KV plane and the CSA indexer, each ``base + block * unit``); a request's state fills
every SLOT region's unit of the state group ATOM's block manager gave it (reverse
indexed: ``base + total - (group + 1) * unit``). So a restore that misses or misplaces
any region's unit of a block, or the SLOT, reads back as another page or state, and
the answer, computed from every page and the state, changes.

A state is read where a DSV4 resumer reads it: inside the part of the slot ATOM's
state checkpoints keep (``probes``: per SLOT region, the offsets of the first and the
last 8 bytes of ATOM's checkpoint image there). A checkpoint restored from HBM writes
only that part, as ATOM's does; lmcache's SLOT sidecar writes the whole slot."""

from __future__ import annotations

from typing import Any

# What a freed block or a state group given to another request holds until written:
# no page or state the model computes is this value by chance.
POISON_STATE = -0x5EED_0F_DEAD


class Dsv4Kv:
    """PAGE blocks and SLOT groups of one DSV4 worker rank, at ATOM's regions'
    addresses. ``groups`` maps a request to its state group (set before a forward)."""

    def __init__(self, transfer: Any, probes: list[tuple[int, int]]) -> None:
        from kvfault.faults.atom.dsv4_staging import _host_bytes

        self._bytes = _host_bytes
        self._page = list(transfer.block_regions)
        self._slot = list(transfer.swa_block_regions)
        if len(probes) != len(self._slot) or any(o % 8 for p in probes for o in p):
            raise ValueError(f"state probes {probes} do not fit ATOM's SLOT regions")
        self._probes = probes
        self.num_blocks = int(transfer.num_blocks)
        self.num_slots = int(transfer.num_slots)
        self.groups: dict[str, int] = {}

    def _units(self, regions: list[Any], index: int) -> list[Any]:
        import torch

        if not 0 <= index < (self.num_blocks if regions is self._page else self.num_slots):
            raise ValueError(f"no unit {index} in ATOM's DSV4 regions")

        return [self._bytes(r.unit_addr(index), r.unit_bytes).view(torch.int64) for r in regions]

    @staticmethod
    def _value(units: list[Any]) -> int:
        values = {int(u[0]) for u in units} | {int(u[-1]) for u in units}
        return values.pop() if len(values) == 1 else hash(tuple(sorted(values)))

    def read(self, block: int) -> int:
        return self._value(self._units(self._page, block))

    def write(self, block: int, page: int) -> None:
        for u in self._units(self._page, block):
            u.fill_(page)

    def read_group(self, group: int) -> int:
        values = set()
        for unit, offsets in zip(self._units(self._slot, group), self._probes, strict=True):
            values |= {int(unit[o // 8]) for o in offsets}
        return values.pop() if len(values) == 1 else hash(tuple(sorted(values)))

    def write_group(self, group: int, state: int) -> None:
        for u in self._units(self._slot, group):
            u.fill_(state)

    def read_state(self, req_id: str) -> int | None:
        group = self.groups.get(req_id)
        return None if group is None else self.read_group(group)

    def write_state(self, req_id: str, state: Any | None) -> None:
        group = self.groups.get(req_id)
        if group is not None and state is not None:
            self.write_group(group, int(state))
