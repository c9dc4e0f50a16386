"""The ``atom`` tier's campaign: every row of ``faults.atom.catalog`` over the seeds,
each run on a fresh simulated host against the ATOM checkout, judged by kvfault's own
properties (``faults.properties.checks.PROPERTIES``) and the row's expected ending.

A row's seed is PASS when every property holds, the run ended as the row declares and
(for a fault) the fault fired; FAIL when a property or the ending says otherwise (the
detail names the first violation); NOT EXERCISED when a fault never fired; ERROR when
the run itself broke (a server that would not start when the row expects it to, say).

This module is the tier's whole campaign loop, which its ``Tier`` declaration
(``faults.atom.tier``) hands ``kvfault run --tier atom`` to.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from faults.atom.catalog import AtomRow
from faults.atom.host import AtomHost, ServerRefused, ZygotePool
from faults.atom.runs import result_of
from faults.atom.scenarios import AtomRun
from faults.atom.source import AtomSource
from faults.properties.checks import PROPERTIES
from faults.properties.violation import Violation
from faults.runs import RunResult
from faults.verdicts import Verdict, exit_code, worst
from reference.types import Geometry

GEOMETRY = Geometry(block_size=16, chunk_size=64, prefill_budget=512)


@dataclass
class SeedOutcome:
    seed: int
    verdict: Verdict
    detail: str
    violations: list[Violation] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    run: RunResult | None = None


@dataclass
class RowOutcome:
    row: AtomRow
    seeds: list[SeedOutcome]

    @property
    def verdict(self) -> Verdict:
        return worst(s.verdict for s in self.seeds) or Verdict.PASS

    @property
    def detail(self) -> str:
        bad = [s for s in self.seeds if s.verdict is not Verdict.PASS]
        return (bad or self.seeds)[0].detail if self.seeds else ""


def judge(row: AtomRow, run: RunResult) -> tuple[Verdict, str, list[Violation]]:
    """The row's verdict for one run, a one-line detail, and the violations."""
    violations: list[Violation] = []
    for prop in row.properties:
        violations.extend(PROPERTIES[prop](run))
    unmet = row.expect.unmet(run.ending)
    fired = {i.name: i.fired for i in run.injectors}
    if violations:
        v = violations[0]
        more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
        return Verdict.FAIL, f"{v}{more}", violations
    if unmet:
        return Verdict.FAIL, unmet, violations
    silent = [n for n in row.fires if not fired.get(n)]
    if silent:
        return Verdict.NOT_EXERCISED, f"never fired: {', '.join(silent)}", violations
    if row.fires:
        return Verdict.PASS, "fired " + ", ".join(f"{n} x{fired[n]}" for n in row.fires), violations
    return Verdict.PASS, "every property held", violations


class AtomCampaign:
    """Runs rows against one ATOM checkout; one warm process pool for the campaign."""

    def __init__(self, source: AtomSource, pool: ZygotePool):
        self.source, self.pool = source, pool

    def run_row(self, row: AtomRow, seed: int) -> SeedOutcome:
        t0 = time.perf_counter()
        # The seed is also every server process's PYTHONHASHSEED (unless the row sets
        # its own): --seeds N sweeps N hash seeds as well as N workloads.
        host = AtomHost(self.pool, default_seed=seed)
        run = AtomRun(
            host,
            seed,
            faults=row.faults,
            faulted=row.faulted,
            spec_changes=dict(row.spec_changes),
            injector=row.name if row.spec_changes else None,
        )
        try:
            row.story(run)
        except ServerRefused as e:
            # This ATOM cannot be run by the tier (an API it lacks, an import that
            # fails): the run proves nothing about the row, so ERROR, not FAIL.
            return SeedOutcome(
                seed,
                Verdict.ERROR,
                f"server refused to start: {e}",
                wall_s=time.perf_counter() - t0,
            )
        except Exception as e:  # noqa: BLE001  the run broke: ERROR, with where
            line = f"{type(e).__name__}: {e}".splitlines()[0]
            where = traceback.extract_tb(e.__traceback__)[-1]
            return SeedOutcome(
                seed,
                Verdict.ERROR,
                f"{line} ({where.filename}:{where.lineno})",
                wall_s=time.perf_counter() - t0,
            )
        finally:
            host.close()  # every process and socket of the run, however it ended
        result = result_of(
            row.scenario,
            seed,
            host.events,
            host.t0,
            run.requests,
            GEOMETRY,
            run.hung,
            None,
            row.fires,
        )
        verdict, detail, violations = judge(row, result)
        return SeedOutcome(
            seed,
            verdict,
            detail,
            violations,
            {i.name: i.fired for i in result.injectors},
            time.perf_counter() - t0,
            result,
        )

    def run(
        self,
        rows: list[AtomRow],
        seeds: list[int],
        progress: Callable[[RowOutcome], None] | None = None,
    ) -> list[RowOutcome]:
        out = []
        for row in rows:
            outcome = RowOutcome(row, [self.run_row(row, s) for s in seeds])
            out.append(outcome)
            if progress is not None:
                progress(outcome)
        return out


@contextlib.contextmanager
def atom_campaign(source: AtomSource, hash_seed: int = 0) -> Iterator[AtomCampaign]:
    """A campaign on ``source``; its warm processes are stopped on exit."""
    pool = ZygotePool(str(source.path))
    try:
        pool.get(hash_seed)  # one line of failure here if ATOM does not import
        yield AtomCampaign(source, pool)
    finally:
        pool.close()


_LETTERS = {
    "correctness": "C",
    "keys": "K",
    "identity": "I",
    "efficiency": "E",
    "exactly_once": "X",
    "resources": "R",
    "liveness": "L",
    "no_false_stop": "F",
}


def table(outcomes: list[RowOutcome], seeds: list[int]) -> str:
    """The campaign table, in the shape of ``kvfault run``'s."""
    seed_txt = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    head = ("kind", "name", "seeds", "props", "verdict", "wall s", "detail")
    lines = []
    for o in outcomes:
        props = "".join(_LETTERS[p] for p in o.row.properties)
        wall = sum(s.wall_s for s in o.seeds)
        lines.append(
            (o.row.kind, o.row.name, seed_txt, props, str(o.verdict), f"{wall:.1f}", o.detail)
        )
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head) - 1)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    rule = "  ".join("-" * w for w in widths) + "  " + "-" * 6
    legend = "props: " + ", ".join(f"{v}={k}" for k, v in _LETTERS.items())
    return "\n".join([fmt.format(*head), rule, *(fmt.format(*r) for r in lines), legend])


def campaign_exit(outcomes: list[RowOutcome]) -> int:
    return exit_code(str(o.verdict) for o in outcomes)
