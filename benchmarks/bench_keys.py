"""Key figures: ``tier_token_ids`` plus chunk keys for a 128k-token prompt, side by side
with lmcache's own token hasher in one run (prints, never asserts).

    python benchmarks/bench_keys.py [--tokens 131072] [--repeat 20]

lmcache is optional: without it only kvfault's figures print.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time

from kvfault.reference import Request
from kvfault.reference.rules import chunk_keys, media_cache_seed, tier_token_ids


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=131072)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(0)
    ids = tuple(rng.randrange(2**17) for _ in range(args.tokens))
    req = Request("bench", ids, cache_seed=media_cache_seed((rng.randbytes(4096),)))

    def ours() -> None:
        chunk_keys(tier_token_ids(req), args.chunk)

    ours_ms = _median_ms(ours, args.repeat)
    print(f"kvfault tier_token_ids + chunk_keys (blake2b), {args.tokens} tokens: {ours_ms:.2f} ms")
    try:
        logging.disable(logging.INFO)
        from lmcache.v1.multiprocess.token_hasher import TokenHasher
    except ImportError:
        print(
            "lmcache not installed: no side-by-side figure (install the lmcache extra: pip install -c constraints/ci.txt '.[lmcache]')"
        )
        return
    hasher = TokenHasher(chunk_size=args.chunk)
    as_list = list(ids)
    theirs_ms = _median_ms(lambda: hasher.compute_chunk_hashes(as_list), args.repeat)
    print(
        f"lmcache TokenHasher.compute_chunk_hashes (blake3), {args.tokens} tokens: {theirs_ms:.2f} ms"
    )
    print(
        f"ratio lmcache/kvfault = {theirs_ms / ours_ms:.2f}x (>= 1 means kvfault is at least as fast)"
    )


if __name__ == "__main__":
    main()
