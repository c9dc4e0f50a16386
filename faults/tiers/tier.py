"""What a tier is, as plain declarations: ``Tier`` says what a tier package offers the
campaign, by name and by lazily imported ``"module:attribute"`` references, so reading
a declaration imports nothing of the tier's harness or client library."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kvfault.faults.errors import KvfaultError

if TYPE_CHECKING:
    import argparse

    from kvfault.faults.injectors.plans import FaultPlan
    from kvfault.faults.runs import Expect, Injector
    from kvfault.faults.tiers.executor import Executor

# What a tier's row can be (``Row.kind``): the campaign's target kinds less ``swarm``,
# which only a tier with fault plans draws (``faults.campaign.kinds.KINDS``).
ROW_KINDS = ("scenario", "fault", "regression")


class TierError(KvfaultError, ValueError):
    """A tier plugin that cannot be used (broken, duplicate, unknown, none at all): one
    line that names it."""


class TierUnavailable(KvfaultError, RuntimeError):
    """A tier that cannot open on this machine (its library is not installed, its
    source is missing): one line that says what to install or give."""


@dataclass(frozen=True)
class Row:
    """One name a tier runs: a scenario, fault or regression, and the scenario it runs
    on there. ``full``: the row is in the tier's long matrix only, which a run of every
    row takes with ``kvfault run --full``; named, it runs whatever ``--full`` says."""

    kind: str
    name: str
    description: str
    scenario: str
    full: bool = False


@dataclass(frozen=True)
class TierOption:
    """An option of ``kvfault run`` that one tier declares and takes (``--NAME-src``):
    the command line adds it from the registry, refuses it in one line on any other
    tier (``elsewhere``; default: ``FLAG is for --tier NAME``), and hands its value to
    the tier's opener as the keyword ``dest``. ``repeat``: it may be given more than
    once (its value is then a list)."""

    flag: str
    help: str
    metavar: str = "VALUE"
    repeat: bool = False
    elsewhere: str = ""
    # The environment variable that stands in for the option when it is not given
    # (``KVFAULT_ATOM_SRC``): ``kvfault prove``/``review`` point it at each side's
    # worktree, whatever the caller exported.
    env: str = ""
    # The value is a path: a target records it absolute, so its replay line works from
    # any directory (``--NAME-src .`` is recorded as the checkout's absolute path).
    path: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Selection:
    """What a campaign asks a tier to run, as its ``refuses`` check reads it: the names
    chosen, by kind (empty: none named), and the tier's own options by
    ``TierOption.dest`` (``--property`` is ``options["property"]``)."""

    scenarios: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    regressions: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


class FaultPlans(Protocol):
    """What a tier whose faults are in-process fault plans provides
    (``Tier.fault_plans``): the plan of one of its faults, the ending the fixed stack
    must reach under it, the faults it plans and a swarm's draw of them. Such a tier
    runs ``--swarm``, ``--pin`` and ``--legacy``."""

    def plan(self, fault: str, seed: int, scale: int) -> FaultPlan:
        """The plan that runs ``fault`` with its default parameters."""
        ...

    def expect(self, fault: str) -> Expect | None:
        """How the fixed stack must end under ``fault`` (None: its entry declares none)."""
        ...

    def faults(self) -> Sequence[str]:
        """Every fault it plans: what ``--pin`` may name and a swarm draws from."""
        ...

    def swarm(self, seed: int, scenario: str, pinned: Sequence[str]) -> FaultPlan:
        """A swarm run's plan on ``scenario``: a subset of its faults drawn from
        ``seed`` and the scenario (``pinned``, when given, is the subset)."""
        ...


class TierScenario(Protocol):
    """A scenario as the campaign reads it from a tier's catalog (``Tier.scenarios``,
    or the shared ``kvfault.faults.scenarios.SCENARIOS``): the properties that judge
    it, how the fixed stack must end it (None: its entry declares none, an ERROR), and
    what grows with ``--scale`` (empty: a fixed size)."""

    @property
    def properties(self) -> tuple[str, ...]: ...

    @property
    def expect(self) -> Expect | None: ...

    @property
    def scales(self) -> str: ...


class TierFault(Protocol):
    """A fault of a tier whose faults are not in-process plans (no ``fault_plans``):
    built from a seed, and how the fixed stack must end under it."""

    name: str
    description: str
    scenario: str
    expect: Expect
    kills_server: bool  # it restarts what the tier opened: the campaign runs it last

    def factory(self, seed: int) -> Injector: ...


@dataclass(frozen=True)
class Tier:
    """One tier the campaign can run on, as its package declares it.

    ``opener``: ``"module:function"`` of a context manager that yields the tier's
    executor (``kvfault.faults.campaign.execute.Executor``) with whatever it needs started,
    and stops it on exit; it raises ``TierUnavailable`` in one line when it cannot.
    ``executor``: instead of an opener, ``"module:class"`` of an executor that needs
    nothing started (an in-process tier): made fresh for each opening, and for a run
    given no executor when this is the default tier (``new_executor``).
    ``catalog``: ``"module:function"`` returning the ``Row``s it runs (its scenarios,
    faults and regressions, each with the scenario it runs on there). ``faults``:
    ``"module:attribute"`` of its fault catalog, a mapping of name to ``TierFault``
    (empty when its faults are in-process plans, ``fault_plans``). ``scenarios``:
    ``"module:attribute"`` of the tier's own scenario catalog, a mapping of name to an
    entry with ``properties``, ``expect`` and ``scales`` (default: the shared
    ``kvfault.faults.scenarios.SCENARIOS``). ``options``: the ``TierOption``s it takes, handed
    to its opener. ``refuses``: ``"module:function"`` that reads a ``Selection`` (what
    ``kvfault run`` or a replayed target asks for) and returns one line for what this
    tier cannot run (None: it can).
    ``listing``: ``"module:function"`` taking the parsed arguments that ``kvfault list
    --tier NAME`` hands over to (the tier's own list). ``rank`` orders tiers in lists
    and ``--tier`` choices; the first in that order is the default tier, the one a run
    uses when none is named (``kvfault.faults.tiers.Tiers.default``).

    ``fault_plans``: ``"module:attribute"`` of its ``FaultPlans``, when its faults are
    in-process fault plans (``--swarm``, ``--pin`` and ``--legacy`` run here).

    Capabilities: ``parallel`` (its cases may run in many
    processes: ``-j``, ``-n``, ``--tx``), ``scales`` (``--scale``). ``seeds``: its
    default seeds per target (None: the campaign's).

    ``source``: where the code under test comes from, for ``kvfault review`` and for the
    commit a replay artifact records (``kvfault.faults.provenance``): ``"kvfault"`` (kvfault's
    own reference stack: each side of a review runs its own checkout's kvfault), the
    flag of one of ``options`` that names a checkout (``"--NAME-src"``), or ``""``
    (installed packages: nothing to check out). ``engine``: how reports name that code
    (the engine's name; ``""``: kvfault's fixed stack). ``own_hash_seeds``: every process that
    runs the code under test takes its ``PYTHONHASHSEED`` from the row's seed, so the
    campaign process's own hash seed is no part of a replay."""

    name: str
    description: str
    opener: str = ""
    executor: str = ""
    catalog: str = ""
    faults: str = ""
    scenarios: str = ""
    options: tuple[TierOption, ...] = ()
    refuses: str = ""
    listing: str = ""
    rank: int = 50
    fault_plans: str = ""
    parallel: bool = False
    scales: bool = False
    seeds: int | None = None
    source: str = ""
    engine: str = ""
    own_hash_seeds: bool = False
    # The page of kvfault's docs whose headings name the rows that fail on purpose
    # (``docs/NAME/findings.md``): ``kvfault review`` points a known row at its entry.
    findings: str = ""

    @property
    def source_option(self) -> TierOption | None:
        """The option that names the checkout under test (None: ``source`` names none)."""
        return next((o for o in self.options if o.flag == self.source), None)

    def rows(self, kind: str) -> list[Row]:
        """The ``Row``s of ``kind`` this tier runs, in its catalog's order."""
        if not self.catalog:
            return []
        return [r for r in _load(self, self.catalog)() if r.kind == kind]

    def fault(self, name: str) -> TierFault:
        """Fault ``name`` of this tier's catalog; ``TierError`` in one line when the
        tier declares no fault catalog, or its catalog lacks a fault its rows name."""
        if not self.faults:
            raise TierError(
                f"tier {self.name!r} lists fault {name!r} but declares no fault catalog"
            )
        try:
            return _load(self, self.faults)[name]
        except KeyError:
            raise TierError(
                f"tier {self.name!r} lists fault {name!r} but its fault catalog "
                f"({self.faults}) has no such fault"
            ) from None

    def plans(self) -> FaultPlans | None:
        """The tier's ``FaultPlans`` (None: its faults are its own catalog's)."""
        return _load(self, self.fault_plans) if self.fault_plans else None

    def fault_catalog(self) -> Mapping[str, TierFault]:
        return _load(self, self.faults) if self.faults else {}

    def scenario_catalog(self) -> Mapping[str, TierScenario]:
        """The scenarios this tier's runs name: its own catalog, or the shared one."""
        if self.scenarios:
            return _load(self, self.scenarios)
        from kvfault.faults.scenarios import SCENARIOS

        return SCENARIOS

    def opener_options(self, words: Sequence[str]) -> dict[str, Any]:
        """The keywords this tier's opener takes, read back from its options as
        command-line words (``FLAG VALUE`` pairs, as a target records them).
        ``ValueError`` with one line for a word that is no option of this tier."""
        by_flag = {o.flag: o for o in self.options}
        if len(words) % 2:
            raise ValueError(f"options {list(words)!r} are not FLAG VALUE pairs")
        kwargs: dict[str, Any] = {}
        for flag, value in zip(words[::2], words[1::2], strict=True):
            opt = by_flag.get(flag)
            if opt is None:
                takes = f"it takes {', '.join(by_flag)}" if by_flag else "it takes none"
                raise ValueError(f"{flag!r} is no option of tier {self.name} ({takes})")
            if opt.repeat:
                kwargs.setdefault(opt.dest, []).append(value)
            elif opt.dest in kwargs:
                raise ValueError(f"{flag} is given twice")
            else:
                kwargs[opt.dest] = value
        return kwargs

    def refused(self, selection: Selection) -> str | None:
        """What this tier cannot run of ``selection``, in one line (None: nothing, or
        it declares no check)."""
        if not self.refuses:
            return None
        check: Callable[[Selection], str | None] = _load(self, self.refuses)
        return check(selection)

    def new_executor(self) -> Executor:
        """A fresh executor of a tier that needs nothing started (``executor``);
        ``TierError`` in one line for a tier that must be opened."""
        if not self.executor:
            raise TierError(f"tier {self.name!r} must be opened (it declares no executor)")
        made: Executor = _load(self, self.executor)()
        return made

    @contextlib.contextmanager
    def open(self, **options: Any) -> Iterator[Executor]:
        """The tier's executor, opened by its ``opener`` (or made, ``executor``) and
        closed on exit."""
        if not self.opener and self.executor and not options:
            yield self.new_executor()
            return
        if not self.opener:
            raise TierError(f"tier {self.name!r} declares no opener: it cannot run cases")
        opener: Callable[..., Any] = _load(self, self.opener)
        with contextlib.ExitStack() as stack:
            try:
                executor = stack.enter_context(opener(**options))
            except KvfaultError:
                raise  # the tier's own error, already one line
            except Exception as exc:  # a bug in the plugin: one line that names it
                raise TierError(
                    f"tier {self.name!r} could not open ({self.opener}): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            yield executor

    def own_listing(self) -> Callable[[argparse.Namespace], int] | None:
        """The tier's own ``kvfault list --tier`` command, or None (the shared list)."""
        return _load(self, self.listing) if self.listing else None


def _load(tier: Tier, ref: str) -> Any:
    """The object ``ref`` (``"module:attribute"``) names; ``TierError`` in one line when
    the declaration points at nothing."""
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise TierError(
            f"tier {tier.name!r}: cannot load {ref}: {type(exc).__name__}: {exc}"
        ) from None
