"""The pytest plugin (faults/pytest_plugin.py), through pytester."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest_plugins = ["pytester"]
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_user=textwrap.dedent(source))
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_fixtures_build_a_world_an_engine_and_a_scenario(pytester):
    result = _run(
        pytester,
        """
        from kvfault.fakes import VirtualClock
        from kvfault.fakes import SimWorld
        from kvfault.reference.stack import Engine, EngineConfig
        from kvfault.reference import Rules

        def test_clock_and_world(kv_clock, kv_world):
            assert isinstance(kv_clock, VirtualClock) and kv_clock.now() == 0.0
            assert isinstance(kv_world, SimWorld) and kv_world.trace.events == []

        def test_defaults(kv_seed, kv_rules, fault_plan):
            assert kv_seed == 0 and kv_rules == Rules()
            assert fault_plan.faults == () and fault_plan.seed == 0

        def test_engine(kv_engine, kv_world):
            engine = kv_engine(EngineConfig())
            assert isinstance(engine, Engine) and engine.injectors == []
            assert engine.trace.events is kv_world.trace.events

        def test_scenario(kv_scenario):
            result = kv_scenario("chunk_aligned_hybrid")
            assert result.ok and result.scenario == "chunk_aligned_hybrid"
        """,
    )
    result.assert_outcomes(passed=4)


def test_kv_fault_and_seed_options_make_the_fault_plan(pytester):
    result = _run(
        pytester,
        """
        def test_plan(fault_plan, kv_seed, kv_engine):
            assert [f.injector for f in fault_plan.faults] == ["slow_forward", "lost_completion"]
            assert fault_plan.seed == kv_seed == 7
            engine = kv_engine()
            assert [i.name for i in engine.injectors] == ["slow_forward", "lost_completion"]
        """,
        "--kv-fault", "slow_forward", "--kv-fault", "lost_completion", "--kv-seed", "7",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["kvfault: seed 7, seeds 1, faults slow_forward,lost_completion, *"]
    )


def test_kv_seeds_runs_a_test_once_per_seed(pytester):
    result = _run(
        pytester,
        "def test_s(kv_seed):\n    assert kv_seed in (3, 4, 5)\n",
        "--kv-seed",
        "3",
        "--kv-seeds",
        "3",
        "-v",
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["*test_s?kvseed3? PASSED*", "*test_s?kvseed4? PASSED*", "*test_s?kvseed5? PASSED*"]
    )


def test_kv_regression_swaps_in_legacy_rules(pytester):
    result = _run(
        pytester,
        """
        from kvfault.faults.regressions import REGRESSIONS

        def test_rules(kv_rules, kv_scenario):
            assert kv_rules == REGRESSIONS["hybrid_last_chunk"].rules
            assert not kv_scenario("chunk_aligned_hybrid").ok
        """,
        "--kv-regression", "hybrid_last_chunk",
    )  # fmt: skip
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kv-fault", "slow"], "kvfault: unknown fault 'slow' (did you mean: slow_forward*"),
        (
            ["--kv-regression", "media_key"],
            "kvfault: unknown regression 'media_key' (did you mean: media_keys?)",
        ),
        (["--kv-seeds", "0"], "*--kv-seeds: a seed count must be at least 1, got 0"),
        (["--hashseed-sweep", "5-1"], "*--hashseed-sweep: bad hash seed range '5-1': 1 < 5"),
    ],
)
def test_bad_options_are_usage_errors(pytester, args, message):
    result = _run(pytester, "def test_x():\n    pass\n", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


MARKED = """
import pytest

@pytest.mark.gpu
@pytest.mark.lmcache
@pytest.mark.slow
def test_marked():
    pass
"""


# In a fresh process: an in-process run sees markers registered in this one.
def test_markers_are_registered_for_strict_users_who_ask(pytester):
    pytester.makeini("[pytest]\nkv_markers = true\n")
    pytester.makepyfile(test_user=MARKED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=1)
    markers = pytester.runpytest_subprocess("--markers").stdout.str()
    for name in ("gpu", "lmcache", "slow"):
        assert f"@pytest.mark.{name}:" in markers


def test_a_strict_project_keeps_its_own_unregistered_marker_errors(pytester):
    """A project with --strict-markers and its own unregistered ``slow``: installing
    kvfault must not register it for them (the plugin had, in every project)."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_user=MARKED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*'gpu' not found in `markers` configuration option*"])
    markers = pytester.runpytest_subprocess("--markers").stdout.str()
    for name in ("gpu", "lmcache", "slow"):
        assert f"@pytest.mark.{name}:" not in markers


