"""kvfault's pytest plugin (entry point ``pytest11``: ``kvfault``).

Fixtures (all simulated, virtual time):

- ``kv_clock`` — a fresh ``VirtualClock``.
- ``kv_world`` — a fresh ``SimWorld`` (a clock and the trace every engine writes).
- ``kv_seed`` — the run's seed (``--kv-seed``; with ``--kv-seeds N`` a test that asks
  for it runs once per seed).
- ``kv_rules`` — the stack's rules: fixed, or a planted regression's legacy rules
  (``--kv-regression NAME``).
- ``fault_plan`` — a ``FaultPlan`` of the ``--kv-fault`` injectors with their defaults,
  at ``--kv-scale K`` (what ``kv_scenario`` runs at; default 1).
- ``kv_engine`` — a factory of engines on ``kv_world`` under ``kv_rules`` and
  ``fault_plan``.
- ``kv_scenario`` — runs and judges a named scenario: ``kv_scenario("restart_burst")``
  returns a ``kvfault.faults.campaign.execute.JudgedRun``; a planned fault that never fired
  warns ``NotExercised``.

Markers ``gpu``, ``lmcache`` and ``slow`` are registered. A project that sets the ini
value ``kv_hypothesis_profile`` gets the hypothesis profiles ``dev``, ``ci``,
``nightly`` and ``mutation`` (``kvfault.faults.hypothesis_profiles``): the ini value picks one, and
``HYPOTHESIS_PROFILE`` another; a project that does not set it is left alone (its
profiles, its ``HYPOTHESIS_PROFILE``, its header). ``--hashseed-sweep RANGE``
runs the whole session once per PYTHONHASHSEED in subprocesses (``kvfault.faults.sweep``).
A failing test that used a kvfault fixture gets a "kvfault replay" section with the
command that reruns it under the same seed, faults and hash seed, and for each scenario
it ran the ``kvfault run`` that reruns that very case, or why no command does.

Importing this plugin imports neither torch, zmq nor faker (a GPU host may lack them,
and every pytest run pays for what it imports); the fixtures import lazily.
"""

from __future__ import annotations

import os
import shlex
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator, Sequence

import pytest

from kvfault.faults.argtypes import MAX_SCALE, scale, seed, seed_count

if TYPE_CHECKING:
    from kvfault.fakes.clock import VirtualClock
    from kvfault.fakes.sim import SimWorld
    from kvfault.faults.campaign.execute import JudgedRun
    from kvfault.faults.injectors.plans import FaultPlan
    from kvfault.reference.rules import Rules
    from kvfault.reference.stack.engine import Engine, EngineConfig

MARKERS = (
    "gpu: needs a CUDA or HIP device (gpu_tests/)",
    "lmcache: talks to a real lmcache multiprocess server",
    "slow: takes more than a few seconds",
)

KV_FIXTURES = frozenset(
    {"kv_clock", "kv_world", "kv_seed", "kv_rules", "fault_plan", "kv_engine", "kv_scenario"}
)

_CALLS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvfault", "kvfault fault injection")
    group.addoption("--kv-fault", action="append", default=[], metavar="NAME",
                    help="add this injector (defaults from kvfault.faults.injectors.catalog.INJECTORS) to the "
                         "fault_plan fixture; repeatable")  # fmt: skip
    group.addoption("--kv-seed", type=seed, default=0, metavar="N",
                    help="seed of kv_seed, fault_plan and kv_scenario (default 0)")  # fmt: skip
    group.addoption("--kv-seeds", type=seed_count, default=1, metavar="N",
                    help="run tests that use kv_seed once per seed, from --kv-seed on")  # fmt: skip
    group.addoption("--kv-scale", type=scale, default=1, metavar="K",
                    help="fault_plan and kv_scenario run scenarios K times their size "
                         f"(1 to {MAX_SCALE}; default 1)")  # fmt: skip
    group.addoption("--kv-regression", default=None, metavar="NAME",
                    help="kv_rules (and kv_engine, kv_scenario) use this planted "
                         "regression's legacy rules instead of the fixed stack")  # fmt: skip
    group.addoption("--hashseed-sweep", default=None, metavar="RANGE",
                    help="run this session once per PYTHONHASHSEED in RANGE (e.g. 0-15) "
                         "in subprocesses; fail when any seed fails")  # fmt: skip
    parser.addini("kv_markers", type="bool", default=False,
                  help="register kvfault's markers (gpu, lmcache, slow) in this project; off "
                       "by default, so --strict-markers still catches a project's own "
                       "unregistered marks of those names")  # fmt: skip
    parser.addini("kv_hypothesis_profile", default=None,
                  help="kvfault hypothesis profile to load (dev, ci, nightly, mutation) unless "
                       "HYPOTHESIS_PROFILE is set")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    # Only where asked: a plugin installed with kvfault must not register names every
    # other project may use (kvfault's own tests register theirs in pyproject.toml).
    if config.getini("kv_markers"):
        for line in MARKERS:
            config.addinivalue_line("markers", line)
    _load_hypothesis_profile(config)
    faults = config.getoption("kv_fault") or []
    regression = config.getoption("kv_regression")
    if faults or regression:
        # Check names at start-up (one line, exit 4), not in the first test that looks.
        from kvfault.faults.campaign import CampaignError, fault_target, regression_target

        try:
            for name in faults:
                fault_target(name)
            if regression:
                regression_target(regression)
        except CampaignError as exc:
            raise pytest.UsageError(f"kvfault: {exc}") from None


