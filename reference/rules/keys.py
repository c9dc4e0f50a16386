"""Keys: the ids every tier key site uses, tier chunk keys, and seeded hash chains.

Every lookup, save and load key goes through ``tier_token_ids`` (fix 1 of the seed).
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from typing import Iterator, Sequence

from kvfault.reference.types import TEXT_CACHE_SEED, Request

_U32 = 0xFFFFFFFF
_U32_LIMIT = 2**32
_CHAIN_TAG = 0x6B766661756C74  # "kvfault": ints only, so no PYTHONHASHSEED salt
_SEED_IDS = 4  # the 64-bit seed is folded into this many ids, 16 bits each
_KEPT = 16384  # prompts (and prefixes) whose keys and chains are remembered


def media_cache_seed(media: Sequence[bytes]) -> int:
    """A 64-bit digest of the media content; -1 when there is none (text)."""
    if not media:
        return TEXT_CACHE_SEED
    h = hashlib.blake2b(digest_size=8)
    for item in media:
        h.update(len(item).to_bytes(8, "little"))
        h.update(item)
    return int.from_bytes(h.digest(), "little")


def tier_token_ids(seq: Request, end: int | None = None) -> tuple[int, ...]:
    """The token ids used for every tier key of ``seq[:end]``.

    Text (``cache_seed == -1``) keys on exactly the prompt ids. Otherwise each 16-bit
    quarter of the 64-bit seed is XORed into one of the first four ids: the map is
    one-to-one for a fixed prompt, so different media give different ids, and every id
    stays in ``[0, 2**32)`` (the real LMCache server never answers ids outside it).
    """
    ids = seq.prompt_token_ids if end is None else seq.prompt_token_ids[:end]
    if seq.cache_seed == TEXT_CACHE_SEED:
        return tuple(ids)
    seed = seq.cache_seed & 0xFFFFFFFFFFFFFFFF
    head = tuple(
        ((ids[i] & _U32) ^ ((seed >> (16 * i)) & 0xFFFF)) & _U32
        for i in range(min(_SEED_IDS, len(ids)))
    )
    return head + tuple(ids[_SEED_IDS:])


def chunk_keys(tier_ids: Sequence[int], chunk_size: int) -> list[bytes]:
    """Prefix-chain keys of every full chunk: key_i = H(key_{i-1} || packed chunk i).

    Partial chunks are not keyed (as in LMCache). Ids must lie in ``[0, 2**32)``.
    """
    return list(_chunk_keys(tuple(tier_ids), chunk_size))


def ids_fit_u32(ids: Sequence[int]) -> bool:
    """Every id is an int in ``[0, 2**32)`` (the only ids the real server answers)."""
    try:  # packing as 32-bit unsigned checks every id, in C
        array("I", ids)
    except (OverflowError, TypeError):
        return not ids or (min(ids) >= 0 and max(ids) < _U32_LIMIT)
    return True


class ChunkKeyMemo:
    """``chunk_keys`` and ``ids_fit_u32`` of id tuples, remembered by identity.

    A scheduler hands its tier one tuple of a prompt's tier ids for the lookup, every
    save (a longer prefix each chunk) and the retrieve. Keying and checking that tuple
    once makes each later ask a slice of the answer instead of a pass over the ids.
    An entry holds its tuple, so the ``id`` it is found by is not reused while it
    lives; the oldest of ``kept`` entries goes first. Other sequences (a list could
    change) are answered afresh.
    """

    def __init__(self, chunk_size: int, kept: int = _KEPT):
        self.chunk_size = chunk_size
        self._kept = kept
        # id(ids) -> [ids, keys of the whole ids (None: some id does not fit), fits u32]
        self._seen: dict[int, list] = {}

    def _entry(self, ids: tuple[int, ...]) -> list:
        entry = self._seen.get(id(ids))
        if entry is None or entry[0] is not ids:
            try:  # one packing both checks every id and gives the bytes to key
                packed = array("I", ids).tobytes()
            except (OverflowError, TypeError):
                # Some id does not fit: a prefix may still be keyable, asked afresh.
                entry = [ids, None, ids_fit_u32(ids)]
            else:
                entry = [ids, _packed_keys(packed, self.chunk_size), True]
            self._seen[id(ids)] = entry
            if len(self._seen) > self._kept:
                del self._seen[next(iter(self._seen))]
        return entry

    def keys(self, ids: Sequence[int], end: int | None = None) -> list[bytes]:
        """``chunk_keys(ids[:end], chunk_size)``."""
        cs = self.chunk_size
        n = len(ids) if end is None else max(0, min(end, len(ids)))
        if type(ids) is tuple:
            keys = self._entry(ids)[1]
            if keys is not None:  # a prefix chain: a prefix's keys come first
                return list(keys[: n // cs])
        return chunk_keys(ids[:n], cs)

    def fit_u32(self, ids: Sequence[int], end: int | None = None) -> bool:
        """``ids_fit_u32(ids[:end])``."""
        if type(ids) is tuple and self._entry(ids)[2]:
            return True  # every id fits, so those of any prefix do
        return ids_fit_u32(ids if end is None else ids[: max(end, 0)])


# Keys asked for by content (a key event's first chunk, a sequence that is not the
# tuple a tier memo holds) are remembered by content: hashing the ids costs a fraction
# of keying them. Room for every prompt of a 4,096-restore burst: a cache smaller than
# one pass over them keeps nothing (each is asked for again only after all the others).
@functools.lru_cache(maxsize=_KEPT)
def _chunk_keys(tier_ids: tuple[int, ...], chunk_size: int) -> tuple[bytes, ...]:
    full = len(tier_ids) - len(tier_ids) % chunk_size
    return _packed_keys(array("I", tier_ids[:full]).tobytes(), chunk_size)


def _packed_keys(packed: bytes, chunk_size: int) -> tuple[bytes, ...]:
    """The chain over the full chunks of ids packed as 32-bit unsigned (a partial
    chunk at the end is left out)."""
    step = chunk_size * 4
    keys: list[bytes] = []
    prev = b"\x00" * 16
    for off in range(0, len(packed) - len(packed) % step, step):
        prev = hashlib.blake2b(prev + packed[off : off + step], digest_size=16).digest()
        keys.append(prev)
    return tuple(keys)


def block_hash_chain(
    token_ids: Sequence[int], block_size: int, seed: int, upto: int | None = None
) -> list[int]:
    """Hash chain over full blocks starting from ``seed`` (the HBM prefix cache and any
    side chain, e.g. names of hybrid state images). Starts from ``cache_seed``, so two
    pictures with the same placeholder ids never share a chain. Python's tuple hash of
    ints does not depend on PYTHONHASHSEED."""
    if upto is not None and upto < 4 * block_size:
        # A few blocks cost less to hash than to look up (which hashes every id).
        return list(_block_hash_chain.__wrapped__(tuple(token_ids), block_size, seed, upto))
    return list(_block_hash_chain(tuple(token_ids), block_size, seed, upto))


# Every send of a prompt builds its chains again (a restored prompt was sent before).
@functools.lru_cache(maxsize=_KEPT)
def _block_hash_chain(
    token_ids: tuple[int, ...], block_size: int, seed: int, upto: int | None
) -> tuple[int, ...]:
    end = len(token_ids) if upto is None else upto
    end -= end % block_size
    chain: list[int] = []
    append = chain.append
    prev = hash((_CHAIN_TAG, seed))
    blocks: Iterator[tuple[int, ...]]
    if end > len(token_ids):  # ``upto`` past the prompt: short (or empty) blocks too
        blocks = (tuple(token_ids[off : off + block_size]) for off in range(0, end, block_size))
    else:  # the full blocks as tuples, cut in C: one iterator repeated block_size times
        blocks = zip(*[iter(token_ids[:end])] * block_size, strict=True)
    for block in blocks:
        prev = hash((prev, block))
        append(prev)
    return tuple(chain)


def state_image_key(chain: Sequence[int], position: int, block_size: int) -> int:
    """Name of the state image after ``position`` tokens (a block boundary > 0)."""
    return chain[position // block_size - 1]
