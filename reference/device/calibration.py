"""How ``TorchCopyEngine(method="auto")`` picks the way a restore moves its bytes: by
measuring each way it can use on this device, once, and remembering the answer.

- ``calibrate`` times every candidate path with a timer it is given (the engine's
  times one real restore; tests give a fake) in interleaved rounds and picks the one
  with the lowest median. A candidate whose timer raises is left out, with the reason.
- ``calibrate_sizes`` does that for small and for large restores; where the winners
  differ, the choice splits at the block count where their lines cross. Where the
  candidates include ``SPLIT`` (the copy engines and the gather kernel at once, each on a
  share of the blocks), it is measured after the single paths at each of
  ``SPLIT_SHARES`` against the large restores' winner, and its best share against the
  small restores' winner; listed after the single path, it is taken only where it is
  faster by more than the tie share, so a host where one path alone reaches the link
  keeps that path. (The two halves slow each other down: on a lent H100 whose SMs read
  host memory at 33 GB/s, the best share at 32 KiB pages was 0.8, not the 0.55 at which
  their times alone would end together.)
- ``CalibrationCache`` keeps the choices in one small JSON file in the user's cache
  directory (``cache_path``), keyed by device (name and PCI bus id), driver, torch and
  Triton version, and page size. A file that is not JSON, not this format, or holds a
  malformed entry is ignored with ONE line on stderr (the engine then measures again
  and rewrites it). Writers take a lock file (bounded wait) and replace the file
  atomically, so two processes writing at once leave a valid file holding both
  entries; without the lock (its wait ran out, or no ``fcntl``) the file is still
  replaced atomically, and at worst one entry is measured again next time.

Imports no torch: the choice and the cache are plain data, tested on any machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

CACHE_FORMAT = "kvfault-gpu-calibration"
CACHE_VERSION = 1
CACHE_FILE = "gpu_calibration.json"
LOCK_WAIT_S = 2.0  # how long a writer waits for the lock before writing without it
# A candidate within this share of the fastest median counts as tied, and a tie goes to
# the earlier candidate: the engine lists the copy engines (dma) first, which leave the
# SMs to the model's own kernels, and one calibration's noise is a few percent (on four
# H100 hosts, 256 KiB pages timed DMA and the gather within 1-3% of each other).
TIE_SHARE = 0.03
# The split path: ``SPLIT`` in a candidate list says the engine can run it; a measured or
# chosen split is named ``split:SHARE`` (SHARE: the share of the blocks the copy engines
# move, the rest by the gather kernel, at once on two streams). Its parts are these two.
SPLIT = "split"
SPLIT_PARTS = ("dma", "mapped:triton")
# the shares calibration tries (of the blocks, by the copy engines)
SPLIT_SHARES = (0.2, 0.4, 0.6, 0.8, 0.9)
# The split is taken only where its best share beats the best single path by more than
# this: it occupies both the copy engines and SMs, and on lent H100s the DMA of 16 MiB
# restores ran in two modes (a wall spread of 50-110% in one cell), enough for a few
# percent of calibration noise to pick it where it does not pay.
SPLIT_MARGIN = 0.05


def split_path(share: float) -> str:
    """The name of the split path at ``share`` (of the blocks, by the copy engines)."""
    return f"{SPLIT}:{share:.2f}"


def split_share(path: str) -> float | None:
    """The share of a ``split:SHARE`` path name; None for any other path."""
    base, _, share = path.partition(":")
    if base != SPLIT:
        return None
    try:
        value = float(share)
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


def base_path(path: str) -> str:
    """``split`` for any ``split:SHARE``, else the path itself (what a candidate list holds)."""
    return SPLIT if split_share(path) is not None else path


@dataclass(frozen=True)
class Choice:
    """The path a restore takes for one page size on one device, and why.

    ``source``: ``measured`` (calibrated now), ``cached`` (an earlier calibration),
    ``forced`` (the caller named the method), ``only`` (one path was possible).
    ``seconds``: the median time of one calibration restore per candidate (the large
    restores). Where small and large restores were fastest by different paths, ``path``
    serves restores of fewer than ``large_from`` blocks and ``large`` the rest."""

    path: str
    source: str
    reason: str
    seconds: Mapping[str, float] = field(default_factory=dict)
    large: str | None = None
    large_from: int | None = None

    def path_for(self, blocks: int) -> str:
        """The path a restore of ``blocks`` blocks takes."""
        if self.large is not None and self.large_from is not None and blocks >= self.large_from:
            return self.large
        return self.path

    def line(self) -> str:
        if self.large is None:
            return f"{self.path} ({self.source}): {self.reason}"
        return (
            f"{self.path} below {self.large_from} blocks, {self.large} from there "
            f"({self.source}): {self.reason}"
        )


def calibrate(
    candidates: Sequence[str],
    measure: Callable[[str], float],
    rounds: int = 5,
    what: str = "",
) -> Choice:
    """Time each of ``candidates`` ``rounds`` times (``measure(path)`` returns seconds
    of one restore), interleaved so drift on the machine hits every candidate alike, and
    choose the lowest median. A candidate within ``TIE_SHARE`` of it ties, and a tie
    goes to the earlier candidate. Raises
    ``ValueError`` when no candidate could be measured."""
    if not candidates:
        raise ValueError("no candidate path to calibrate")
    times: dict[str, list[float]] = {c: [] for c in candidates}
    failed: dict[str, str] = {}
    for r in range(max(1, rounds)):
        k = r % len(candidates)
        for c in [*candidates[k:], *candidates[:k]]:  # a different one goes first each round
            if c in failed:
                continue
            try:
                times[c].append(float(measure(c)))
            except Exception as exc:  # noqa: BLE001 - a path that fails is not chosen
                failed[c] = f"{type(exc).__name__}: {exc}"
    med = {c: statistics.median(t) for c, t in times.items() if t and c not in failed}
    if not med:
        raise ValueError("no candidate path could be measured: " + "; ".join(failed.values()))
    fastest = min(med, key=lambda c: (med[c], candidates.index(c)))
    best = next(c for c in candidates if c in med and med[c] <= med[fastest] * (1 + TIE_SHARE))
    others = sorted((c for c in med if c != best), key=med.__getitem__)
    parts = [f"{best} {med[best] * 1e6:.0f} us"]
    parts += [f"{c} {med[c] * 1e6:.0f} us ({med[c] / med[best]:.2f}x)" for c in others]
    parts += [f"{c} failed ({why})" for c, why in failed.items()]
    lead = (
        "fastest of "
        if best == fastest
        else f"within {TIE_SHARE:.0%} of the fastest, listed first: "
    )
    reason = lead + ", ".join(parts) + f"; median of {rounds} restores"
    return Choice(best, "measured", reason + (f" of {what}" if what else ""), med)


class Calibrator:
    """Chooses a path for one page size on one device: the cached choice where the
    cache holds one for a path still available, else ``calibrate`` (stored back). With
    ``cache=None`` it measures every time. ``rounds``: restores timed per candidate.
    ``timer(path, blocks)``, where given, replaces the engine's timer (tests: a fake
    clock)."""

    def __init__(
        self,
        cache: CalibrationCache | None,
        rounds: int = 5,
        warn: Callable[[str], None] | None = None,
        timer: Callable[[str, int], float] | None = None,
    ):
        self.cache = cache
        self.rounds = rounds
        self.timer = timer
        self._warn = warn if warn is not None else _stderr_line

    @classmethod
    def default(cls) -> Calibrator:
        """Cached in the user's cache directory (``cache_path``)."""
        return cls(CalibrationCache(cache_path()))

    def choose(
        self,
        key: str,
        page_bytes: int,
        candidates: Sequence[str],
        measurer: Callable[[], tuple[Callable[[str, int], float], int, int, str]],
    ) -> Choice:
        """The path for ``page_bytes`` pages on the device ``key`` names.
        ``measurer()`` is called only when a measurement is needed and returns the timer
        of one restore of some blocks by a path, the small and the large number of blocks
        to time, and a few words on what one block is."""
        if len(candidates) == 1:
            return Choice(candidates[0], "only", "the only path this device can take")
        if self.cache is not None:
            hit = self.cache.get(key, page_bytes)
            if hit is not None and {base_path(hit.path), base_path(hit.large or hit.path)} <= set(
                candidates
            ):
                return hit
        t0 = time.perf_counter()
        measure, small, large, what = measurer()
        choice = calibrate_sizes(candidates, self.timer or measure, small, large, self.rounds, what)
        took = f"; calibrated in {(time.perf_counter() - t0) * 1e3:.0f} ms"
        choice = replace(choice, reason=choice.reason + took)
        if self.cache is not None:
            try:
                self.cache.put(key, page_bytes, choice)
            except OSError as exc:
                self._warn(
                    f"kvfault: could not save the GPU calibration to {self.cache.path}: {exc}"
                )
        return choice


