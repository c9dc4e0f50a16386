"""Tiers are plugins: a tier installed by an outside package (a ``*.dist-info`` with a
``kvfault.tiers`` entry point on ``PYTHONPATH``) runs a campaign through ``kvfault run
--tier``; a broken or duplicate plugin is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# What docs/architecture.md ("A tier") tells a contributor to write, for a tier that
# runs the reference stack's scenarios through its own executor, with one fault of its
# own catalog (built from a seed, with the ending the fixed stack must reach).
TOY_TIER = '''
"""A toy tier from outside kvfault: the in-process stack behind its own executor."""

import contextlib
from dataclasses import dataclass

from kvfault.faults.runs import Expect
from kvfault.faults.tiers import Executor, Row, Tier, TierOption


class ToyExecutor(Executor):
    tier = "toy"
    deterministic = True

    def execute(self, scenario, ctx):
        from kvfault.faults.scenarios import SCENARIOS

        return SCENARIOS[scenario].run(ctx), {"toy_executor": True}


@contextlib.contextmanager
def open_toy(toy_log=None):
    if toy_log is not None:  # its own option: where it says it opened
        with open(toy_log, "a") as log:
            log.write("opened\\n")
    yield ToyExecutor()


@dataclass(frozen=True)
class ToyFault:
    name: str
    description: str
    scenario: str
    expect: Expect
    wraps: str
    kills_server: bool = False

    def factory(self, seed):
        from kvfault.faults.injectors.catalog import INJECTORS
        from kvfault.faults.injectors.plans import FaultSpec

        injector = FaultSpec.of(self.wraps, **INJECTORS[self.wraps].defaults).build(seed)
        injector.name = self.name  # it fires under this tier's name for it
        return injector


def _faults():
    from kvfault.faults.injectors.catalog import INJECTORS

    lost = INJECTORS["lost_completion"]
    return {
        "toy_lost_completion": ToyFault(
            "toy_lost_completion", "a lost completion, the toy way", lost.scenario,
            lost.expect, "lost_completion",
        )
    }


class _Faults(dict):
    def __missing__(self, name):
        self.update(_faults())
        return self[name]


FAULTS = _Faults()


def rows():
    return [
        Row("scenario", "small_restart_burst", "a small restart burst", "small_restart_burst"),
        Row("fault", "toy_lost_completion", "a lost completion, the toy way",
            "lost_completion_burst"),
    ]


TIER = Tier(
    name="toy",
    description="a toy tier: the in-process stack behind its own executor",
    opener="toy_tier:open_toy",
    catalog="toy_tier:rows",
    faults="toy_tier:FAULTS",
    options=(TierOption("--toy-log", "a file the toy tier says it opened in", metavar="PATH"),),
    rank=90,
)
'''


def _dist(where: Path, name: str, entry_points: str, module: str | None = None) -> None:
    """An installed distribution as pip leaves it: ``NAME-0.1.dist-info`` with its
    metadata and entry points, and its module beside it."""
    info = where / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    if module is not None:
        (where / f"{name}.py").write_text(module)


def _kvfault(site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=site,
        timeout=300,
    )


def test_a_tier_from_an_outside_package_runs_a_campaign(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist(site, "toy_tier", "[kvfault.tiers]\ntoy = toy_tier:TIER\n", TOY_TIER)
    report = tmp_path / "report"
    run = _kvfault(site, "run", "--tier", "toy", "--seeds", "1", "--no-progress",
                   "--report", str(report))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 targets, 2 runs: 2 ok, 0 failed" in run.stdout, run.stdout
    summary = json.loads((report / "summary.json").read_text())
    cases = {c["id"]: c for c in summary["cases"]}
    assert set(cases) == {
        "toy:scenario:small_restart_burst@seed0",
        "toy:fault:toy_lost_completion@seed0",
    }, sorted(cases)
    assert {c["verdict"] for c in cases.values()} == {"PASS"}
    # The toy's own fault fired, under its name, and the ending was the one it declared.
    assert cases["toy:fault:toy_lost_completion@seed0"]["fired"]["toy_lost_completion"] >= 1
    # `kvfault list` names the tier and where its rows run; --tier toy is a choice.
    listed = _kvfault(site, "list")
    assert listed.returncode == 0, listed.stderr
    lines = [" ".join(line.split()) for line in listed.stdout.splitlines()]
    assert "toy a toy tier: the in-process stack behind its own executor" in lines
    assert (
        "toy_lost_completion a lost completion, the toy way [--tier toy: lost_completion_burst]"
        in lines
    ), listed.stdout
    assert any(
        line.startswith("small_restart_burst ") and "[also --tier toy]" in line for line in lines
    ), listed.stdout


# The toy tier, declared able to run in many processes, saying in its log which
# process opened it: a worker of -j or -n opens the tier its cases run on.
_PARALLEL_TOY = TOY_TIER.replace(
    'log.write("opened\\n")', "log.write(f\"opened {__import__('os').getpid()}\\n\")"
).replace("    rank=90,\n", "    rank=90,\n    parallel=True,\n")


@pytest.mark.parametrize("spread", [["-j", "2"], ["-n", "2"]], ids=["pool", "xdist"])
def test_a_parallel_tier_from_an_outside_package_runs_in_workers(
    tmp_path: Path, spread: list[str]
) -> None:
    assert _PARALLEL_TOY != TOY_TIER and "parallel=True" in _PARALLEL_TOY
    site = tmp_path / "site"
    _dist(site, "toy_tier", "[kvfault.tiers]\ntoy = toy_tier:TIER\n", _PARALLEL_TOY)
    log, report = tmp_path / "toy.log", tmp_path / "report"
    run = subprocess.Popen(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "toy", "--seeds", "2",
         "--no-progress", "--report", str(report), "--toy-log", str(log), *spread],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=site,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])},
    )  # fmt: skip
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, out + err
    assert "2 targets, 4 runs: 2 ok, 0 failed" in out, out
    verdicts = {
        c["id"]: c["verdict"] for c in json.loads((report / "summary.json").read_text())["cases"]
    }
    assert verdicts == {
        f"toy:{row}@seed{s}": "PASS"
        for row in ("scenario:small_restart_burst", "fault:toy_lost_completion")
        for s in (0, 1)
    }, verdicts
    # Every case ran on the toy tier as a worker opened it, never in the campaign process.
    openers = {int(line.split()[1]) for line in log.read_text().splitlines()}
    assert openers and run.pid not in openers, (openers, run.pid)


def test_the_toy_tier_cannot_run_what_it_does_not_declare(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist(site, "toy_tier", "[kvfault.tiers]\ntoy = toy_tier:TIER\n", TOY_TIER)
    run = _kvfault(site, "run", "--tier", "toy", "--swarm", "--no-progress")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "kvfault: error: --swarm draws in-process injectors: it runs on --tier memory; "
        "see `kvfault list`"
    ], run.stderr
    run = _kvfault(site, "run", "--tier", "toy", "--fault", "lost_completion", "--no-progress")
    assert run.returncode == 2
    # lost_completion is a fault of the memory tier (and maybe others), not of the toy one.
    assert "runs with --tier memory" in run.stderr and "not --tier toy" in run.stderr, run.stderr


@pytest.mark.parametrize(
    "plugin, says",
    [
        (
            (
                "broken_tier",
                "[kvfault.tiers]\nbroken = broken_tier:TIER\n",
                "import toy_dependency_that_is_not_installed\n",
            ),
            "tier plugin broken = broken_tier:TIER does not load: ModuleNotFoundError",
        ),
        (
            ("odd_tier", "[kvfault.tiers]\nodd = odd_tier:TIER\n", "TIER = 'a string'\n"),
            "tier plugin odd = odd_tier:TIER is a str, not a kvfault.faults.tiers.Tier",
        ),
        (
            ("twin_tier", "[kvfault.tiers]\nmemory = kvfault.faults.memory.tier:TIER\n", None),
            "tier 'memory' is registered twice",
        ),
    ],
    ids=["broken", "not-a-tier", "duplicate"],
)
def test_a_bad_plugin_is_one_line_and_exit_2(
    tmp_path: Path, plugin: tuple[str, str, str | None], says: str
) -> None:
    site = tmp_path / "site"
    _dist(site, *plugin)
    for argv in (["run", "--no-progress", "--scenario", "small_restart_burst"], ["list"]):
        out = _kvfault(site, *argv)
        assert out.returncode == 2, (argv, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], (argv, out.stderr)
        assert "Traceback" not in out.stderr


# An artifact of a toy-tier case run with --toy-log, written as the campaign writes it.
_WRITE_ARTIFACT = """
import sys
from pathlib import Path
from kvfault.faults.campaign import Case
from kvfault.faults.campaign.artifacts import write_artifact
from kvfault.faults.campaign.reading import target_from_json

