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
  returns a ``faults.campaign.execute.CaseResult``.

Markers ``gpu``, ``lmcache`` and ``slow`` are registered. A project that sets the ini
value ``kv_hypothesis_profile`` gets the hypothesis profiles ``dev``, ``ci`` and
``nightly`` (``faults.hypothesis_profiles``): the ini value picks one, and
``HYPOTHESIS_PROFILE`` another; a project that does not set it is left alone (its
profiles, its ``HYPOTHESIS_PROFILE``, its header). ``--hashseed-sweep RANGE``
runs the whole session once per PYTHONHASHSEED in subprocesses (``faults.sweep``).
A failing test that used a kvfault fixture gets a "kvfault replay" section with the
command that reruns it under the same seed, faults and hash seed.

Importing this plugin imports neither torch, zmq nor faker (a GPU host may lack them,
and every pytest run pays for what it imports); the fixtures import lazily.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, Callable, Generator, Sequence

import pytest

from faults.argtypes import MAX_SCALE, scale, seed, seed_count

if TYPE_CHECKING:
    from fakes.clock import VirtualClock
    from fakes.sim import SimWorld
    from faults.campaign.execute import CaseResult
    from faults.injectors.plans import FaultPlan
    from reference.rules import Rules
    from reference.stack.engine import Engine, EngineConfig

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
                    help="add this injector (defaults from faults.injectors.catalog.INJECTORS) to the "
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
    parser.addini("kv_hypothesis_profile", default=None,
                  help="kvfault hypothesis profile to load (dev, ci, nightly, mutation) unless "
                       "HYPOTHESIS_PROFILE is set")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    _load_hypothesis_profile(config)
    faults = config.getoption("kv_fault") or []
    regression = config.getoption("kv_regression")
    if faults or regression:
        # Check names at start-up (one line, exit 4), not in the first test that looks.
        from faults.campaign import CampaignError, fault_target, regression_target

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
    from faults import hypothesis_profiles as profiles

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
    from faults.sweep import CHILD_ENV, SweepError, format_result, format_seed, parse_seeds, sweep

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
    from fakes.clock import VirtualClock

    return VirtualClock()


@pytest.fixture
def kv_world() -> SimWorld:
    """A fresh simulated host (``fakes.sim.SimWorld``): one clock, one trace."""
    from fakes.sim import SimWorld

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
        from faults.regressions.legacy import REGRESSIONS

        return REGRESSIONS[name].rules
    from reference.rules import Rules

    return Rules()


@pytest.fixture
def fault_plan(request: pytest.FixtureRequest, kv_seed: int) -> FaultPlan:
    """The ``--kv-fault`` injectors with their catalog defaults, seeded by ``kv_seed``,
    at ``--kv-scale`` (an empty plan when no fault was named)."""
    from faults.injectors.catalog import INJECTORS
    from faults.injectors.plans import FaultPlan, FaultSpec

    names = request.config.getoption("kv_fault") or []
    specs = tuple(FaultSpec.of(n, **INJECTORS[n].defaults) for n in names)
    return FaultPlan(specs, kv_seed, request.config.getoption("kv_scale"))


@pytest.fixture
def kv_engine(kv_world: SimWorld, kv_rules: Rules, fault_plan: FaultPlan) -> Callable[..., Engine]:
    """``kv_engine(config=None, *, rules=None, plan=None, name="engine", **kw)``: an
    engine on ``kv_world`` with ``kv_rules`` and a fresh set of ``fault_plan``'s
    injectors wrapped around its collaborators (``engine.injectors`` lists them)."""
    from faults.injectors.base import wrap_all
    from reference.stack.engine import EngineConfig

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


@pytest.fixture
def kv_scenario(
    request: pytest.FixtureRequest, kv_seed: int, kv_rules: Rules, fault_plan: FaultPlan
) -> Callable[..., CaseResult]:
    """``kv_scenario(name, seed=None, *, rules=None, plan=None, properties=None)``: run
    scenario ``name`` (defaults: ``kv_seed``, ``kv_rules``, ``fault_plan``) at the
    plan's scale and judge it with its properties; returns the ``CaseResult``
    (``.ok``, ``.violations``)."""
    from faults.campaign.execute import run_case

    calls = request.node.stash.setdefault(_CALLS, [])

    def run(
        name: str,
        seed: int | None = None,
        *,
        rules: Rules | None = None,
        plan: FaultPlan | None = None,
        properties: Sequence[str] | None = None,
    ) -> CaseResult:
        s = kv_seed if seed is None else seed
        p = fault_plan if plan is None else plan
        calls.append((name, s, [f.injector for f in p.faults], p.scale))
        return run_case(
            name,
            s,
            rules=rules if rules is not None else kv_rules,
            injectors=p.injectors,
            properties=properties,
            scale=p.scale,
        )

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
    for name, s, faults, k in item.stash.get(_CALLS, []):
        regression = config.getoption("kv_regression")
        at = f" --scale {k}" if k != 1 else ""
        if regression and not at:
            lines.append(f"scenario {name}: kvfault repro {regression} --seed {s}")
        elif regression:
            lines.append(
                f"scenario {name}: kvfault run --regression {regression} --first-seed {s} --seeds 1{at}"
            )
        elif faults:
            extra = " ".join(f"--fault {f}" for f in faults)
            lines.append(f"scenario {name}: kvfault run --first-seed {s} --seeds 1{at} {extra}")
        else:
            lines.append(
                f"scenario {name}: kvfault run --scenario {name} --first-seed {s} --seeds 1{at}"
            )
    return "\n".join(lines)