def _load_hypothesis_profile(config: pytest.Config) -> None:
    """kvfault's hypothesis profiles, only for a project that asks for them with the ini
    value ``kv_hypothesis_profile``: then ``HYPOTHESIS_PROFILE`` may pick another of
    them (or one the project registered itself). Any other project's run is left as it
    is, whatever ``HYPOTHESIS_PROFILE`` says (the variable is not kvfault's)."""
    ini = config.getini("kv_hypothesis_profile")
    if not ini:
        return
    from kvfault.faults import hypothesis_profiles as profiles

    env = os.environ.get(profiles.ENV)
    if env and env not in profiles.PROFILES and profiles.registered(env):
        return  # the project's own profile: its conftest loads it
    profiles.register()
    try:
        chosen = profiles.choose(env, ini)
    except ValueError as exc:
        raise pytest.UsageError(f"kvfault: {exc}") from None
    if chosen is not None:
        from hypothesis import settings

        settings.load_profile(chosen)


def _asked(config: pytest.Config) -> bool:
    """Whether this run asked kvfault for anything (an option or its ini value)."""
    return bool(
        config.getini("kv_hypothesis_profile")
        or config.getoption("kv_fault")
        or config.getoption("kv_regression")
        or config.getoption("kv_seed") != 0
        or config.getoption("kv_seeds") != 1
        or config.getoption("kv_scale") != 1
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--hashseed-sweep RANGE``: this process runs no tests; it reruns the session's
    own arguments once per hash seed and reports."""
    spec = config.getoption("hashseed_sweep", None)
    if not spec:
        return None
    from kvfault.faults.sweep import (
        CHILD_ENV,
        SweepError,
        format_result,
        format_seed,
        parse_seeds,
        sweep,
    )

    if os.environ.get(CHILD_ENV):
        return None  # a sweep's child runs its tests
    try:
        seeds = parse_seeds(spec)
    except SweepError as exc:
        raise pytest.UsageError(f"--hashseed-sweep: {exc}") from None
    args = strip_sweep_option(list(config.invocation_params.args))
    print(f"kvfault: PYTHONHASHSEED sweep over {spec}: python -m pytest {shlex.join(args)}")
    result = sweep(
        seeds,
        args,
        cwd=config.invocation_params.dir,
        on_seed=lambda s: print(format_seed(s), flush=True),
    )
    print(format_result(result, per_seed=False))
    return result.exit_code


def strip_sweep_option(args: list[str]) -> list[str]:
    """The session's arguments without ``--hashseed-sweep`` (both spellings)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--hashseed-sweep":
            skip = True
        elif not a.startswith("--hashseed-sweep="):
            out.append(a)
    return out


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _asked(config):
        return None  # another project's header stays its own
    opts = [
        f"seed {config.getoption('kv_seed')}",
        f"seeds {config.getoption('kv_seeds')}",
    ]
    if config.getoption("kv_fault"):
        opts.append("faults " + ",".join(config.getoption("kv_fault")))
    if config.getoption("kv_regression"):
        opts.append(f"legacy rules {config.getoption('kv_regression')}")
    if config.getoption("kv_scale") != 1:
        opts.append(f"scale {config.getoption('kv_scale')}")
    opts.append(f"PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED', 'random')}")
    return "kvfault: " + ", ".join(opts)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    n = metafunc.config.getoption("kv_seeds")
    if n > 1 and "kv_seed" in metafunc.fixturenames:
        first = metafunc.config.getoption("kv_seed")
        seeds = list(range(first, first + n))
        metafunc.parametrize("kv_seed", seeds, ids=[f"kvseed{s}" for s in seeds])


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture
def kv_clock() -> VirtualClock:
    """A fresh virtual clock: simulated seconds that pass only when someone sleeps."""
    from kvfault.fakes.clock import VirtualClock

    return VirtualClock()


@pytest.fixture
def kv_world() -> SimWorld:
    """A fresh simulated host (``kvfault.fakes.sim.SimWorld``): one clock, one trace."""
    from kvfault.fakes.sim import SimWorld

    return SimWorld()


@pytest.fixture
def kv_seed(request: pytest.FixtureRequest) -> int:
    """The run's seed (``--kv-seed``, default 0)."""
    return request.config.getoption("kv_seed")


@pytest.fixture
def kv_rules(request: pytest.FixtureRequest) -> Rules:
    """The fixed rules, or ``--kv-regression NAME``'s legacy rules."""
    name = request.config.getoption("kv_regression")
    if name:
        from kvfault.faults.regressions.legacy import REGRESSIONS

        return REGRESSIONS[name].rules
    from kvfault.reference.rules import Rules

    return Rules()


@pytest.fixture
def fault_plan(request: pytest.FixtureRequest, kv_seed: int) -> FaultPlan:
    """The ``--kv-fault`` injectors with their catalog defaults, seeded by ``kv_seed``,
    at ``--kv-scale`` (an empty plan when no fault was named)."""
    from kvfault.faults.injectors.catalog import INJECTORS
    from kvfault.faults.injectors.plans import FaultPlan, FaultSpec

    names = request.config.getoption("kv_fault") or []
    specs = tuple(FaultSpec.of(n, **INJECTORS[n].defaults) for n in names)
    return FaultPlan(specs, kv_seed, request.config.getoption("kv_scale"))


@pytest.fixture
def kv_engine(kv_world: SimWorld, kv_rules: Rules, fault_plan: FaultPlan) -> Callable[..., Engine]:
    """``kv_engine(config=None, *, rules=None, plan=None, name="engine", **kw)``: an
    engine on ``kv_world`` with ``kv_rules`` and a fresh set of ``fault_plan``'s
    injectors wrapped around its collaborators (``engine.injectors`` lists them)."""
    from kvfault.faults.injectors.base import wrap_all
    from kvfault.reference.stack.engine import EngineConfig

    def make(
        config: EngineConfig | None = None,
        *,
        rules: Rules | None = None,
        plan: FaultPlan | None = None,
        name: str = "engine",
        **kw: Any,
    ) -> Engine:
        injectors = (plan if plan is not None else fault_plan).injectors()
        for inj in injectors:
            inj.bind(kv_world.trace)
        engine = kv_world.engine(
            config or EngineConfig(),
            rules=rules if rules is not None else kv_rules,
            name=name,
            wrap=wrap_all(injectors),
            **kw,
        )
        engine.injectors = injectors  # type: ignore[attr-defined]  # the plugin's note for tests
        return engine

    return make


class NotExercised(UserWarning):
    """A fault that ``kv_scenario`` ran never fired: the test proved nothing about it
    (the campaign's NOT EXERCISED). ``-W error::kvfault.faults.pytest_plugin.NotExercised``
    makes it fail the test."""


@dataclass(frozen=True)
class _Call:
    """One ``kv_scenario`` call, for the replay section: what ran, and whether the
    test brought rules or a plan of its own (which no kvfault command can name)."""

    scenario: str
    seed: int
    plan: FaultPlan
    own_rules: bool
    own_plan: bool
    own_properties: bool = False


@pytest.fixture
def kv_scenario(
    request: pytest.FixtureRequest, kv_seed: int, kv_rules: Rules, fault_plan: FaultPlan
) -> Callable[..., JudgedRun]:
    """``kv_scenario(name, seed=None, *, rules=None, plan=None, properties=None)``: run
    scenario ``name`` (defaults: ``kv_seed``, ``kv_rules``, ``fault_plan``) under the
    plan as the campaign runs a plan (its injectors, the request ids it salts, its
    scale; a scenario of fixed size runs at scale 1) and judge it by its properties
    (``properties``: only these; an unknown name raises ``UnknownName``). Returns the
    ``JudgedRun`` (``.ok``, ``.violations``, ``.fired``, ``.not_exercised``); a
    planned fault that never fired also warns (``NotExercised``)."""
    from dataclasses import replace

    from kvfault.faults.campaign.execute import run_case
    from kvfault.faults.scenarios import SCENARIOS

    calls = request.node.stash.setdefault(_CALLS, [])

    def run(
        name: str,
        seed: int | None = None,
        *,
        rules: Rules | None = None,
        plan: FaultPlan | None = None,
        properties: Sequence[str] | None = None,
    ) -> JudgedRun:
        s = kv_seed if seed is None else seed
        p = fault_plan if plan is None else plan
        if name in SCENARIOS and not SCENARIOS[name].scales and p.scale != 1:
            p = replace(p, scale=1)  # as the campaign runs it: a fixed size does not grow
        result = run_case(
            name,
            s,
            rules=rules if rules is not None else kv_rules,
            injectors=p.injectors,
            properties=properties,
            request_map=p.request_map(),
            replay_map=p.replay_map(),
            scale=p.scale,
        )
        # Only a call that ran gets a replay line; one judged by a few of its properties
        # is the test's own judgement.
        calls.append(_Call(name, s, p, rules is not None, plan is not None, properties is not None))
        if result.not_exercised:
            warnings.warn(
                NotExercised(
                    f"kvfault: {', '.join(result.not_exercised)} never fired in {name} "
                    f"(seed {s}): NOT EXERCISED"
                ),
                stacklevel=2,
            )
        return result

    return run


# -- the replay line ----------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, Any, None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and KV_FIXTURES & set(getattr(item, "fixturenames", ())):
        rep.sections.append(("kvfault replay", replay_text(item)))


def replay_text(item: pytest.Item) -> str:
    """The command that reruns ``item`` with the same seed, faults, rules and hash seed,
    plus the kvfault command of each scenario it ran."""
    config = item.config
    seed = config.getoption("kv_seed")
    callspec = getattr(item, "callspec", None)
    nodeid = item.nodeid
    if callspec is not None and "kv_seed" in callspec.params:
        seed = callspec.params["kv_seed"]
        tag = f"kvseed{seed}"
        nodeid = nodeid.replace(f"[{tag}]", "").replace(f"-{tag}]", "]").replace(f"[{tag}-", "[")
    args = [sys.executable.rsplit(os.sep, 1)[-1], "-m", "pytest", nodeid, "--kv-seed", str(seed)]
    for f in config.getoption("kv_fault") or []:
        args += ["--kv-fault", f]
    if config.getoption("kv_regression"):
        args += ["--kv-regression", config.getoption("kv_regression")]
    if config.getoption("kv_scale") != 1:
        args += ["--kv-scale", str(config.getoption("kv_scale"))]
    hs = os.environ.get("PYTHONHASHSEED")
    lines = []
    if hs and hs != "random":
        lines.append(f"PYTHONHASHSEED={hs} {shlex.join(args)}")
    else:
        lines.append(shlex.join(args))
        lines.append(
            "(PYTHONHASHSEED was random: if this is hash-order dependent, find a failing "
            "seed with --hashseed-sweep 0-15)"
        )
    regression = config.getoption("kv_regression")
    lines += [
        f"scenario {c.scenario}: {_kvfault_line(c, regression)}" for c in item.stash.get(_CALLS, [])
    ]
    return "\n".join(lines)


def _kvfault_line(call: _Call, regression: str | None) -> str:
    """The ``kvfault run`` that reruns ``call`` as it ran, or why there is none (the
    pytest line reruns it): a campaign row runs one fault at a time, with its catalog
    defaults, on the scenario where the catalog exercises it, seeded by the case."""
    from kvfault.faults.injectors.catalog import INJECTORS

    none = "no kvfault command runs {}; the pytest line above reruns it"
    plan = call.plan
    from kvfault.faults.argtypes import MAX_SEED
    from kvfault.faults.tiers import Tiers

    if call.own_rules:
        return none.format("the test's own rules")
    if call.own_properties:
        return none.format("the test's own choice of properties")
    if not 0 <= call.seed <= MAX_SEED:
        return none.format(f"seed {call.seed}")
    in_process = {r.name for r in Tiers.installed().default.rows("scenario")}
    if call.scenario not in in_process:  # another tier's scenario
        return none.format(f"{call.scenario} in this process")
    if call.own_plan and plan.faults:
        return none.format("the test's own plan")
    common = ["--first-seed", str(call.seed), "--seeds", "1"]
    common += ["--legacy", regression] if regression else []
    common += ["--scale", str(plan.scale)] if plan.scale != 1 else []
    if not plan.faults:
        return shlex.join(["kvfault", "run", "--scenario", call.scenario, *common])
    (fault, *more) = plan.faults
    info = INJECTORS[fault.injector]
    if more or plan.seed != call.seed or info.scenario != call.scenario:
        what = "these faults together" if more else f"{fault.injector} on {call.scenario}"
        if not more and plan.seed != call.seed:
            what = f"{fault.injector} seeded apart from its case"
        return none.format(what)
    return shlex.join(["kvfault", "run", "--fault", fault.injector, *common])