target = target_from_json({"kind": "scenario", "name": "small_restart_burst", "tier": "toy",
                           "options": ["--toy-log", sys.argv[2]]})
print(write_artifact(Case(target, 0), Path(sys.argv[1])))
"""


def test_a_replay_opens_the_tier_with_the_options_the_case_ran_with(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist(site, "toy_tier", "[kvfault.tiers]\ntoy = toy_tier:TIER\n", TOY_TIER)
    log = tmp_path / "toy.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    written = subprocess.run(
        [sys.executable, "-c", _WRITE_ARTIFACT, str(tmp_path / "artifacts"), str(log)],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    artifact = written.stdout.strip()
    assert " --toy-log " in json.loads(Path(artifact).read_text())["command"]
    replay = _kvfault(site, "replay", artifact)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert log.read_text() == "opened\n"  # the tier opened with --toy-log, as it ran
    # An option the tier does not take is refused before anything runs, in one line.
    obj = json.loads(Path(artifact).read_text())
    obj["target"]["options"] = ["--atom-src", "."]
    Path(artifact).write_text(json.dumps(obj))
    replay = _kvfault(site, "replay", artifact)
    assert replay.returncode == 2
    assert replay.stderr.strip().splitlines() == [
        f"kvfault: error: {artifact}: target 'options': '--atom-src' is no option of tier toy "
        "(it takes --toy-log)"
    ], replay.stderr
    assert log.read_text() == "opened\n"


_BOOM_TIER = """
import contextlib
from kvfault.faults.tiers import Row, Tier


