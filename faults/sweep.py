"""PYTHONHASHSEED sweep: run the same pytest selection once per hash seed.

Set and dict-of-set iteration order over string request ids depends on the process's
hash seed, so a bug like "restart numbering in hash order" passes under some seeds and
fails under others. A sweep runs ``python -m pytest ARGS`` in a fresh subprocess per
seed with ``PYTHONHASHSEED=s`` and reports each seed's outcome; it fails when any seed
fails.

Distribution is pytest-xdist's, never a pool of our own: ``-n auto`` among ARGS
spreads each seed's tests over workers (they inherit the seed); ``jobs`` (or execnet
gateway specs ``tx``, for other hosts) spreads the *seeds* over xdist workers through
``kvfault.faults.fanout`` (one work item per seed).

The cost of one extra seed is one short subprocess: keep imports lazy (nothing here or
in ``kvfault.faults.cli`` imports torch, zmq or faker).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from kvfault.faults.errors import KvfaultError

if TYPE_CHECKING:
    from kvfault.faults.fanout import ItemResult

CHILD_ENV = "KVFAULT_SWEEP_CHILD"  # set in every child, so a child never sweeps again
MAX_SEED = 4294967295  # PYTHONHASHSEED's range
MAX_SWEEP_SEEDS = 1000  # one pytest process each: more would run for days

_SUMMARY = re.compile(
    r"(?:\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)"
    r"|no tests ran)[^\n]*? in [\d.]+s"
)
_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)", re.MULTILINE)


class SweepError(KvfaultError, ValueError):
    """Bad sweep arguments: one clear line."""


def parse_seeds(text: str) -> list[int]:
    """``"0-15"``, ``"7"`` or ``"0-3,8,10-11"`` → the seeds, in order, without repeats."""
    seeds: list[int] = []
    if not text or not text.strip():
        raise SweepError("hash seed range is empty; write e.g. 0-15 or 0-3,8")
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise SweepError(f"bad hash seed range {part!r}; write e.g. 0-15 or 0-3,8")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise SweepError(f"bad hash seed range {part!r}: {hi} < {lo}")
        if hi > MAX_SEED:
            raise SweepError(f"PYTHONHASHSEED must be at most {MAX_SEED}, got {hi}")
        if hi - lo + 1 + len(seeds) > MAX_SWEEP_SEEDS:
            raise SweepError(
                f"{text} is more than {MAX_SWEEP_SEEDS} seeds; each runs the "
                "selected tests once, so that would take days"
            )
        taken = set(seeds)
        seeds += [s for s in range(lo, hi + 1) if s not in taken]
    return seeds


@dataclass
class SeedOutcome:
    """One hash seed's pytest run."""

    seed: int
    exit_code: int
    summary: str
    failed: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    tail: str = ""

    @property
    def status(self) -> str:
        return {0: "passed", 1: "FAILED", 5: "NO TESTS"}.get(
            self.exit_code, f"ERROR (exit {self.exit_code})"
        )


@dataclass
class SweepResult:
    seeds: list[SeedOutcome]
    pytest_args: list[str]
    wall_seconds: float = 0.0

    @property
    def failing(self) -> list[int]:
        return [s.seed for s in self.seeds if s.exit_code != 0]

    @property
    def exit_code(self) -> int:
        """0 every seed passed; 1 some seed had failing tests; 2 some seed could not
        run its tests (usage error, nothing collected, interrupted)."""
        codes = {s.exit_code for s in self.seeds}
        if codes <= {0}:
            return 0
        return 1 if 1 in codes else 2


def child_command(pytest_args: Sequence[str], python: str = sys.executable) -> list[str]:
    return [python, "-m", "pytest", *pytest_args]


