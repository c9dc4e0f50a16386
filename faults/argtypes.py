"""argparse value types shared by the CLI and the pytest plugin: one clear message each."""

from __future__ import annotations

import argparse
import re
from typing import Callable

# A seed seeds random.Random and names a case; 2**32 - 1 keeps it what a reviewer can
# type and what an artifact records (faults.repro reads it back with the same limit).
MAX_SEED = 2**32 - 1
# Seeds per target in one campaign without --budget: 29 targets x 1000 seeds is already
# hours on 2 cores; more is a mistake, not a plan (with --budget, as many as fit run).
MAX_SEED_COUNT = 1000


def number_at_least(
    minimum: float, what: str, kind: type = int, maximum: float | None = None, why: str = ""
) -> Callable[[str], float]:
    """A ``type=`` for argparse: ``kind(text)``, refused below ``minimum`` or above
    ``maximum`` with a line naming ``what`` (and ``why`` the maximum)."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{what} wants {noun}, got {text!r}") from None
        if value != value:  # NaN
            raise argparse.ArgumentTypeError(f"{what} wants {noun}, got {text!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{what} must be at most {maximum}{why}, got {text}")
        return value

    return parse


# With --budget a campaign runs as many seeds as fit, so the count may be large; this
# bounds only what a list of seeds may hold.
MAX_BUDGETED_SEED_COUNT = 1_000_000
seed_count = number_at_least(1, "a seed count", maximum=MAX_BUDGETED_SEED_COUNT)
seed = number_at_least(0, "a seed", maximum=MAX_SEED)
timeout_seconds = number_at_least(
    0, "--timeout (seconds, 0: none)", float, maximum=7 * 24 * 3600.0, why=" (a week)"
)


# A scenario's size multiplier (``faults.scenarios.RunContext.scale``): 256 turns the
# 64-load restart burst into 16,384 restores, far past any real burst.
MAX_SCALE = 256


def check_scale(value: object) -> int:
    """``value`` as a scenario scale, a whole number in ``[1, MAX_SCALE]``; raises
    ``ValueError`` with one line naming what is wrong."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"scale must be a whole number from 1 to {MAX_SCALE}, got {value!r}")
    if not 1 <= value <= MAX_SCALE:
        raise ValueError(f"scale must be from 1 to {MAX_SCALE}, got {value}")
    return value


def scale(text: str) -> int:
    """A ``type=`` for argparse and pytest options: a scenario scale."""
    try:
        return check_scale(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a scale is a whole number from 1 to {MAX_SCALE}, got {text!r}"
        ) from None


def scales(text: str) -> list[int]:
    """A ``type=`` for argparse: comma-separated scenario scales, at least one."""
    out = [scale(s.strip()) for s in text.split(",") if s.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"scales are comma-separated, e.g. 1,4,16; got {text!r}")
    return out


def names(text: str) -> list[str]:
    """A ``type=`` for argparse: comma-separated names, at least one (``--pin ,,,``
    names nothing: refused, not ignored)."""
    out = [n.strip() for n in text.split(",") if n.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"wants comma-separated names, e.g. a,b; got {text!r}")
    return out


# prove: runs of each side, and output lines shown per run.
MAX_REPEAT = 1000
repeat = number_at_least(1, "--repeat", maximum=MAX_REPEAT)
tail_lines = number_at_least(0, "--tail", maximum=100_000)


def prove_timeout(text: str) -> float:
    """prove's ``--timeout``: seconds above zero, at most a week (no inf, no NaN)."""
    seconds = number_at_least(0, "--timeout", float, maximum=7 * 24 * 3600.0, why=" (a week)")(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"--timeout must be a positive number of seconds, got {text}"
        )
    return seconds


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def duration(text: str) -> float:
    """A duration such as ``30s``, ``5m``, ``2h``, ``1h30m`` or ``90`` (seconds), in
    seconds; more than zero."""
    m = _DURATION.fullmatch(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise argparse.ArgumentTypeError(
            f"wants a duration such as 30s, 5m, 2h or 1h30m, got {text!r}"
        )
    h, mins, s = (float(g) if g else 0.0 for g in m.groups())
    seconds = h * 3600 + mins * 60 + s
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"wants a duration above zero, got {text!r}")
    return seconds
