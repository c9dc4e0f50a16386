"""``KvPages`` over ATOM's DSV4 PAGE and SLOT pools, for the tier's fake forward.

The fake forward writes where ATOM's model writes: into the pools ATOM's DSV4 metadata
builder allocated, located by the builder's own geometry (what its paged
state-checkpoint copy uses), not by the transfer regions it describes to the connector,
so a region map that leaves a pool out shows as a restore that misses it. A page's
fingerprint fills every region a PAGE id owns (each KV plane's block envelope and each
CSA indexer layer's block: ``_page_unit_regions``, ``base + block * stride``); a
request's state fills its state group's whole slot in every KV plane
(``_slot_views``). So a restore that misses or misplaces any region's unit of a block,
or the SLOT, reads back as another page or state, and the answer, computed from every
page and the state, changes.

A state is read where a DSV4 resumer reads it: inside the part of the slot ATOM's
state checkpoints keep (per plane, the first and the last 8 bytes of its
``_checkpoint_slot_ranges``). A checkpoint restored from HBM writes only that part, as
ATOM's does; lmcache's SLOT sidecar writes the whole slot."""

from __future__ import annotations

from typing import Any

# What a freed block or a state group given to another request holds until written:
# no page or state the model computes is this value by chance.
POISON_STATE = -0x5EED_0F_DEAD


class Dsv4Kv:
    """PAGE blocks and SLOT groups of one DSV4 worker rank, in the pools ``builder``
    (ATOM's ``DeepseekV4AttentionMetadataBuilder``, its pools allocated) holds.
    ``groups`` maps a request to its state group (set before a forward)."""

    def __init__(self, builder: Any) -> None:
        from kvfault.faults.atom.dsv4_staging import _host_bytes

        self._bytes = _host_bytes
        bases, strides = builder._page_unit_regions()
        self._page = [(int(b), int(s)) for b, s in zip(bases, strides, strict=True)]
        self._slots = [
            [(int(v.data_ptr()), int(v.numel() * v.element_size())) for v in views]
            for views in builder._slot_views()
        ]
        self._probes = [
            (r[0][0], r[-1][0] + r[-1][1] - 8) for r in builder._checkpoint_slot_ranges()
        ]
        if any(o % 8 for p in self._probes for o in p):
            raise ValueError(f"ATOM's checkpoint ranges {self._probes} are not 8-byte aligned")
        self.num_blocks = int(builder.model_runner.num_physical_kvcache_blocks)
        self.num_slots = len(self._slots)
        self.groups: dict[str, int] = {}

    def _view(self, address: int, nbytes: int) -> Any:
        import torch

        return self._bytes(address, nbytes).view(torch.int64)

    def _page_units(self, block: int) -> list[Any]:
        if not 0 <= block < self.num_blocks:
            raise ValueError(f"no block {block} in ATOM's DSV4 pools")
        return [self._view(base + block * stride, stride) for base, stride in self._page]

    def _slot_units(self, group: int) -> list[Any]:
        if not 0 <= group < self.num_slots:
            raise ValueError(f"no state group {group} in ATOM's DSV4 pools")
        return [self._view(address, nbytes) for address, nbytes in self._slots[group]]

    @staticmethod
    def _one(values: set[int]) -> int:
        return values.pop() if len(values) == 1 else hash(tuple(sorted(values)))

    def read(self, block: int) -> int:
        units = self._page_units(block)
        return self._one({int(u[0]) for u in units} | {int(u[-1]) for u in units})

    def write(self, block: int, page: int) -> None:
        for u in self._page_units(block):
            u.fill_(page)

    def image_heads(self, blocks: list[int]) -> set[int]:
        """What the first 8 bytes of each of ``blocks`` hold in its first PAGE region:
        where ATOM's paged state checkpoint puts the first bytes of a state image (its
        copy plan starts the image with the first checkpointed range of the first KV
        plane, at its first unit's first region), so a block that starts an image of a
        state holds that state's value there."""
        base, stride = self._page[0]
        return {int(self._view(base + b * stride, 8)[0]) for b in blocks}

    def read_group(self, group: int) -> int:
        units = self._slot_units(group)
        return self._one(
            {
                int(u[o // 8])
                for u, offsets in zip(units, self._probes, strict=True)
                for o in offsets
            }
        )

    def write_group(self, group: int, state: int) -> None:
        for u in self._slot_units(group):
            u.fill_(state)

    def read_state(self, req_id: str) -> int | None:
        group = self.groups.get(req_id)
        return None if group is None else self.read_group(group)

    def write_state(self, req_id: str, state: Any | None) -> None:
        group = self.groups.get(req_id)
        if group is not None and state is not None:
            self.write_group(group, int(state))
