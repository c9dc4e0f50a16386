"""The ``kvfault`` command line (faults/cli.py): run, list, repro, replay, argument errors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvfault.faults import SCENARIOS, cli
from kvfault.faults.atom.catalog import FAULTS as ATOM_FAULTS
from kvfault.faults.atom.catalog import ROWS as ATOM_ROWS
from kvfault.faults.errors import KvfaultError, UsageError
from kvfault.faults.injectors import INJECTORS
from kvfault.faults.lmcache.wire_faults import WIRE_FAULTS
from kvfault.faults.properties import PROPERTIES, Violation
from kvfault.faults.regressions import REGRESSIONS
from kvfault.faults.safe_io import NotARegularFile
from kvfault.faults.vllm.catalog import FAULTS as VLLM_FAULTS
from kvfault.faults.vllm.catalog import ROWS as VLLM_ROWS
from kvfault.reference import Rules


@pytest.fixture(autouse=True)
def _hash_seed_unpinned(monkeypatch):
    """tox pins a random PYTHONHASHSEED per env, and replay commands then carry it;
    these tests check the commands of an unpinned run."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


ROOT = Path(__file__).resolve().parents[2]


def kvfault(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- lazy imports ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import kvfault.faults.cli",
        "import kvfault.faults.cli; kvfault.faults.cli.build_parser()",
        "import kvfault.faults.sweep, kvfault.faults.fanout, kvfault.faults.campaign.xdist, kvfault.faults.pytest_plugin",
        "from kvfault.faults.cli import main; main(['list'])",
    ],
)
def test_the_cli_imports_no_torch_zmq_or_faker(code):
    """A sweep's child and `kvfault list` stay cheap, and a GPU host needs no zmq/faker."""
    probe = f"{code}\nimport sys\nprint('HEAVY', sorted(m for m in ('torch', 'zmq', 'faker') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.splitlines()[-1] == "HEAVY []"


# -- list --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, catalog",
    [
        ("--regressions", REGRESSIONS),
        ("--faults", {**INJECTORS, **WIRE_FAULTS, **ATOM_FAULTS, **VLLM_FAULTS}),
        # the real-tier scenarios register on import; the atom tier's rows are its own
        (
            "--scenarios",
            {
                **SCENARIOS,
                **{n: r for n, r in ATOM_ROWS.items() if r.kind == "scenario"},
                **{n: r for n, r in VLLM_ROWS.items() if r.kind == "scenario"},
            },
        ),
    ],
)
def test_list_one_section_prints_one_name_per_line_then_its_description(capsys, flag, catalog):
    assert cli.main(["list", flag]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(catalog)
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)  # a description follows