@contextlib.contextmanager
def open_boom():
    raise RuntimeError("boom in opener")
    yield


def rows():
    return [Row("scenario", "small_restart_burst", "a small restart burst", "small_restart_burst"),
            Row("fault", "ghost", "a fault its tier has no catalog for", "small_restart_burst")]


BOOM = Tier(name="boom", description="opens with a bug", opener="boom_tier:open_boom",
            catalog="boom_tier:rows")
"""


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--scenario", "small_restart_burst"],
         "kvfault: error: tier 'boom' could not open (boom_tier:open_boom): "
         "RuntimeError: boom in opener"),
        (["--fault", "ghost"],
         "kvfault: error: tier 'boom' lists fault 'ghost' but declares no fault catalog"),
    ],
    ids=["opener-raises", "fault-without-catalog"],
)  # fmt: skip
def test_a_plugin_bug_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], says: str) -> None:
    site = tmp_path / "site"
    _dist(site, "boom_tier", "[kvfault.tiers]\nboom = boom_tier:BOOM\n", _BOOM_TIER)
    run = _kvfault(site, "run", "--tier", "boom", "--no-progress", *argv)
    assert (run.returncode, run.stderr.strip().splitlines()) == (2, [says]), run.stderr


def test_a_tier_with_nothing_to_run_is_refused_not_passed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    empty = (
        "from kvfault.faults.tiers import Tier\n"
        "def rows():\n    return []\n"
        "EMPTY = Tier(name='empty', description='lists nothing', opener='x:y', "
        "catalog='empty_tier:rows')\n"
    )
    _dist(site, "empty_tier", "[kvfault.tiers]\nempty = empty_tier:EMPTY\n", empty)
    run = _kvfault(site, "run", "--tier", "empty", "--no-progress", "--report", "r")
    assert (run.returncode, run.stderr.strip().splitlines()) == (
        2,
        [
            "kvfault: error: --tier empty has nothing to run: its catalog lists no row; see `kvfault list`"
        ],
    ), run.stdout + run.stderr
    assert not (site / "r").exists()


_SLOW_TIER = """
import contextlib, os, time
from kvfault.faults.tiers import Row, Tier