def calibrate_sizes(
    candidates: Sequence[str],
    measure: Callable[[str, int], float],
    small: int,
    large: int,
    rounds: int = 5,
    what: str = "",
) -> Choice:
    """``calibrate`` at restores of ``small`` and of ``large`` blocks (``measure(path,
    blocks)``). Where one path wins both, that path. Where they differ, the small one
    below the block count where the two winners' straight lines (through their two
    medians) cross, the large one from there (clamped to ``[small, large]``).

    With ``SPLIT`` among the candidates (and both ``SPLIT_PARTS``), the single paths are
    measured first; then ``split:SHARE`` at each of ``SPLIT_SHARES`` against the large
    restores' winner, and the best of those shares against the small restores' winner,
    each listed after the single path (a tie keeps the single path)."""
    singles = [c for c in candidates if c != SPLIT]
    big = calibrate(singles, lambda p: measure(p, large), rounds)
    sizes = small < large
    little = calibrate(singles, lambda p: measure(p, small), rounds) if sizes else big
    split_note = ""
    if SPLIT in candidates and all(p in big.seconds for p in SPLIT_PARTS):
        big, name = _against(big, [split_path(x) for x in SPLIT_SHARES], measure, large, rounds)
        if name is not None and sizes:
            little, _ = _against(little, [name], measure, small, rounds)
        elif sizes:
            little = replace(little, reason=f"{little.reason}; no split could be measured")
        if name is not None:
            split_note = f"; best split {name}: the copy engines take {split_share(name):.0%}"
            split_note += " of the blocks"
    elif SPLIT in candidates:
        split_note = f"; no split: {' or '.join(SPLIT_PARTS)} could not be measured"
    if not sizes:
        return Choice(big.path, "measured", f"{big.reason}{split_note} of {what}", big.seconds)
    both = f"at {large} blocks: {big.reason}; at {small}: {little.reason}{split_note}"
    if little.path == big.path:
        return Choice(big.path, "measured", f"{both} ({what})", big.seconds)
    s, g = little.path, big.path
    if s not in big.seconds or g not in little.seconds:  # no line through both sizes
        return Choice(g, "measured", f"{both}; {s} not timed at both sizes ({what})", big.seconds)
    slope_s = (big.seconds[s] - little.seconds[s]) / (large - small)
    slope_g = (big.seconds[g] - little.seconds[g]) / (large - small)
    at_s = little.seconds[s] - slope_s * small
    at_g = little.seconds[g] - slope_g * small
    if slope_s > slope_g:
        cross = (at_g - at_s) / (slope_s - slope_g)
    else:  # the lines do not cross between: the geometric middle
        cross = (small * large) ** 0.5
    cross = int(min(max(cross, small + 1), large))
    return Choice(s, "measured", f"{both} ({what})", big.seconds, large=g, large_from=cross)