def test_list_shows_every_section(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for header in ("scenarios:", "properties:", "faults:", "regressions:"):
        assert header in out.splitlines()
    assert "  restart_numbering_in_hash_order" in out


# -- argument errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        ([], None),
        (
            ["run", "--seeds", "x"],
            "argument --seed-count/--seeds: a seed count wants a whole number, got 'x'",
        ),
        (
            ["run", "--seeds", "0"],
            "argument --seed-count/--seeds: a seed count must be at least 1, got 0",
        ),
        (
            ["run", "--fault", "slowforward"],
            "unknown fault 'slowforward' (did you mean: slow_forward?)",
        ),
        (["run", "--scenario", "nope"], "unknown scenario 'nope'; see `kvfault list`"),
        (
            ["run", "-n", "-1"],
            "argument -n/--numprocesses: wants a number of workers (0: none) or 'auto', got '-1'",
        ),
        (
            ["run", "--budget", "5x"],
            "argument --budget: wants a duration such as 30s, 5m, 2h or 1h30m, got '5x'",
        ),
        (["run", "--budget", "0s"], "argument --budget: wants a duration above zero, got '0s'"),
        (
            ["run", "--budget", "1m2h"],
            "argument --budget: wants a duration such as 30s, 5m, 2h or 1h30m, got '1m2h'",
        ),
        (
            ["run", "--tx", "bogus"],
            "argument --tx: bad gateway spec 'bogus'; write e.g. popen, 2*popen or ssh=HOST//python=python3",
        ),
        (["run", "-n", "2", "--tx", "popen"], "give -n or --tx, not both"),
        (
            ["run", "--tier", "lmcache", "--tx", "popen"],
            "--tier lmcache runs in one process: drop -n/--tx",
        ),
        (["sweep", "--tx", "popen", "-j", "2", "--", "x"], "give -j or --tx, not both"),
        (["run", "--bogus"], "unrecognized arguments: --bogus"),
        (
            ["run", "--seed", "5"],  # repro's spelling
            "ambiguous option: --seed could match --seed-count, --seeds; "
            "for one seed give --first-seed N --seeds 1",
        ),
        (
            ["run", "--legacy", "media_keys", "--legacy", "side_chain_seed"],
            "--legacy takes one value; given twice",
        ),
        (
            ["run", "--atom-src", "/tmp"],
            "--atom-src names the ATOM checkout of --tier atom; add --tier atom",
        ),
        (["repro"], "the following arguments are required: NAME"),
        (
            ["repro", "hash_order"],
            "unknown regression 'hash_order' (did you mean: restart_numbering_in_hash_order?)",
        ),
        (
            ["repro", "media_keys", "--seed", "-1"],
            "argument --seed: a seed must be at least 0, got -1",
        ),
        (["replay"], "the following arguments are required: ARTIFACT"),
        (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        code = cli.main(args)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    if message is None:
        return  # bare `kvfault` prints help
    assert err.count("\n") == 1 and err.startswith("kvfault: error: "), err
    assert message in err


class _OddError(KvfaultError):
    exit_code = 3  # not 2: shows main takes the error's own code


@pytest.mark.parametrize(
    "error, line, code",
    [
        (_OddError("a line of its own"), "kvfault: error: a line of its own\n", 3),
        (UsageError("bad input"), "kvfault: error: bad input\n", 2),
        (
            NotARegularFile(22, "a fifo, not a regular file", "/x/p"),
            "kvfault: error: /x/p: a fifo, not a regular file\n",
            2,
        ),
    ],
)
def test_an_error_of_kvfaults_own_is_one_line_and_its_exit_code(
    capsys, monkeypatch, error, line, code
):
    def command(args):
        raise error

    monkeypatch.setattr("kvfault.faults.commands.listing.command", command)
    assert cli.main(["list"]) == code
    assert capsys.readouterr().err == line


def test_an_error_raised_mid_campaign_leaves_no_hang_guard_armed(capsys, monkeypatch):
    from kvfault.faults.campaign import hang_guard

    def command(args):
        hang_guard.arm_hang_guard(300.0)  # as the in-process campaign does before a case
        raise UsageError("the tier went away")

    monkeypatch.setattr("kvfault.faults.commands.listing.command", command)
    try:
        assert cli.main(["list"]) == 2
        assert hang_guard._guard is None
    finally:
        hang_guard.disarm_hang_guard()
    assert capsys.readouterr().err == "kvfault: error: the tier went away\n"


def test_prove_is_wired_in(capsys):
    assert cli.main(["prove"]) == 2
    assert capsys.readouterr().err.startswith("kvfault prove: error: both --old REV and --new REV")


# -- run ------------------------------------------------------------------------------------


def test_run_a_selection_writes_the_report_and_leaves_no_artifacts(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = cli.main(
        ["run", "--seeds", "2", "--regression", "hybrid_last_chunk", "--scenario", "chunk_aligned_hybrid",
         "--report", "rep", "--no-progress"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    table = out.splitlines()
    assert table[0].split() == [
        "kind",
        "name",
        "scenario",
        "seeds",
        "props",
        "verdict",
        "sim",
        "s",
        "wall",
        "s",
        "detail",
    ]
    assert table[2].split()[:6] == [
        "regression",
        "hybrid_last_chunk",
        "chunk_aligned_hybrid",
        "0-1",
        "CKFLXROEUDH",
        "FIXED",
    ]
    assert "hybrid caught on 2/2 seeds" in table[2]
    assert table[3].split()[:6] == [
        "scenario",
        "chunk_aligned_hybrid",
        "chunk_aligned_hybrid",
        "0-1",
        "CKFLXROEUDH",
        "PASS",
    ]
    assert "2 targets, 4 runs: 2 ok, 0 failed" in out
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["meta"]["campaign"]["ok"] is True and summary["meta"]["seeds"] == [0, 1]
    assert (tmp_path / "rep" / "junit.xml").exists()
    assert not (tmp_path / "rep" / "artifacts").exists() and not (tmp_path / ".kvfault").exists()


def test_run_fails_when_a_fault_is_not_exercised_and_keeps_its_artifact(
    tmp_path, capsys, monkeypatch, unexercised_fault
):
    monkeypatch.chdir(tmp_path)
    args = ["run", "--seeds", "1", "--fault", "lost_completion", "--no-progress"]
    assert cli.main([*args, "--report", "rep"]) == 1
    out = capsys.readouterr().out
    assert "NOT EXERCISED fault:lost_completion@seed0: lost_completion never fired" in out
    assert "  replay: kvfault run --first-seed 0 --seeds 1 --fault lost_completion" in out
    artifact = Path("rep", "artifacts", "fault-lost_completion-seed0.json")
    assert f"  artifact: {artifact}" in out
    assert json.loads(artifact.read_text())["plan"]["faults"][0]["params"] == {"nth": [64]}
    (case,) = json.loads(Path("rep", "summary.json").read_text())["cases"]
    assert case["verdict"] == "NOT EXERCISED" and case["artifact"] == str(artifact)
    junit = Path("rep", "junit.xml").read_text()
    assert 'type="NOT EXERCISED"' in junit
    if case["timeline"] is not None:  # drawn where matplotlib is installed
        assert Path(case["timeline"]).exists()
    # without --report the artifact goes under .kvfault/ in the current directory
    assert cli.main(args) == 1
    assert Path(".kvfault", "artifacts", "fault-lost_completion-seed0.json").exists()


def test_a_green_run_removes_only_the_directories_it_created(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    artifacts = tmp_path / "empty" / "deep" / "artifacts"
    args = [
        "run",
        "--seeds",
        "1",
        "--regression",
        "hybrid_last_chunk",
        "--artifacts",
        str(artifacts),
    ]
    assert cli.main(args) == 0
    assert not (tmp_path / "empty" / "deep").exists() and (tmp_path / "empty").is_dir()


def test_run_fails_when_a_regression_is_not_caught(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    reg = REGRESSIONS["hybrid_last_chunk"]
    monkeypatch.setitem(REGRESSIONS, "hybrid_last_chunk", dataclasses.replace(reg, rules=Rules()))
    assert (
        cli.main(["run", "--seeds", "1", "--regression", "hybrid_last_chunk", "--no-progress"]) == 2
    )
    out = capsys.readouterr().out
    assert "NOT REPRODUCED" in out and "hybrid caught on 0/1 seeds" in out
    assert "NOT REPRODUCED regression:hybrid_last_chunk@seed0: legacy passed every property" in out


# -- repro and replay -------------------------------------------------------------------


def test_repro_prints_fixed_the_signature_and_the_replay_command(tmp_path, capsys):
    code = cli.main(["repro", "hybrid_last_chunk", "--artifacts", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("repro hybrid_last_chunk (seed 0): ")
    assert "FIXED: the legacy stack fails with hybrid, the fixed stack passes" in lines
    assert any(line.startswith("signature: hybrid: ") for line in lines)
    assert "replay: kvfault repro hybrid_last_chunk --seed 0" in lines
    artifact = tmp_path / "regression-hybrid_last_chunk-seed0.json"
    assert json.loads(artifact.read_text())["command"] == "kvfault repro hybrid_last_chunk --seed 0"

    assert cli.main(["replay", str(artifact)]) == 0  # the same verdict again
    again = capsys.readouterr().out.splitlines()
    assert again[: len(lines) - 1] == lines[:-1]


def test_repro_still_failing_exits_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(PROPERTIES, "hybrid", lambda run: [Violation("hybrid", "planted", t=0.5)])
    assert cli.main(["repro", "hybrid_last_chunk", "--artifacts", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "STILL FAILING: the fixed stack fails too" in out
    assert "signature: hybrid: planted at t=0.500s" in out


def test_repro_not_reproduced_exits_2(tmp_path, capsys, monkeypatch):
    reg = REGRESSIONS["hybrid_last_chunk"]
    monkeypatch.setitem(REGRESSIONS, "hybrid_last_chunk", dataclasses.replace(reg, rules=Rules()))
    assert cli.main(["repro", "hybrid_last_chunk", "--artifacts", str(tmp_path)]) == 2
    assert "NOT REPRODUCED: the legacy stack did not fail with hybrid" in capsys.readouterr().out


def test_repro_draws_a_timeline(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "t.svg"
    assert (
        cli.main(
            ["repro", "hybrid_last_chunk", "--artifacts", str(tmp_path), "--timeline", str(path)]
        )
        == 0
    )
    assert f"timeline: {path}" in capsys.readouterr().out
    assert path.read_text().lstrip().startswith("<?xml")


def test_replay_of_a_fault_case(tmp_path, capsys):
    from kvfault.faults.campaign import Case, fault_target
    from kvfault.faults.report import write_artifact

    path = write_artifact(Case(fault_target("fence_failure"), 1), tmp_path)
    assert cli.main(["replay", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "replay fault:fence_failure@seed1: restart_tier_kept under fence_failure"
    assert out[1].startswith("  fixed      PASS  every property held; fired fence_failure x")
    assert "replay: kvfault run --first-seed 1 --seeds 1 --fault fence_failure" in out


def test_a_replayed_plan_its_command_would_not_run_is_said(tmp_path, capsys):
    # An artifact replays the plan it records (an older kvfault may have drawn another);
    # its printed command draws today's: when the two differ, replay says so.
    from kvfault.faults.campaign import Case, fault_target
    from kvfault.faults.report import write_artifact

    path = write_artifact(Case(fault_target("fence_failure"), 1), tmp_path)
    note = "kvfault: note: the artifact's fault plan is not the one its target draws now"
    assert cli.main(["replay", str(path)]) == 0
    assert note not in capsys.readouterr().err
    obj = json.loads(path.read_text())
    obj["plan"]["faults"][0]["params"] = {"nth": [3]}  # the catalog says [2]
    path.write_text(json.dumps(obj))
    cli.main(["replay", str(path)])
    assert note in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "is not JSON (Expecting value at line 1)"),
        ("[1, 2]", "is not a kvfault replay artifact"),
        ('{"kvfault_artifact": 9}', "artifact version 9; this kvfault reads 1"),
        ('{"kvfault_artifact": 1, "seed": 0}', "a target is a JSON object"),
        (
            '{"kvfault_artifact": 1, "seed": true, "target": {}}',
            "'seed' must be a whole number from 0 to 4294967295, got True",
        ),
        (
            '{"kvfault_artifact": 1, "seed": 0, "target": {"kind": "regression", "name": "media_key"}}',
            "unknown regression 'media_key' (did you mean: media_keys?)",
        ),
        (
            '{"kvfault_artifact": 1, "seed": 0, "target": {"kind": "fault", "name": "slow_forward"},'
            ' "plan": {"seed": 0, "faults": [{"injector": "slow_forward", "params": {"forwards": 3}}]}}',
            "slow_forward: parameter 'forwards' must be",
        ),
        (  # a --legacy case whose stack was removed: it would replay on the fixed stack
            '{"kvfault_artifact": 1, "seed": 0, "case": "scenario:two_images-legacy-media_keys@seed0",'
            ' "target": {"kind": "scenario", "name": "two_images"}}',
            "'case' is 'scenario:two_images-legacy-media_keys@seed0' but its target and seed "
            "make 'scenario:two_images@seed0'",
        ),
        (
            '{"kvfault_artifact": 1, "seed": 0, "target": {"kind": "swarm", "name": "two_images",'
            ' "pinned": ["nope"]}}',
            "target 'pinned' names no injector: nope",
        ),
    ],
)
def test_a_malformed_artifact_is_one_clear_error(tmp_path, capsys, content, message):
    path = tmp_path / "a.json"
    path.write_text(content)
    assert cli.main(["replay", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"kvfault: error: {path}"), (
        captured.err
    )
    assert message in captured.err


def test_the_artifact_is_on_disk_before_a_hanging_case_and_the_hang_dumps_stacks(tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        import kvfault.faults.campaign.execute
        from kvfault.faults.cli import main

        def hang(*args, **kwargs):
            time.sleep(60)

        kvfault.faults.campaign.execute.run_case = hang
        main(["repro", "media_keys", "--artifacts", {str(tmp_path)!r}, "--timeout", "1"])
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 2  # a timeout is an ERROR
    assert "kvfault: error: timed out: a case ran past --timeout 1s" in proc.stderr
    assert "in hang" in proc.stderr  # the stack of the hanging frame
    artifact = json.loads((tmp_path / "regression-media_keys-seed0.json").read_text())
    # It records the bound the case ran past: its replay runs under it too.
    assert artifact["command"] == "kvfault repro media_keys --seed 0 --timeout 1"
    assert artifact["timeout_s"] == 1.0


def test_every_listed_name_runs_by_name_or_names_its_tier(capsys):
    # Each name `kvfault list` prints selects on the tiers it lists; on any other tier
    # `kvfault run` answers in one line which --tier it needs (it used to say "unknown").
    from kvfault.faults.campaign import select_targets
    from kvfault.faults.catalog import entries
    from kvfault.faults.tiers import Tiers

    # The tiers the one campaign runs (a tier with its own loop has its own list).
    on_campaign = list(Tiers.installed().names)  # every tier runs on the one campaign

    assert cli.main(["list"]) == 0
    listed = {
        line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")
    }
    flags = {"scenario": "scenarios", "fault": "faults", "regression": "regressions"}
    seen = set()
    for kind, flag in flags.items():
        for name, entry in entries(kind).items():
            seen.add(name)
            for tier in on_campaign:
                if tier in entry.tiers:
                    (t,) = select_targets(**{flag: [name]}, tier=tier)
                    assert (t.name, t.tier, t.scenario) == (name, tier, entry.scenarios[tier])
                    continue
                argv = ["run", f"--{kind}", name, "--no-progress"]
                argv += ["--tier", tier] if tier != "memory" else []
                assert cli.main(argv) == 2
                err = capsys.readouterr().err.strip()
                assert len(err.splitlines()) == 1 and f"--tier {entry.tiers[0]}" in err, err
    assert seen <= listed and {"real_restart_burst", "wire_kill"} <= seen


def test_list_with_a_tier_lists_only_what_runs_on_it(capsys):
    from kvfault.faults.catalog import entries

    assert cli.main(["list", "--tier", "lmcache"]) == 0
    out = capsys.readouterr().out
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    for kind in ("scenario", "fault", "regression"):
        for name, entry in entries(kind).items():
            assert (name in listed) == ("lmcache" in entry.tiers), name
    assert "real_restart_burst" in listed and "generated_dense" not in listed


def test_kvfault_without_a_command_says_so_in_one_line(capsys):
    assert cli.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("kvfault: error: give a command:") and "run" in line
