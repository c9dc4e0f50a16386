"""argparse value types shared by the CLI and the pytest plugin: one clear message each."""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path
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

    def parse(text: str) -> float:
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
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week
# A case's --timeout unless one is given (a replay: the one its artifact recorded).
DEFAULT_CASE_TIMEOUT_S = 600.0
timeout_seconds = number_at_least(
    0, "--timeout (seconds, 0: none)", float, maximum=MAX_TIMEOUT_S, why=" (a week)"
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


def prove_timeout(text: str) -> float | None:
    """prove's ``--timeout``: seconds, at most a week (no inf, no NaN); 0 is none (None),
    as every command's ``--timeout`` takes it."""
    return timeout_seconds(text) or None


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


# -- how and where a campaign runs (kvfault run, kvfault sweep) -------------------------


def jobs(text: str) -> int | str:
    """``kvfault run -j``: a number of processes on this machine (1: this one alone) or
    ``auto``."""
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(
        f"wants a number of processes (1: this one alone) or 'auto', got {text!r}"
    )


def workers(text: str) -> str:
    """``-n``/``sweep -j``: pytest-xdist workers (``kvfault.faults.fanout.workers_arg``)."""
    from kvfault.faults.fanout import workers_arg  # stdlib only: cheap

    try:
        return workers_arg(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gateway(text: str) -> str:
    """``--tx``: an execnet gateway spec (``kvfault.faults.fanout.tx_arg``)."""
    from kvfault.faults.fanout import tx_arg

    try:
        return tx_arg(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def hosts_refused(tx: list[str], rsyncdirs: list[str]) -> str | None:
    """Why ``--rsyncdir``/``--tx`` cannot run as given: rsync with no gateway to send
    to, or more gateways in all than one command may start."""
    from kvfault.faults.fanout import MAX_WORKERS, gateway_count

    if rsyncdirs and not tx:
        return "--rsyncdir sends a directory to --tx gateways; give --tx too (or drop it)"
    total = sum(gateway_count(t) for t in tx)
    if total > MAX_WORKERS:
        return f"--tx starts {total} gateways in all; at most {MAX_WORKERS}"
    return None


def seeds_refused(first_seed: int, count: int, budget: float | None) -> str | None:
    """Why ``--first-seed``/``--seed-count`` cannot run: more seeds than a campaign
    without ``--budget`` may take, or seeds past ``MAX_SEED``."""
    if count > MAX_SEED_COUNT and budget is None:
        return (
            f"--seed-count {count} is more than {MAX_SEED_COUNT} seeds per target "
            "(each runs every target once: that would take days); give --budget to run as "
            "many as fit in a time"
        )
    last = first_seed + count - 1
    if last > MAX_SEED:
        return f"--first-seed {first_seed} --seeds {count} reaches seed {last}; seeds go up to {MAX_SEED}"
    return None


def path(text: str) -> Path:
    """A ``type=`` for a path: any but the empty one (``Path("")`` would be ``.``, the
    current directory, which no one means by an empty argument)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def dir_refused(path: Path, flag: str) -> str | None:
    """Why ``path`` cannot be (made into) a directory we write files in, or None."""
    if path.exists() and not path.is_dir():
        return f"{flag} {path} is a file, not a directory"
    existing = path
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            return f"{flag} {path}: {existing} is a link to nothing ({os.readlink(existing)})"
        existing = existing.parent
    if not existing.is_dir():
        return f"{flag} {path}: {existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{flag} {path}: {existing} is not writable"
    # Permissions are not the whole story (sysfs, a read-only mount, root): make and
    # remove a directory there, so the run is refused now and not after it started.
    try:
        probe = tempfile.mkdtemp(prefix=".kvfault-probe-", dir=existing)
    except OSError as exc:
        return f"{flag} {path}: cannot make a directory in {existing}: {exc.strerror or exc}"
    os.rmdir(probe)
    return None


class Once(argparse.Action):
    """An option that takes one value: given twice, argparse's one-line usage error
    (exit 2) rather than the last value silently winning."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} takes one value; given twice")
        setattr(namespace, self.dest, values)
