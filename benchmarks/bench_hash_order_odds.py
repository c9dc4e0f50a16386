"""How often the legacy hash-order restart numbering keeps a healthy engine alive, by
burst shape and size (prints, never asserts).

    python benchmarks/bench_hash_order_odds.py [--trials 20000] [--loads 8,16,24,64]

Drives the legacy rule itself (``kvfault.faults.regressions.legacy.HashOrderBounds``) as the
engine does after a restart: all loads dispatched at once, two finishing per step (the
engine's two restore slots), each step's bound restarts applied before its bound check.
Each trial gives the loads fresh random 64-bit hashes, as another PYTHONHASHSEED gives
the request ids; the figure is the share of trials in which no load ran past its bound
(the legacy run passes). Shapes: ``restart_burst`` (a 29 s first forward, one 21 s step,
then fast steps) and ``loaded_restart_burst`` (a 29 s first forward, then 21 s steps).
"""

from __future__ import annotations

import argparse
import random

from kvfault.faults.regressions.legacy import HashOrderBounds
from kvfault.reference.rules.bounds import LoadBounds

_BOUND_S = 40.0  # the burst scenarios' load bound (30 s deadline + 10 s slack)


class _Op:
    """A load whose hash is drawn, not derived from a request id."""

    __slots__ = ("_hash",)

    def __init__(self, h: int):
        self._hash = h

    def __hash__(self) -> int:
        return self._hash


def _steps(shape: str, n: int) -> list[float]:
    """Forward durations: the first (compile) finishes nothing; each later one two loads."""
    tail = 21.0 if shape == "loaded_restart_burst" else 0.02
    pairs = (n + 1) // 2
    return [29.0, 21.0] + [tail] * (pairs - 1)


def passes(
    shape: str, n: int, rng: random.Random, rule: type[LoadBounds] = HashOrderBounds
) -> bool:
    """One burst under ``rule``: True when no load ran past its bound."""
    bounds = rule(_BOUND_S)
    ops = [_Op(rng.getrandbits(64) - 2**63) for _ in range(n)]
    for op in ops:
        bounds.dispatched(op, 0.0)
    now, done = 0.0, 0
    for i, step in enumerate(_steps(shape, n)):
        now += step
        if i > 0:
            for op in ops[done : done + 2]:
                bounds.terminal(op, now, finished=True)
            done += 2
        if bounds.overdue(now) is not None:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--loads", default="8,16,24,64")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"{'shape':22s} {'loads':>5s}  fixed  legacy passes (of {args.trials} hash orders)")
    for shape in ("restart_burst", "loaded_restart_burst"):
        for n in (int(x) for x in args.loads.split(",")):
            fixed = "pass" if passes(shape, n, rng, LoadBounds) else "FAIL"
            passed = sum(passes(shape, n, rng) for _ in range(args.trials))
            print(f"{shape:22s} {n:5d}  {fixed:5s}  {passed:6d}  {passed / args.trials:.2e}")


if __name__ == "__main__":
    main()