def child_env(seed: int, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONHASHSEED"] = str(seed)
    env[CHILD_ENV] = "1"
    return env


def _die_with_parent() -> None:  # in the child, between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except OSError:
        pass


def run_seed(
    seed: int,
    pytest_args: Sequence[str],
    cwd: Path | str | None = None,
    python: str = sys.executable,
    timeout_s: float | None = None,
    own_group: bool = True,
) -> SeedOutcome:
    """Run pytest once under ``PYTHONHASHSEED=seed`` in a subprocess. With
    ``own_group`` it leads its own process group, which a timeout or Ctrl-C stops
    whole; an xdist worker passes False, so the sweep's group holds the child too."""
    from kvfault.faults.processes import communicate_or_stop  # stdlib only: cheap

    t0 = time.perf_counter()
    try:
        # Its own process group: a timeout or Ctrl-C stops pytest and whatever it
        # started (xdist workers under -n), not only the pytest process.
        proc = subprocess.Popen(
            child_command(pytest_args, python),
            cwd=cwd,
            env=child_env(seed),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=own_group,
            # On a worker, the seed's pytest dies with the worker that started it.
            preexec_fn=None if own_group else _die_with_parent,
        )
        if own_group:
            out, _ = communicate_or_stop(proc, timeout_s or None)
        else:
            try:
                out, _ = proc.communicate(timeout=timeout_s or None)
            except BaseException:
                proc.kill()
                raise
        code = proc.returncode
    except subprocess.TimeoutExpired:
        if not own_group:
            proc.kill()
        out = proc.communicate()[0] or ""  # what it wrote before it was stopped
        code, out = 124, out + f"\nkvfault sweep: seed {seed} timed out after {timeout_s:g}s"
    wall = time.perf_counter() - t0
    summaries = _SUMMARY.findall(out)
    summary = summaries[-1] if summaries else (out.strip().splitlines() or [""])[-1][:120]
    failed = [m.group(2) for m in _FAILED.finditer(out)]
    tail = "\n".join(out.rstrip().splitlines()[-30:])
    return SeedOutcome(seed, code, summary, failed, wall, tail)


def sweep(
    seeds: Sequence[int],
    pytest_args: Sequence[str],
    cwd: Path | str | None = None,
    python: str = sys.executable,
    jobs: str | None = None,
    timeout_s: float | None = None,
    on_seed: Callable[[SeedOutcome], None] | None = None,
    tx: Sequence[str] = (),
    rsyncdirs: Sequence[str] = (),
) -> SweepResult:
    """Run ``pytest_args`` once per seed. With ``jobs`` (a number or ``auto``; ``"0"``
    is none), the seeds are spread over that many pytest-xdist workers; with ``tx``
    (execnet gateway specs, e.g. ``ssh=host//python=python3``; ``rsyncdirs`` are sent
    there first), over those gateways; otherwise they run one after the other in
    subprocesses of this process. ``cwd`` defaults to each worker's own directory."""
    if not seeds:
        raise SweepError("no hash seeds to sweep")
    t0 = time.perf_counter()
    if tx or (jobs and jobs != "0"):
        outcomes = _sweep_on_xdist(
            seeds, pytest_args, cwd, python, jobs, tx, rsyncdirs, timeout_s, on_seed
        )
    else:
        outcomes = []
        for seed in seeds:
            o = run_seed(seed, pytest_args, cwd, python, timeout_s)
            outcomes.append(o)
            if on_seed:
                on_seed(o)
    return SweepResult(outcomes, list(pytest_args), time.perf_counter() - t0)


def _sweep_on_xdist(
    seeds: Sequence[int],
    pytest_args: Sequence[str],
    cwd: Path | str | None,
    python: str,
    jobs: str | None,
    tx: Sequence[str],
    rsyncdirs: Sequence[str],
    timeout_s: float | None,
    on_seed: Callable[[SeedOutcome], None] | None,
) -> list[SeedOutcome]:
    from kvfault.faults.fanout import WorkItem, fan_out

    # Paths and interpreters of this host mean nothing on another one: unless the
    # caller named them, each seed runs in its worker's directory (the rsync'd copy on
    # a remote gateway) under its worker's Python.
    payload = {
        "args": list(pytest_args),
        "cwd": str(Path(cwd).resolve()) if cwd is not None else None,
        "python": python if python != sys.executable else None,
        "timeout_s": timeout_s,
    }
    items = [WorkItem(f"PYTHONHASHSEED={s}", {**payload, "seed": s}) for s in seeds]
    by_id: dict[str, SeedOutcome] = {}

    def outcome(r: ItemResult) -> SeedOutcome:
        if r.value is not None:
            return SeedOutcome(**r.value)
        seed = int(r.id.partition("=")[2])
        return SeedOutcome(
            seed, 3, "the xdist item for this seed never ran", [], 0.0, r.error or ""
        )

    def arrived(r: ItemResult) -> None:
        by_id[r.id] = outcome(r)
        if on_seed:
            on_seed(by_id[r.id])

    results, _ = fan_out(
        f"{__name__}:seed_task",
        items,
        workers=jobs if not tx else None,
        tx=tx,
        rsyncdirs=rsyncdirs,
        on_result=arrived,
    )
    return [by_id.get(r.id) or outcome(r) for r in results]


def seed_task(payload: dict[str, Any]) -> dict[str, Any]:
    """One seed's run on a fan-out worker (``kvfault.faults.fanout``): its ``SeedOutcome`` as
    JSON."""
    outcome = run_seed(
        payload["seed"],
        payload["args"],
        payload["cwd"],
        payload["python"] or sys.executable,
        payload["timeout_s"],
        own_group=False,  # a descendant of the sweep: its Ctrl-C stops it too
    )
    return asdict(outcome)


def format_result(result: SweepResult, tail: bool = True, per_seed: bool = True) -> str:
    """Per-seed lines (unless already printed as they came), the first failing seed's
    output tail, a summary and a replay line."""
    lines = [format_seed(s) for s in result.seeds] if per_seed else []
    bad = [s for s in result.seeds if s.exit_code != 0]
    if tail:
        for s in bad[:1]:  # one tail is enough to see why; the rest say the same
            lines.append(f"--- PYTHONHASHSEED={s.seed} (last lines) ---")
            lines.append(s.tail)
    n = len(result.seeds)
    each = result.wall_seconds / n if n else 0.0
    lines.append(
        f"{n} hash seeds: {n - len(bad)} passed, {len(bad)} failed"
        + (f" (seeds {_ranges([s.seed for s in bad])})" if bad else "")
        + f"; {result.wall_seconds:.2f}s wall, {each:.2f}s per seed"
    )
    if bad:
        cmd = shlex.join(child_command(result.pytest_args, "python"))
        lines.append(f"replay: PYTHONHASHSEED={bad[0].seed} {cmd}")
    return "\n".join(lines)


def format_seed(s: SeedOutcome) -> str:
    where = (
        f"  ({', '.join(s.failed[:3])}{' ...' if len(s.failed) > 3 else ''})" if s.failed else ""
    )
    return f"  PYTHONHASHSEED={s.seed:<4d} {s.status:8s} {s.summary}{where}"


def _ranges(seeds: Sequence[int]) -> str:
    runs: list[list[int]] = []  # [first, last] of each run of consecutive seeds
    for s in sorted(seeds):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ",".join(f"{first}-{last}" if first != last else str(first) for first, last in runs)
