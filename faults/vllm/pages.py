"""Page fingerprints in vLLM's KV tensors: the fake forward's memory.

``kvfault.fakes.model.DeterministicModel`` computes one 64-bit fingerprint per KV block. Here
a fingerprint is written into every element of the block in every layer's KV tensor
(K and V), so whatever lmcache's engine-driven copy does with a block's bytes, a block
read back decodes to its fingerprint only if every byte of it came back; anything
else (another block, a block never written, a half-written one) reads as no page.

Element ``i`` of a block holds ``limb[i % 4] + 65536 * (i % 4)``: the fingerprint's
four 16-bit limbs, tagged with their position, exact in float32.
"""

from __future__ import annotations

from typing import Any

_LIMBS = 4
_SIGN = 1 << 63


class TensorPages:
    """``kvfault.reference.interfaces.KvPages`` over vLLM-shaped KV tensors, one per layer,
    each ``[2, num_blocks, block_size, heads, head_size]`` (the block is axis 1)."""

    def __init__(self, torch: Any, tensors: dict[str, Any]):
        self._torch = torch
        self.tensors = tensors
        first = next(iter(tensors.values()))
        self.num_blocks = int(first.shape[1])
        per_block = first[:, 0].numel()
        self._tags = torch.arange(per_block, dtype=torch.int64) % _LIMBS

    def _pattern(self, page: int) -> Any:
        value = page + _SIGN  # hash() may be negative: shift into [0, 2**64)
        limbs = self._torch.tensor(
            [(value >> (16 * k)) & 0xFFFF for k in range(_LIMBS)], dtype=self._torch.int64
        )
        return (limbs[self._tags] + 65536 * self._tags).to(self._torch.float32)

    def write(self, block: int, page: Any) -> None:
        flat = self._pattern(page)
        for t in self.tensors.values():
            t[:, block].copy_(flat.view(t[:, block].shape))

    def read(self, block: int) -> Any:
        first = next(iter(self.tensors.values()))
        data = first[:, block].reshape(-1).to(self._torch.int64)
        head = data[:_LIMBS].tolist()
        if [v >> 16 for v in head] != list(range(_LIMBS)):
            return None
        value = sum((v & 0xFFFF) << (16 * k) for k, v in enumerate(head))
        page = value - _SIGN
        expected = self._pattern(page)
        for t in self.tensors.values():
            if not bool((t[:, block].reshape(-1) == expected).all()):
                return None
        return page

    def read_state(self, req_id: str) -> Any:  # dense models keep no state
        return None

    def write_state(self, req_id: str, state: Any) -> None:
        raise NotImplementedError("the vllm tier runs a dense model")