def _against(
    winner: Choice,
    splits: Sequence[str],
    measure: Callable[[str, int], float],
    blocks: int,
    rounds: int,
) -> tuple[Choice, str | None]:
    """``winner`` (of the single paths) against each of ``splits`` at restores of
    ``blocks`` blocks, interleaved, the winner timed again alongside; the fastest split
    is taken only where it beats the winner by more than ``SPLIT_MARGIN``. The seconds
    of every path measured at that size, merged. Returns the choice and the fastest
    split measured (None: none could be)."""
    duel = calibrate([winner.path, *splits], lambda p: measure(p, blocks), rounds)
    seconds = {**winner.seconds, **duel.seconds}
    measured = [p for p in splits if p in duel.seconds]
    best = min(measured, key=lambda p: (duel.seconds[p], splits.index(p)), default=None)
    single = duel.seconds.get(winner.path)
    if best is not None and (single is None or single > duel.seconds[best] * (1 + SPLIT_MARGIN)):
        verdict = f"{best} taken: more than {SPLIT_MARGIN:.0%} faster than {winner.path}"
        return Choice(best, "measured", f"{verdict}; {duel.reason}; before it {winner.reason}",
                      seconds), best  # fmt: skip
    verdict = f"{winner.path} kept: no split more than {SPLIT_MARGIN:.0%} faster"
    return Choice(winner.path, "measured", f"{winner.reason}; then {duel.reason}; {verdict}",
                  seconds), best  # fmt: skip