def test_a_failing_kvfault_test_prints_its_replay_line(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "5")
    result = _run(
        pytester,
        """
        def test_burst(kv_scenario, kv_seed):
            result = kv_scenario("chunk_aligned_hybrid")
            assert not result.ok, "planted failure"

        def test_plain():
            assert False
        """,
        "--kv-seed", "2", "--kv-seeds", "2", "--kv-fault", "slow_forward",
    )  # fmt: skip
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert out.count("kvfault replay") == 2  # the plain test used no kvfault fixture
    result.stdout.fnmatch_lines(
        [
            "*- kvfault replay -*",
            "PYTHONHASHSEED=5 python* -m pytest test_user.py::test_burst --kv-seed 2 --kv-fault slow_forward",
            # slow_forward's campaign row runs it on restart_burst, not here.
            "scenario chunk_aligned_hybrid: no kvfault command runs slow_forward on "
            "chunk_aligned_hybrid; the pytest line above reruns it",
            "*- kvfault replay -*",
            "PYTHONHASHSEED=5 python* -m pytest test_user.py::test_burst --kv-seed 3 --kv-fault slow_forward",
        ]
    )


_REPLAYED = """
import pytest
from kvfault.faults.injectors.plans import FaultPlan, FaultSpec

@pytest.mark.parametrize("name", ["restart_burst", "two_images"])
def test_fault(kv_scenario, name):
    kv_scenario(name)
    assert False

def test_own_plan(kv_scenario):
    kv_scenario("two_images", plan=FaultPlan((FaultSpec.of("lost_tier_reply", nth=[3]),), seed=5))
    assert False

def test_other_seed(kv_scenario):
    kv_scenario("restart_burst", seed=9)
    assert False
"""


def test_a_replay_line_names_a_kvfault_command_only_where_one_reruns_the_same_case(
    pytester, monkeypatch
):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    result = _run(pytester, _REPLAYED, "--kv-fault", "slow_forward", "--kv-scale", "2",
                  "--kv-regression", "media_keys", "-W", "ignore::UserWarning")  # fmt: skip
    result.assert_outcomes(failed=4)
    lines = [line for line in result.stdout.lines if line.startswith("scenario ")]
    assert lines == [
        # slow_forward's own row, at the scale asked, on media_keys' legacy rules.
        "scenario restart_burst: kvfault run --fault slow_forward --first-seed 0 --seeds 1 "
        "--legacy media_keys --scale 2",
        "scenario two_images: no kvfault command runs slow_forward on two_images; the pytest "
        "line above reruns it",
        "scenario two_images: no kvfault command runs the test's own plan; the pytest line "
        "above reruns it",
        "scenario restart_burst: no kvfault command runs slow_forward seeded apart from its "
        "case; the pytest line above reruns it",
    ], result.stdout.str()


def test_a_plain_scenario_line_reruns_the_same_row(pytester, monkeypatch, capsys):
    from kvfault.faults.cli import main

    monkeypatch.setenv("PYTHONHASHSEED", "0")
    source = "def test_x(kv_scenario):\n    kv_scenario('two_images')\n    assert False\n"
    result = _run(pytester, source, "--kv-seed", "3", "--kv-scale", "4",
                  "--kv-regression", "media_keys")  # fmt: skip
    (line,) = [line for line in result.stdout.lines if line.startswith("scenario ")]
    # two_images has a fixed size: it ran at scale 1, and the line says no --scale.
    assert line == (
        "scenario two_images: kvfault run --scenario two_images --first-seed 3 --seeds 1 "
        "--legacy media_keys"
    )
    capsys.readouterr()
    argv = line.split(": ", 1)[1].split()[1:]
    code = main([*argv, "--no-progress", "--artifacts", str(pytester.path / "artifacts")])
    table = capsys.readouterr().out
    assert code == 1  # media_keys' legacy rules fail two_images, in pytest and here
    rows = [r.split()[:4] for r in table.splitlines()]
    assert ["scenario", "two_images", "two_images", "3"] in rows, table


def test_kv_scenario_runs_a_plan_as_the_campaign_does(pytester):
    # hash_order_shuffle salts request ids through the plan's request map: kv_scenario
    # must pass it, or the fault never fires and the test passes on nothing.
    result = _run(
        pytester,
        """
        import pytest
        from kvfault.faults.catalog import UnknownName

        def test_fires(kv_scenario):
            r = kv_scenario("small_restart_burst")
            assert r.fired["hash_order_shuffle"] > 0 and r.not_exercised == []

        def test_misspelt_property(kv_scenario):
            with pytest.raises(UnknownName, match="unknown property 'nope'"):
                kv_scenario("two_images", properties=["nope"])
        """,
        "--kv-fault", "hash_order_shuffle", "--kv-seeds", "2",
    )  # fmt: skip
    result.assert_outcomes(passed=4)  # each test on seeds 0 and 1


def test_a_fault_that_never_fired_warns_not_exercised(pytester):
    source = """
        def test_quiet(kv_scenario):
            r = kv_scenario("two_images")
            assert r.ok and r.not_exercised == ["lost_completion"]
        """
    result = _run(pytester, source, "--kv-fault", "lost_completion")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*NotExercised: kvfault: lost_completion never fired in "
                                 "two_images (seed 0): NOT EXERCISED*"])  # fmt: skip
    strict = _run(pytester, source, "--kv-fault", "lost_completion",
                  "-W", "error::kvfault.faults.pytest_plugin.NotExercised")  # fmt: skip
    strict.assert_outcomes(failed=1)


