"""The ``atom`` tier's executor: each run is one of the tier's stories told on a fresh
simulated host against the ATOM checkout, with the fault its row carries, and comes
back as a ``kvfault.faults.runs.RunResult`` the campaign judges like any other (the case
runner, properties and verdicts are the campaign's own, ``kvfault.faults.campaign``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from kvfault.faults.atom.catalog import SCENARIOS, AtomRow, ServerFault
from kvfault.faults.atom.command import pp_of, schedules_of, tp_of
from kvfault.faults.atom.host import AtomHost, ServerDied, ServerHung, ServerRefused, ZygotePool
from kvfault.faults.atom.runs import result_of
from kvfault.faults.atom.scenarios import AtomRun
from kvfault.faults.atom.source import AtomSource
from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.runs import REFUSE, RunContext, RunResult
from kvfault.faults.tiers import Executor
from kvfault.reference.types import Geometry

GEOMETRY = Geometry(block_size=16, chunk_size=64, prefill_budget=512)
# A hybrid (DeepSeek-V4) server's: ATOM's DSV4 block is 256 tokens, its chunk one block.
HYBRID_GEOMETRY = Geometry(block_size=256, chunk_size=256, prefill_budget=512)


class AtomExecutor(Executor):
    """Runs the tier's stories on ``pool``'s warm processes. Not deterministic: real
    processes in real time. ``judged_by``: the properties every run is judged by,
    when ``--property`` narrows them (None: each story's own).

    A run's seed picks its prompts and is every server process's ``PYTHONHASHSEED``
    (unless its fault sets its own), so N seeds sweep N hash seeds as well as N
    workloads. Every process, socket and directory a run starts is gone when
    ``execute`` returns, however the run ended."""

    tier = "atom"
    deterministic = False

    def __init__(
        self,
        pool: ZygotePool,
        judged_by: Sequence[str] | None = None,
        fixes: Sequence[str] = (),
        record_path: str | None = None,
        schedules: int | None = None,
        tp_size: int = 1,
        pp_size: int = 1,
    ):
        self.pool = pool
        self.tp_size = tp_size  # every server's TP size where its story sets none
        self.pp_size = pp_size  # and its pipeline stages
        self.schedules = schedules  # every row's schedules (None: each row's own)
        self.judged_by = tuple(judged_by) if judged_by else None
        self.fixes = tuple(fixes)
        self.record_path = record_path  # a directory: each run's ATOM lines, one file

    def execute(self, scenario: str, ctx: RunContext) -> tuple[RunResult, dict[str, object]]:
        """One case: the story on ``schedules`` thread schedules (its row's), each on a
        fresh host; the first whose run violates a property it is judged by is the
        case's run, else the last. Its note ``schedule`` says which (``k/n``)."""
        faults = [i for i in ctx.injectors if isinstance(i, ServerFault)]
        row = faults[0].row if faults else None
        n = self.schedules or (row.schedules if row is not None else SCENARIOS[scenario].schedules)
        props = self.judged_by or (
            row.properties if row is not None else SCENARIOS[scenario].properties
        )
        for k in range(n):
            result, notes = self._tell(scenario, ctx, faults, row, k)
            result.notes["schedule"] = f"{k + 1}/{n}"
            if n > 1 and (k == n - 1 or _violated(result, props)):
                break
        return result, notes

    def _tell(
        self,
        scenario: str,
        ctx: RunContext,
        faults: list[ServerFault],
        row: AtomRow | None,
        schedule: int,
    ) -> tuple[RunResult, dict[str, object]]:
        host = AtomHost(self.pool, default_seed=ctx.seed)
        run = AtomRun(
            host,
            ctx.seed,
            faults=row.faults if row is not None else FaultSpec(),
            faulted=row.faulted if row is not None else (),
            spec_changes=dict(row.spec_changes) if row is not None else {},
            injector=row.name if row is not None and row.spec_changes else None,
            fixes=self.fixes,
            record_path=bool(self.record_path),
            schedule=schedule,
            tp_size=self.tp_size,
            pp_size=self.pp_size,
        )
        expect = row.expect if row is not None else SCENARIOS[scenario].expect
        refused = None
        hang: dict[str, object] = {}
        try:
            SCENARIOS[scenario].story(run)
        except ServerHung as exc:
            # A call into ATOM's worker that never returned: the run ends there, a hang
            # of the code under test (liveness), with where it hung.
            run.hung = True
            hang = {"hung_in": str(exc), "hung_stack": exc.evidence["stack"]}
        except ServerDied as exc:
            # ATOM's model runner raised in a forward: ATOM shuts the server down, and
            # the story ends there; the row's declared ending judges the stop.
            host.note_death(exc)
        except ServerRefused as exc:
            # A row that expects a refusal (a server must refuse an incomplete setup)
            # judges it as an ending. Any other row's server that does not start (an
            # ATOM the tier cannot drive) proves nothing: an error, never a FAIL, so
            # ``kvfault prove`` cannot call a commit that fails to start FIXED.
            if not expect.allows(REFUSE):
                raise
            refused = str(exc)
            host.note_refusal(exc)
        finally:
            host.close()  # every process and socket of the run, however it ended
        names = tuple(dict.fromkeys(n for f in faults for n in (f.name, *f.row.fires)))
        hybrid = any(server.spec.layout == "hybrid" for server in host.servers)
        result = result_of(
            scenario, ctx.seed, host.events, host.t0, run.requests,
            HYBRID_GEOMETRY if hybrid else GEOMETRY, run.hung, refused, names,
            model_kind="hybrid" if hybrid else "dense",
        )  # fmt: skip
        result.notes.update(hang)
        count_firings(result, faults)
        if self.record_path:
            name = row.name if row is not None else scenario
            tail = f"-schedule{schedule}" if schedule else ""
            executed = sorted((*key, k) for key, k in host.executed.items())
            write_path(self.record_path, f"{name}-seed{ctx.seed}{tail}", executed)
        return result, {"tier": "atom", **hang}

    def case_done(self) -> None:
        pass


def _violated(run: RunResult, properties: Sequence[str]) -> bool:
    """Whether ``run`` breaks any of ``properties`` (the campaign judges it again: this
    only picks which schedule's run is the case's), or hung."""
    from kvfault.faults.properties import PROPERTIES

    if run.outcomes and run.outcomes[0].hung:
        return True
    return any(PROPERTIES[p](run) for p in properties if p in PROPERTIES)


def write_path(directory: str, run: str, executed: list[tuple[str, str, int, int]]) -> None:
    """``directory/run.json``: the ATOM lines a run executed, ``[file, function, line,
    times]`` each (``kvfault.faults.atom.fix_proof`` reads it)."""
    import json
    import os

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{run}.json"), "w") as f:
        json.dump([list(x) for x in executed], f)


def count_firings(result: RunResult, faults: Sequence[ServerFault]) -> None:
    """Each fault's ``fired``: how often the run's processes recorded it firing (under
    its row's name, or the injector names its row ``fires``)."""
    counted = {i.name: i.fired for i in result.injectors}
    for f in faults:
        f.fired = sum(counted.get(n, 0) for n in dict.fromkeys((f.name, *f.row.fires)))


@contextlib.contextmanager
def atom_executor(
    atom_src: str | None = None,
    property: Sequence[str] | None = None,
    atom_fix: Sequence[str] | None = None,
    atom_record_path: str | None = None,
    atom_schedules: str | None = None,
    atom_tp: str | None = None,
    atom_pp: str | None = None,
) -> Iterator[AtomExecutor]:
    """The tier's opener: an ``AtomExecutor`` on the checkout at ``atom_src`` (default:
    ``$KVFAULT_ATOM_SRC``; ``AtomSourceMissing`` in one line without one), judged by
    ``property`` only when given, every server running the candidate fixes named in
    ``atom_fix`` (``kvfault.faults.atom.fixes``); with ``atom_record_path``, each run's
    executed ATOM lines are written there (``write_path``); with ``atom_schedules``,
    every row tells its story on that many thread schedules per case; with ``atom_tp``,
    every server whose story sets no TP size runs that many worker ranks; with ``atom_pp``,
    every server whose story sets no pipeline size runs that many stages. One warm interpreter is started on entry, so an ATOM
    that does not import is one line (``ZygoteError``) before any case; every warm
    process is stopped on exit."""
    source = AtomSource.find(atom_src)
    pool = ZygotePool(str(source.path))
    try:
        pool.get(0)
        yield AtomExecutor(
            pool, property, tuple(atom_fix or ()), atom_record_path,
            schedules_of(atom_schedules) or None, tp_of(atom_tp) or 1, pp_of(atom_pp) or 1,
        )  # fmt: skip
    finally:
        pool.close()