def cache_path(env: Mapping[str, str] | None = None) -> Path:
    """``$KVFAULT_CACHE_DIR``, else ``$XDG_CACHE_HOME/kvfault``, else
    ``~/.cache/kvfault``; the file ``gpu_calibration.json`` in it."""
    env = os.environ if env is None else env
    if env.get("KVFAULT_CACHE_DIR"):
        return Path(env["KVFAULT_CACHE_DIR"]) / CACHE_FILE
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "kvfault" / CACHE_FILE


def device_key(name: str, pci_bus: str, driver: str, torch: str, triton: str) -> str:
    """What a calibration is valid for: a choice measured on another device, host
    placement, driver or software is not reused."""
    return f"{name} @ {pci_bus} | driver {driver} | torch {torch} | triton {triton}"


class CalibrationCache:
    """Calibration choices in one JSON file: ``{"format", "version", "entries": {device
    key: {page bytes: {"path", "reason", "seconds", "at"}}}}``. ``warn`` takes the one
    line said about a file that is ignored (default: stderr)."""

    def __init__(self, path: Path, warn: Callable[[str], None] | None = None):
        self.path = Path(path)
        self._warn = warn if warn is not None else _stderr_line
        self._warned = False

    def get(self, key: str, page_bytes: int) -> Choice | None:
        entry = self._load().get(key, {}).get(str(page_bytes))
        if entry is None:
            return None
        return Choice(
            entry["path"],
            "cached",
            entry["reason"],
            dict(entry["seconds"]),
            entry.get("large"),
            entry.get("large_from"),
        )

    def put(self, key: str, page_bytes: int, choice: Choice) -> None:
        """Record ``choice``; merges with what the file holds now (under the lock)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            entries = self._load()
            entries.setdefault(key, {})[str(page_bytes)] = {
                "path": choice.path,
                "reason": choice.reason,
                "seconds": dict(choice.seconds),
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            if choice.large is not None:
                entries[key][str(page_bytes)]["large"] = choice.large
                entries[key][str(page_bytes)]["large_from"] = choice.large_from
            doc = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "entries": entries}
            fd, tmp = tempfile.mkstemp(prefix=".gpu_calibration.", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(doc, f, indent=1, sort_keys=True)
                    f.write("\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def _load(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The valid entries of the file; {} (and one line) when it cannot be used."""
        try:
            text = self.path.read_text()
        except (FileNotFoundError, NotADirectoryError):  # none yet
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            return self._ignore(f"cannot be read ({exc})")
        try:
            doc = json.loads(text)
        except ValueError as exc:
            return self._ignore(f"is not JSON ({exc})")
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
            return self._ignore(f"is not a {CACHE_FORMAT} file")
        if doc.get("version") != CACHE_VERSION:
            return self._ignore(f"is version {doc.get('version')!r}, not {CACHE_VERSION}")
        entries = doc.get("entries")
        if not isinstance(entries, dict):
            return self._ignore("has no entries table")
        good: dict[str, dict[str, dict[str, Any]]] = {}
        bad = 0
        for key, sizes in entries.items():
            if not isinstance(sizes, dict):
                bad += 1
                continue
            for size, entry in sizes.items():
                if _valid_entry(size, entry):
                    good.setdefault(key, {})[size] = entry
                else:
                    bad += 1
        if bad:
            self._ignore(f"holds {bad} malformed entr{'y' if bad == 1 else 'ies'} (ignored)")
        return good

    def _ignore(self, why: str) -> dict[str, dict[str, dict[str, Any]]]:
        if not self._warned:
            self._warned = True
            self._warn(
                f"kvfault: ignoring GPU calibration cache {self.path}: {why}; measuring again"
            )
        return {}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            import fcntl
        except ImportError:  # no advisory locks here: the atomic replace still holds
            yield
            return
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            deadline = time.monotonic() + LOCK_WAIT_S
            held = False
            while True:
                try:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = True
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.01)
            try:
                yield
            finally:
                if held:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _valid_entry(size: Any, entry: Any) -> bool:
    if not (isinstance(size, str) and size.isdigit() and isinstance(entry, dict)):
        return False
    seconds = entry.get("seconds")
    large, large_from = entry.get("large"), entry.get("large_from")
    split_ok = (large is None and large_from is None) or (
        isinstance(large, str) and isinstance(large_from, int) and large_from > 0
    )
    return (
        split_ok
        and isinstance(entry.get("path"), str)
        and isinstance(entry.get("reason"), str)
        and isinstance(seconds, dict)
        and all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in seconds.items())
    )


def _stderr_line(line: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(line, file=sys.stderr, flush=True)