def test_replay_line_under_a_random_hash_seed_says_how_to_find_one(pytester, monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    result = _run(pytester, "def test_x(kv_seed):\n    assert False\n")
    result.stdout.fnmatch_lines(
        ["python* -m pytest test_user.py::test_x --kv-seed 0", "*--hashseed-sweep 0-15*"]
    )


def test_hashseed_sweep_option_reruns_the_session_per_seed(pytester):
    pytester.makepyfile(
        test_hs="import os\n\ndef test_not_two():\n    assert os.environ['PYTHONHASHSEED'] != '2'\n"
    )
    lean = [
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:faker",
        "-p",
        "no:xdist",
    ]
    result = pytester.runpytest_subprocess(*lean, "--assert=plain", "--hashseed-sweep", "1-2")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "kvfault: PYTHONHASHSEED sweep over 1-2: python -m pytest *",
            "  PYTHONHASHSEED=1    passed   1 passed*",
            "  PYTHONHASHSEED=2    FAILED   1 failed*(test_hs.py::test_not_two)",
            "2 hash seeds: 1 passed, 1 failed (seeds 2);*",
        ]
    )
    assert "--hashseed-sweep" not in result.stdout.lines[0]


def test_plugin_import_pulls_in_no_torch_zmq_or_faker():
    code = (
        "import sys, kvfault.faults.pytest_plugin\n"
        "print(sorted(m for m in ('torch', 'zmq', 'faker') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_PROFILE_PROBE = """
from hypothesis import settings

def test_profile():
    print("max_examples", settings().max_examples, "derandomize", settings().derandomize)
"""


def test_the_plugin_loads_its_profiles_only_for_a_project_that_asks(pytester, monkeypatch):
    # In a subprocess each: hypothesis's loaded profile is process-wide.
    def run() -> pytest.RunResult:
        pytester.makepyfile(test_user=_PROFILE_PROBE)
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s")

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # hypothesis loads its own 'ci' profile (derandomize=True) when it sees a CI
    # variable; this test is about kvfault's choice, not the runner's, so hide them.
    from hypothesis._settings import _CI_VARS

    for var in _CI_VARS:
        monkeypatch.delenv(var, raising=False)
    # No kv_hypothesis_profile: HYPOTHESIS_PROFILE is not kvfault's to act on.
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    res = run()
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*max_examples 100 derandomize False*"])
    pytester.makeini("[pytest]\nkv_hypothesis_profile = dev\n")
    run().stdout.fnmatch_lines(["*max_examples 150 derandomize True*"])
    monkeypatch.delenv("HYPOTHESIS_PROFILE")
    run().stdout.fnmatch_lines(["*max_examples 12 *"])


_OWN_PROJECT = {
    "conftest.py": (
        "from hypothesis import settings\n"
        "settings.register_profile('ci', max_examples=7)\n"
        "settings.register_profile('mine', max_examples=3)\n"
        "import os\n"
        "settings.load_profile(os.environ.get('HYPOTHESIS_PROFILE', 'default'))\n"
    ),
    "test_own.py": (
        "from hypothesis import settings\n"
        "def test_profile():\n"
        "    print('max_examples', settings().max_examples)\n"
    ),
}


@pytest.mark.parametrize("profile, examples", [("default", 100), ("mine", 3), ("ci", 7)])
def test_another_projects_run_is_untouched_by_the_installed_plugin(tmp_path, profile, examples):
    """A project of its own, run as a user runs it (``python -m pytest`` with kvfault
    installed and its plugin loaded): its profiles, its HYPOTHESIS_PROFILE, its header."""
    import os
    import subprocess
    import sys

    for name, text in _OWN_PROJECT.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "HYPOTHESIS_PROFILE": profile, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "test_own.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"max_examples {examples}" in out.stdout
    assert "kvfault:" not in out.stdout  # no header line of ours
    # ... and the plugin was loaded in that run: its options are there.
    helped = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "--kv-seed" in helped.stdout


def test_an_unknown_hypothesis_profile_is_one_clear_line(pytester, monkeypatch):
    pytester.makeini("[pytest]\nkv_hypothesis_profile = dev\n")
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "weekly")
    res = _run(pytester, _PROFILE_PROBE)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*HYPOTHESIS_PROFILE='weekly' is not a kvfault profile*"])


def test_no_kvfault_line_for_a_call_no_command_reruns(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    source = """
        import pytest
        from kvfault.faults.catalog import UnknownName

        def test_x(kv_scenario):
            kv_scenario("two_images", properties=["correctness"])
            kv_scenario("real_restart_burst")
            with pytest.raises(UnknownName):
                kv_scenario("nope")
            assert False
        """
    result = _run(pytester, source)
    lines = [line for line in result.stdout.lines if line.startswith("scenario ")]
    assert lines == [
        "scenario two_images: no kvfault command runs the test's own choice of properties; "
        "the pytest line above reruns it",
        "scenario real_restart_burst: no kvfault command runs real_restart_burst in this "
        "process; the pytest line above reruns it",
    ], result.stdout.str()