@contextlib.contextmanager
def open_slow():
    open(os.environ["SLOW_TIER_MARK"], "w").close()  # opening: a server starting, a lock
    time.sleep(60)
    yield None


def rows():
    return [Row("scenario", "small_restart_burst", "a small restart burst", "small_restart_burst")]


SLOW = Tier(name="slow", description="opens slowly", opener="slow_tier:open_slow",
            catalog="slow_tier:rows")
"""


def _signalled_at_the_mark(
    tmp_path: Path, tier_source: str, signum: int
) -> tuple[int, str, str, Path]:
    """``kvfault run --tier slow --report r`` with ``tier_source`` as the slow tier,
    sent ``signum`` once the tier writes its mark: (exit code, stdout, stderr, site)."""
    import time

    site = tmp_path / "site"
    _dist(site, "slow_tier", "[kvfault.tiers]\nslow = slow_tier:SLOW\n", tier_source)
    mark = tmp_path / "mark"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
           "SLOW_TIER_MARK": str(mark)}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "slow", "--no-progress",
         "--report", "r"],
        cwd=site, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not mark.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert mark.exists(), proc.communicate()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err, site


def test_a_run_interrupted_while_its_tier_opens_still_reports(tmp_path: Path) -> None:
    # Nothing ran, but a CI job cancelled there still gets its table and junit.xml.
    import signal

    code, out, err, site = _signalled_at_the_mark(tmp_path, _SLOW_TIER, signal.SIGTERM)
    assert (code, err.strip().splitlines()) == (143, ["kvfault: interrupted by SIGTERM"])
    assert "ERROR: interrupted by SIGTERM: 2 of 2 cases never ran" in out, out
    summary = json.loads((site / "r" / "summary.json").read_text())
    assert summary["verdict"] == "ERROR" and summary["cases"] == []
    assert (site / "r" / "junit.xml").exists()


_CLOSING_TIER = _SLOW_TIER.replace(
    """    open(os.environ["SLOW_TIER_MARK"], "w").close()  # opening: a server starting, a lock
    time.sleep(60)
    yield None""",
    """    from kvfault.faults.memory.executor import MemoryExecutor

    yield MemoryExecutor()
    open(os.environ["SLOW_TIER_MARK"], "w").close()  # closing: every case has ended
    time.sleep(60)""",
)


def test_a_run_interrupted_while_its_tier_closes_reports_the_cases_that_ran(
    tmp_path: Path,
) -> None:
    import signal

    code, out, err, site = _signalled_at_the_mark(tmp_path, _CLOSING_TIER, signal.SIGINT)
    assert (code, err.strip().splitlines()) == (130, ["kvfault: interrupted by SIGINT"])
    # The two cases ran: the table says so, not "2 of 2 never ran".
    assert "1 targets, 2 runs: 1 ok" in out, out
    assert "interrupted by SIGINT as the tier closed, after every case had ended" in out, out
    summary = json.loads((site / "r" / "summary.json").read_text())
    assert len(summary["cases"]) == 2 and summary["verdict"] == "ERROR"
