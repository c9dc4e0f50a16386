"""The atom tier's edges that need no ATOM checkout: finding the checkout, the CLI's
one-line refusals, the listing, and the one campaign's judge and reports over
hand-made runs (an executor that replays recorded events instead of starting ATOM)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import pytest
from answering_link import AnsweringLink
from atom_list import listed

import kvfault.faults.atom.executor
from kvfault.faults.atom import catalog
from kvfault.faults.atom.catalog import ServerFault
from kvfault.faults.atom.executor import count_firings
from kvfault.faults.atom.runs import result_of
from kvfault.faults.atom.source import ENV, AtomSource, AtomSourceMissing
from kvfault.faults.atom.spec import AtomRequest, RawEvent
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.campaign.kinds import fault_target, scenario_target
from kvfault.faults.cli import main
from kvfault.faults.provenance import checkout
from kvfault.faults.verdicts import Verdict
from kvfault.reference.types import Geometry

GEO = Geometry(block_size=16, chunk_size=64, prefill_budget=512)
REQS = [AtomRequest("a", tuple(range(3, 203)))]


class Recorded:
    """The atom tier's executor with the host's run replaced by recorded events: the
    fault's firings are counted from them as the real executor counts them."""

    tier = "atom"
    deterministic = False
    judged_by = None

    def __init__(self, events, hung=False):
        self.events, self.hung = events, hung

    def execute(self, scenario, ctx):
        faults = [i for i in ctx.injectors if isinstance(i, ServerFault)]
        names = tuple(f.name for f in faults)
        run = result_of(scenario, ctx.seed, self.events, 0.0, REQS, GEO, self.hung, None, names)
        count_firings(run, faults)
        return run, {"tier": "atom"}

    def case_done(self):
        pass


def _judged(target, events, hung=False):
    return CaseRunner(executor=Recorded(events, hung)).run(Case(target, 0))


def test_no_checkout_names_the_flag(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(AtomSourceMissing, match="--atom-src"):
        AtomSource.find(None)


def test_a_directory_without_atom_is_refused(tmp_path):
    with pytest.raises(AtomSourceMissing, match="not an ATOM checkout"):
        AtomSource.find(str(tmp_path))


def test_a_bad_checkout_is_named_as_the_user_gave_it(tmp_path, monkeypatch):
    # From the environment, the line names the variable, not a flag never given.
    monkeypatch.setenv(ENV, str(tmp_path))
    with pytest.raises(AtomSourceMissing, match=f"^{ENV}={tmp_path}: not an ATOM checkout"):
        AtomSource.find(None)
    with pytest.raises(AtomSourceMissing, match=f"^--atom-src {tmp_path}: not an ATOM checkout"):
        AtomSource.find(str(tmp_path))
    # An empty --atom-src is a mistake, not "use the environment's".
    with pytest.raises(AtomSourceMissing, match="^--atom-src: an empty path"):
        AtomSource.find("")


def test_a_checkout_is_found_from_the_environment(tmp_path, monkeypatch):
    (tmp_path / "atom/model_engine").mkdir(parents=True)
    (tmp_path / "atom/model_engine/scheduler.py").write_text("")
    (tmp_path / "atom/kv_transfer/offload").mkdir(parents=True)
    monkeypatch.setenv(ENV, str(tmp_path))
    assert AtomSource.find(None).path == tmp_path.resolve()


def test_run_without_checkout_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.delenv(ENV, raising=False)
    assert main(["run", "--tier", "atom"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--atom-src" in err[0]


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--regression", "media_keys"], "runs with --tier memory"),
        (["--swarm"], "--swarm"),
        (["-j", "2"], "-j"),
        (["--scale", "2"], "--scale"),
        (["--scenario", "no_such_row"], "unknown scenario 'no_such_row'"),
        (["--property", "speed"], "--property 'speed' is no property"),
        (["--scenario", "restart", "--property", "efficiency"], "restart is not judged by it"),
        (["--scenario", "two_images"], "the picture rows are two_images_partial"),
        (["--scenario", "two_images_hbm"], "the fake forward folded the picture"),
        (["--atom-tp", "3"], "--atom-tp takes 1 or 2"),
        (["--atom-tp", "two"], "--atom-tp takes 1 or 2"),
        (["--atom-pp", "4"], "--atom-pp takes 1 or 2"),
    ],
)
def test_run_refuses_what_the_tier_does_not_take(flags, words, tmp_path, capsys):
    (tmp_path / "atom/model_engine").mkdir(parents=True)
    (tmp_path / "atom/model_engine/scheduler.py").write_text("")
    (tmp_path / "atom/kv_transfer/offload").mkdir(parents=True)
    assert main(["run", "--tier", "atom", "--atom-src", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_list_names_every_row_and_why_the_rest_does_not_run(capsys):
    assert main(["list", "--tier", "atom"]) == 0
    out = capsys.readouterr().out
    for name in catalog.ROWS:
        assert f"  {name}  " in out
    assert "not on --tier atom:" in out and "regressions:" in out
    assert "two_images, two_images_hbm (multimodal prefix sharing): withdrawn" in out
    assert not set(catalog.DROPPED) & set(catalog.ROWS)


def test_list_shows_what_each_row_runs_against_atoms_defaults(capsys):
    assert main(["list", "--tier", "atom"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("every row runs, unless its own line says otherwise: ")
    assert "TP 1" in lines[0] and "lmcache chunk 64 (ATOM: 256)" in lines[0]
    runs = listed(lines, 1, "runs")
    assert sorted(runs) == sorted(catalog.ROWS)
    assert "lmcache chunk 256 (= ATOM's)" in runs["resend_at_defaults"]
    assert "KV dtype fp8 (ATOM: bf16)" in runs["shared_tier_kv_dtype"].split("; B: ")[1]
    assert runs["hbm_pressure"] == "runs: A: HBM blocks 40"
    assert runs["concurrent_loads"].endswith("; 3 schedules a case")
    assert runs["tp2_prefix_reuse"].startswith("runs: A: TP 2 (ATOM: 1), ")
    assert "faults on TP rank 1 only" in runs["tp2_rank1_late_load"]
    assert "TP" not in runs["prefix_reuse"]  # TP 1 is ATOM's default: not a difference


def test_list_compares_a_hybrid_row_with_atoms_defaults_for_deepseek_v4(capsys):
    # ATOM forces a 256-token block for every DeepSeek-V4 model, picks the FP8 indexer
    # when an offload connector is configured, and checkpoints every 8192 tokens.
    assert main(["list", "--tier", "atom"]) == 0
    runs = listed(capsys.readouterr().out.splitlines(), 1, "runs")
    hybrid = [name for name in catalog.ROWS if name.startswith("dsv4_")]
    assert hybrid
    for name in hybrid:
        line = runs[name]
        assert "block size 256 (= ATOM's)" in line and "(ATOM: 16)" not in line, line
        assert "indexer fp8 (= ATOM's with offload on; without it ATOM's is fp4" in line, line
        assert "state checkpoint every 256 tokens (ATOM: 8192)" in line, line
    assert "indexer" not in runs["prefix_reuse"] and "checkpoint" not in runs["prefix_reuse"]


def test_each_row_of_the_long_matrix_names_a_default_row_of_its_class():
    for name, stands_in in catalog.LONG_MATRIX.items():
        assert name in catalog.ROWS, name
        assert stands_in in catalog.ROWS and stands_in not in catalog.LONG_MATRIX, name


def test_a_run_of_every_row_leaves_the_long_matrix_out_unless_full():
    from kvfault.faults.campaign import select_targets

    default = [t.name for t in select_targets(tier="atom")]
    assert sorted(default) == sorted(set(catalog.ROWS) - set(catalog.LONG_MATRIX))
    assert sorted(t.name for t in select_targets(tier="atom", full=True)) == sorted(catalog.ROWS)
    for name in catalog.LONG_MATRIX:  # named, a row of the long matrix runs
        kind = catalog.ROWS[name].kind
        (t,) = select_targets(**{f"{kind}s": [name]}, tier="atom")
        assert t.name == name


def test_a_run_of_every_row_says_what_full_adds_and_no_other_run_does():
    from argparse import Namespace

    from kvfault.faults.commands.run import _left_out_line

    ran = type("Result", (), {"targets": [object()] * 3})()
    plain = {"tier": "atom", "full": False, "regression": None, "fault": None, "scenario": None}
    assert _left_out_line(Namespace(**plain), ran) == (
        f"default set: 3 rows; --full also runs the {len(catalog.LONG_MATRIX)} rows of the "
        "long matrix (kvfault list --tier atom says which)"
    )
    assert _left_out_line(Namespace(**{**plain, "full": True}), ran) is None
    assert _left_out_line(Namespace(**{**plain, "scenario": ["restart"]}), ran) is None
    assert _left_out_line(Namespace(**{**plain, "tier": "memory"}), ran) is None


def test_list_says_which_set_each_row_is_in(capsys):
    assert main(["list", "--tier", "atom"]) == 0
    lines = capsys.readouterr().out.splitlines()
    sets = listed(lines, 2, "set")
    assert sorted(sets) == sorted(catalog.ROWS)
    for name, said in sets.items():
        stands_in = catalog.LONG_MATRIX.get(name)
        want = f"full (by default its class runs as {stands_in})" if stands_in else "default"
        assert said == f"set: {want}", name
    default = len(catalog.ROWS) - len(catalog.LONG_MATRIX)
    assert f"sets: {default} rows run by default, {len(catalog.LONG_MATRIX)} more" in lines[1]


def _sizes_set(size: str) -> list[int]:
    """``size`` (``tp_size`` or ``pp_size``) of the servers a run given ``size=2``
    starts: one the story leaves unset, then one whose story asks for 1."""
    from kvfault.faults.atom.scenarios import AtomRun

    specs: list = []
    host = type("Host", (), {"start": lambda self, spec: specs.append(spec)})()
    run = AtomRun(host, 0, **{size: 2})  # type: ignore[arg-type]  # records specs only
    run.server("A")
    run.server("B", **{size: 1})
    return [getattr(s, size) for s in specs]


def test_atom_tp_sets_every_server_a_story_leaves_unset():
    assert _sizes_set("tp_size") == [2, 1]  # a story's own TP size wins


def test_atom_pp_sets_every_server_a_story_leaves_unset():
    from kvfault.faults.atom.row_config import servers

    assert _sizes_set("pp_size") == [2, 1]  # a story's own pipeline size wins
    # Rows whose story pins one stage: ATOM's DSV4 connector refuses PP > 1, and its
    # runner defers output with one stage only.
    for name in ("dsv4_prefix_reuse", "hbm_partial_deferred", "slow_retrieve", "tp4_prefix_reuse"):
        assert [s.pp_size for s in servers(catalog.ROWS[name], pp_size=2)] == [1], name
    # The finding's TP server stays TP 2 x PP 1 (one world size with the PP server's).
    tp_pp = servers(catalog.ROWS["shared_tier_tp_pp"], pp_size=2)
    assert [(s.tp_size, s.pp_size) for s in tp_pp] == [(2, 1), (1, 2)]
    assert [s.pp_size for s in servers(catalog.ROWS["prefix_reuse"], pp_size=2)] == [2]


def test_a_rows_servers_come_from_its_own_story():
    from kvfault.faults.atom.row_config import servers

    specs = servers(catalog.ROWS["hash_order_shuffle"])
    assert [(s.name, s.scheduler_hash_seed, s.worker_hash_seed) for s in specs] == [("A", 0, 1)]
    assert [s.name for s in servers(catalog.ROWS["restart"])] == ["A"]


def test_list_of_the_atom_tier_takes_tiers_as_the_others_do(capsys):
    assert main(["list", "--tier", "atom", "--tiers"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "tiers:" and any(line.startswith("  atom  ") for line in out), out
    assert not any(line.startswith("scenarios") for line in out), out


def _run(events, faults=(), hung=False):
    reqs = [AtomRequest("a", tuple(range(3, 203)))]
    return result_of("reuse_once", 0, events, 0.0, reqs, GEO, hung, None, faults)


def _ev(t, kind, **data):
    return RawEvent(t, 0, kind, None, data.pop("req_id", None), data)


def test_a_fault_that_never_fired_is_not_exercised_and_one_that_did_passes():
    from kvfault.fakes.model import DeterministicModel
    from kvfault.faults.campaign.outcomes import TargetOutcome
    from kvfault.reference.types import Request

    target = fault_target("retrieve_failure", "atom")
    cold = DeterministicModel("dense", GEO).cold_output(
        Request("a", tuple(range(3, 203)), max_output_tokens=4)
    )
    answered = [_ev(1.0, "output", req_id="a", tokens=list(cold))]
    out = _judged(target, answered)
    assert out.verdict == Verdict.NOT_EXERCISED and "retrieve_failure never fired" in out.signature
    fired = answered + [_ev(0.5, "fault", injector="retrieve_failure", call=1)]
    out = _judged(target, fired)
    assert out.verdict == Verdict.PASS and out.fired == {"retrieve_failure": 1}
    assert TargetOutcome(target, [out]).detail() == "fired retrieve_failure x1"
    wrong = [_ev(1.0, "output", req_id="a", tokens=[c ^ 1 for c in cold])]
    out = _judged(target, wrong + fired[1:])
    assert out.verdict == Verdict.FAIL
    assert out.signature.startswith("correctness: output of a differs"), out.signature


def test_a_hung_run_fails_liveness_and_a_shared_socket_fails_identity():
    binds = [
        _ev(1.0, "bind", server="A", path="engine_x"),
        _ev(2.0, "bind", server="B", path="engine_x"),
    ]
    out = _judged(scenario_target("two_servers", "atom"), binds)
    assert out.verdict == Verdict.FAIL and out.signature.startswith("identity: B binds engine_x")
    out = _judged(scenario_target("prefix_reuse", "atom"), [], hung=True)
    assert out.verdict == Verdict.FAIL
    assert any(v.prop == "liveness" for v in out.violations)


def test_events_of_all_processes_are_merged_in_time_order():
    run = _run([_ev(3.0, "arrive", req_id="a"), _ev(1.0, "bind", server="A", path="p")])
    assert [e.kind.value for e in run.trace.events] == ["bind", "arrive"]
    assert run.trace.events[0].t == 1.0


def test_run_goes_through_the_one_loop_with_report_budget_and_artifacts(
    tmp_path, monkeypatch, capsys
):
    # `kvfault run --tier atom` runs on the one session loop: --report writes the atom
    # rows into summary.json and junit.xml, --budget cuts the seeds, a failing case
    # leaves its replay artifact, the tier's options reach its opener. (Before, --report
    # and --budget were refused in one line.)
    import kvfault.faults.atom.executor

    opened = []
    shared = [_ev(1.0, "bind", server="A", path="x"), _ev(2.0, "bind", server="B", path="x")]

    class Slow(Recorded):
        def execute(self, scenario, ctx):
            time.sleep(1.05)  # past the budget: no second seed may start
            return super().execute(scenario, ctx)

    @contextlib.contextmanager
    def recorded(atom_src=None, property=None, **_other_options):
        opened.append((atom_src, property))
        yield Slow(shared)

    monkeypatch.setattr(kvfault.faults.atom.executor, "atom_executor", recorded)
    report = tmp_path / "report"
    argv = ["run", "--tier", "atom", "--atom-src", "/somewhere", "--scenario", "two_servers",
            "--seeds", "3", "--budget", "1s", "--report", str(report), "--no-progress"]  # fmt: skip
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert opened == [("/somewhere", None)]
    assert "budget 1s: 1 of 3 seeds ran (0)" in out, out
    summary = json.loads((report / "summary.json").read_text())
    (case,) = summary["cases"]
    assert case["id"] == "atom:scenario:two_servers@seed0" and case["verdict"] == "FAIL"
    assert summary["meta"]["seeds_ran"] == 1 and summary["meta"]["seeds_requested"] == 3
    assert "two_servers" in (report / "junit.xml").read_text()
    artifact = json.loads(
        (report / "artifacts" / "atom-scenario-two_servers-seed0.json").read_text()
    )
    assert artifact["target"]["tier"] == "atom"
    # The replay command repeats the tier's own options as given: without --atom-src it
    # would stop at "no ATOM checkout" wherever KVFAULT_ATOM_SRC is not set.
    replay = "kvfault run --tier atom --first-seed 0 --seeds 1 --atom-src /somewhere"
    # ... and names the code it ran (here no git checkout), after a shell comment mark.
    pinned = " --scenario two_servers  # ATOM no git commit"
    assert artifact["command"].endswith(replay + pinned), artifact["command"]
    assert replay in out and artifact["command"].endswith(case["command"])


def test_property_narrows_what_the_case_is_judged_by():
    # Judged by `resources` alone, the shared socket (an identity failure) passes.
    binds = [
        _ev(1.0, "bind", server="A", path="engine_x"),
        _ev(2.0, "bind", server="B", path="engine_x"),
    ]
    executor = Recorded(binds)
    executor.judged_by = ("resources",)
    out = CaseRunner(executor=executor).run(Case(scenario_target("two_servers", "atom"), 0))
    assert out.checked == ["resources"] and out.verdict == Verdict.PASS, out.signature


def test_property_narrows_each_row_to_the_named_properties():
    from kvfault.faults.atom.command import judged_by

    rows = catalog.rows(["reload_twice", "two_servers"])
    narrowed = judged_by(rows, ["resources", "correctness"])
    assert [r.properties for r in narrowed] == [("correctness", "resources")] * 2
    assert [r.name for r in narrowed] == ["reload_twice", "two_servers"]


def test_property_is_refused_on_the_other_tiers_in_one_line(capsys):
    assert main(["run", "--property", "resources"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "kvfault: error: --property is for --tier atom; the other tiers judge every property"
    ]


def test_a_lookup_pin_left_at_quiescence_fails_resources():
    from kvfault.faults.properties.ledger import resources

    def run(pins):
        held = {"hbm_blocks": 0, "loads": 0, "lookup_pins": pins}
        events = [RawEvent(1.0, 1, "quiescent", None, None, {"engine": "A", **held})]
        return result_of("reload_twice", 0, events, 0.0, [], GEO, False, None)

    assert resources(run(0)) == []
    (v,) = resources(run(1))
    assert v.message == "A quiescent but still holds lookup_pins=1"


def test_a_request_the_client_aborted_is_not_waited_for_and_any_other_is():
    from kvfault.faults.properties.checks import correctness

    requests = [AtomRequest("kept", tuple(range(3, 203))), AtomRequest("gone", (5, 6, 7))]

    def unanswered(*events):
        run = result_of("reuse_after_abort", 0, list(events), 0.0, requests, GEO, False, None)
        return sorted(v.message for v in correctness(run))

    both = unanswered()
    assert both == ["2 requests never answered, e.g. gone"]
    aborted = _ev(0.5, "fault", req_id="gone", injector="abort_during_load", aborted=True)
    assert unanswered(aborted) == ["1 requests never answered, e.g. kept"]
    # A fault event on a request that does not say it was aborted excuses nothing.
    other = _ev(0.5, "fault", req_id="gone", injector="slow_retrieve")
    assert unanswered(other) == both


def test_reported_cached_tokens_must_cover_the_prefix_loaded_from_the_tier():
    from kvfault.faults.properties.checks import correctness, usage

    reqs = [AtomRequest("a", tuple(range(3, 203)))]

    def reported(cached, outcome="finished"):
        op = ("a", 0, "load")
        events = [
            RawEvent(0.1, 1, "dispatch", op, "a", {"start": 0, "kv_end": 192, "claim": 192}),
            RawEvent(0.2, 2, "completion_applied", op, "a", {"outcome": outcome}),
            RawEvent(0.3, 3, "output", None, "a", {"tokens": [], "cached": cached}),
        ]
        run = result_of("prefix_reuse", 0, events, 0.0, reqs, GEO, False, None)
        assert not [v for v in correctness(run) if "usage" in v.message]  # its own property
        return [f"{v.prop}: {v.message}" for v in usage(run)]

    assert reported(192) == [] and reported(200) == []
    assert reported(0) == [
        "usage: usage of a reports 0 cached tokens, not the 192 it loaded from the tier"
    ]
    assert reported(0, outcome="failed") == []  # nothing was loaded


def _refusing_story(run):
    from kvfault.faults.atom.host import ServerRefused

    raise ServerRefused(
        "A: ValueError: LMCACHE_LOCAL_DISK is set but LMCACHE_MAX_LOCAL_DISK_SIZE must be > 0",
        error="ValueError",
    )


@pytest.mark.parametrize(
    "scenario, verdict",
    [("disk_without_size", Verdict.PASS), ("disk_spill", Verdict.ERROR)],
)
def test_a_refusal_to_start_is_judged_only_where_the_row_expects_one(
    scenario, verdict, monkeypatch
):
    # The real executor on a host whose server refuses (no ATOM needed: the story
    # raises what the host raises when a server's worker refused to start). Where the
    # row expects to run, a refusal proves nothing (an ATOM the tier cannot drive):
    # ERROR, never FAIL, or ``kvfault prove`` could call such a commit FIXED.
    from dataclasses import replace

    from kvfault.faults.atom.executor import AtomExecutor
    from kvfault.faults.atom.host import ZygotePool

    monkeypatch.setitem(
        catalog.SCENARIOS, scenario, replace(catalog.SCENARIOS[scenario], story=_refusing_story)
    )
    pool = ZygotePool("/nonexistent")  # a zygote starts only when a server does
    out = CaseRunner(executor=AtomExecutor(pool)).run(Case(scenario_target(scenario, "atom"), 0))
    assert out.verdict == verdict, (out.signature, out.error)
    said = out.stop if verdict == Verdict.PASS else out.error
    assert said is not None and "ValueError: LMCACHE_LOCAL_DISK" in said, (out.stop, out.error)


def test_each_server_start_draws_its_own_instance_token_and_a_dp_replica_shares_it():
    # The token of finding 4's fix (the fixed ATOM's Config.instance_id): drawn once
    # per start, as a server's main process builds its Config; one server's DP ranks
    # share it; a restart (a new main process) draws another. Both servers at 8006.
    from kvfault.faults.atom.host import AtomHost, ZygotePool
    from kvfault.faults.atom.server_config import atom_config
    from kvfault.faults.atom.spec import ServerSpec

    host = AtomHost(ZygotePool("/nonexistent"))
    try:
        a, b = ServerSpec("A"), ServerSpec("B")
        ta, tb = host._instance_id(a), host._instance_id(b)
        assert len(ta) == len(tb) == 12 and ta != tb and a.port == b.port == 8006
        assert host._instance_id(ServerSpec("B1", dp_rank=1, replica_of="B")) == tb
        assert host._instance_id(a) not in (ta, tb)  # A restarted
        with pytest.raises(ValueError, match="replica of 'C', not started"):
            host._instance_id(ServerSpec("C1", dp_rank=1, replica_of="C"))
    finally:
        host.close()
    assert atom_config(a, instance_id=ta).instance_id == ta
    assert atom_config(a).instance_id == ""  # ATOM's main reads no such field


def test_the_lmcache_environment_is_the_spec_s_and_only_the_spec_s(tmp_path, monkeypatch):
    from kvfault.faults.atom.server_config import lmcache_env, use_lmcache_env
    from kvfault.faults.atom.spec import ServerSpec

    monkeypatch.setenv("LMCACHE_REMOTE_URL", "lm://elsewhere:1")  # the user's own
    monkeypatch.setenv("LMCACHE_MAX_LOCAL_DISK_SIZE", "5")
    base = lmcache_env(ServerSpec("A"), str(tmp_path))
    assert "LMCACHE_LOCAL_DISK" not in base and "LMCACHE_MAX_LOCAL_DISK_SIZE" not in base
    # lmcache's metrics files go to the host's directory, not /tmp/lmcache_prometheus
    assert base["PROMETHEUS_MULTIPROC_DIR"] == f"{tmp_path}/prometheus"
    unsized = ServerSpec("A", local_disk=True)
    use_lmcache_env(unsized, str(tmp_path))
    import os

    assert os.environ["LMCACHE_LOCAL_DISK"] == f"file://{tmp_path}/disk-A/"
    assert "LMCACHE_MAX_LOCAL_DISK_SIZE" not in os.environ
    assert "LMCACHE_REMOTE_URL" not in os.environ
    sized = lmcache_env(ServerSpec("A", local_disk=True, disk_size_gib=0.5), str(tmp_path))
    assert sized["LMCACHE_MAX_LOCAL_DISK_SIZE"] == "0.5"


def _engine_holding(*answers: int | None) -> AnsweringLink:
    """A worker link whose lmcache engine holds ``answers`` tokens, one per call (the
    last one from then on)."""
    return AnsweringLink("stored_tokens", *answers)


@pytest.mark.parametrize(
    "answers, landed, calls",
    [
        pytest.param((192,), True, 1, id="stored-already"),
        pytest.param((0, 0, 192), True, 3, id="lands-while-waiting"),
        pytest.param((64,), False, None, id="never-whole-bounded"),
        pytest.param((None,), False, 1, id="engine-cannot-say"),
    ],
)
def test_waiting_for_a_save_to_land_is_bounded_and_says_whether_it_did(answers, landed, calls):
    from types import SimpleNamespace

    from kvfault.faults.atom.scheduler import SchedulerProcess

    side = SimpleNamespace(link=_engine_holding(*answers))
    # A chunk that never lands ends the wait at its bound (0.2 s), with False.
    assert SchedulerProcess.wait_stored(side, list(range(200)), 192, 0.2) is landed  # type: ignore[arg-type]
    if calls is not None:
        assert side.link.calls == calls
    else:
        assert side.link.calls > 1  # it kept asking until the bound


@pytest.mark.parametrize(
    "ranks, landed",
    [
        pytest.param(((192,), (192,)), True, id="both-ranks-hold"),
        pytest.param(((192,), (64,)), False, id="rank-1-short"),
        pytest.param(((192,), (None,)), False, id="rank-1-cannot-say"),
    ],
)
def test_a_tp_server_has_stored_a_prompt_when_every_rank_holds_it(ranks, landed):
    from types import SimpleNamespace

    from kvfault.faults.atom.scheduler import SchedulerProcess, WorkerRanks

    side = SimpleNamespace(link=WorkerRanks([_engine_holding(*a) for a in ranks]))  # type: ignore[list-item]
    assert SchedulerProcess.wait_stored(side, list(range(200)), 192, 0.1) is landed  # type: ignore[arg-type]


def test_worker_ranks_share_a_deadline_and_hang_as_one():
    from kvfault.faults.atom.event_log import EventLog
    from kvfault.faults.atom.scheduler import WorkerHung, WorkerLink, WorkerRanks

    links = [WorkerLink(None, EventLog()), WorkerLink(None, EventLog())]
    ranks = WorkerRanks(links)
    ranks.deadline = 5.0
    assert [link.deadline for link in links] == [5.0, 5.0]
    assert ranks.hung is None
    links[1].hung = WorkerHung("forward", 1.0, [])
    assert ranks.hung is links[1].hung  # rank 1 hung: the server's worker side has
    with pytest.raises(ValueError):
        WorkerRanks([])


def test_a_tp_forward_samples_the_ranks_common_token_else_another():
    from kvfault.faults.atom.scheduler import tp_tokens

    assert tp_tokens([[5, 7]]) == [5, 7]
    assert tp_tokens([[5, 7], [5, 7]]) == [5, 7]
    mixed = tp_tokens([[5, 7], [5, 9]])
    assert mixed[0] == 5
    assert mixed[1] not in (7, 9)  # a rank over a wrong shard changes the answer
    assert mixed == tp_tokens([[5, 7], [5, 9]])  # the same in every process


def test_a_tp_rank_outside_its_world_is_refused():
    from kvfault.faults.atom import boundary

    with pytest.raises(ValueError):
        boundary.set_tp_rank(2, 2)


# --------------------------------------------------------------------------------------
# Issue 34, item 8: a replay is pinned to the code it ran. The artifact and the replay
# line record the engine checkout's absolute path, its commit and whether its tree was
# dirty; no random campaign PYTHONHASHSEED where the row's seed is the one that matters
# (the atom tier's servers take it); a replay against other code says so before it runs;
# the atom tier's replay names ATOM, not kvfault's "fixed" stack.

SHARED = [_ev(1.0, "bind", server="A", path="x"), _ev(2.0, "bind", server="B", path="x")]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
         "-c", "commit.gpgsign=false", *args],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture
def atom_checkout(tmp_path, monkeypatch) -> Path:
    repo = tmp_path / "ATOM"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "scheduler.py").write_text("v1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")

    @contextlib.contextmanager
    def recorded(atom_src=None, property=None, **_other_options):
        yield Recorded(SHARED)

    monkeypatch.setattr(kvfault.faults.atom.executor, "atom_executor", recorded)
    monkeypatch.delenv("KVFAULT_ATOM_SRC", raising=False)
    monkeypatch.setenv("PYTHONHASHSEED", "1234")  # a campaign's random one
    checkout.cache_clear()
    return repo


def run_here(report: Path, *extra: str) -> int:
    return main(["run", "--tier", "atom", "--scenario", "two_servers", "--report", str(report),
                 "--no-progress", *extra])  # fmt: skip


def artifact(report: Path) -> dict:
    return json.loads((report / "artifacts" / "atom-scenario-two_servers-seed0.json").read_text())


def test_the_artifact_and_replay_line_pin_path_commit_dirty_and_the_rows_hash_seed(
    atom_checkout, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(atom_checkout)
    sha = git(atom_checkout, "rev-parse", "HEAD")
    assert run_here(tmp_path / "r", "--atom-src", ".") == 1
    out = capsys.readouterr().out
    art = artifact(tmp_path / "r")
    where = str(atom_checkout.resolve())
    assert art["target"]["options"] == ["--atom-src", where]  # not "." as typed
    assert art["code"] == {"engine": "ATOM", "path": where, "commit": sha, "dirty": False}
    assert art["pythonhashseed"] is None  # the servers run under the row's seed
    assert not art["command"].startswith("PYTHONHASHSEED")
    assert art["command"].endswith(
        f"--atom-src {where} --scenario two_servers  # ATOM {sha[:12]} (clean)"
    )
    assert f"replay: {art['command']}" in out
    assert f"code: ATOM {sha[:12]} (clean) at {where}" in out


def test_a_checkout_named_only_by_the_environment_is_written_out(
    atom_checkout, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("KVFAULT_ATOM_SRC", str(atom_checkout))
    (atom_checkout / "scheduler.py").write_text("edited\n")
    checkout.cache_clear()
    assert run_here(tmp_path / "r") == 1
    art = artifact(tmp_path / "r")
    assert art["target"]["options"] == ["--atom-src", str(atom_checkout.resolve())]
    assert art["code"]["dirty"] is True and art["command"].endswith("(dirty tree)")


def test_a_replay_against_other_code_says_so_before_it_runs_and_names_atom(
    atom_checkout, tmp_path, capsys
):
    assert run_here(tmp_path / "r", "--atom-src", str(atom_checkout)) == 1
    old = git(atom_checkout, "rev-parse", "HEAD")
    capsys.readouterr()
    path = tmp_path / "r" / "artifacts" / "atom-scenario-two_servers-seed0.json"
    assert main(["replay", str(path)]) == 1
    same = capsys.readouterr()
    assert "other code" not in same.err
    assert "  ATOM       FAIL" in same.out and "fixed" not in same.out, same.out

    (atom_checkout / "scheduler.py").write_text("v2\n")
    git(atom_checkout, "commit", "-q", "-am", "two")
    checkout.cache_clear()
    new = git(atom_checkout, "rev-parse", "HEAD")
    assert main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert (
        f"kvfault: note: this replay runs other code than the artifact's case: recorded at "
        f"ATOM {old[:12]} (clean) at {atom_checkout.resolve()}, this run has ATOM {new[:12]} (clean)"
    ) in err, err


def test_an_artifact_whose_code_is_malformed_is_one_line(atom_checkout, tmp_path, capsys):
    assert run_here(tmp_path / "r", "--atom-src", str(atom_checkout)) == 1
    path = tmp_path / "r" / "artifacts" / "atom-scenario-two_servers-seed0.json"
    obj = json.loads(path.read_text())
    obj["code"]["commit"] = "not hex"
    path.write_text(json.dumps(obj))
    capsys.readouterr()
    assert main(["replay", str(path)]) == 2
    assert "'code' commit must be null or a hex commit id" in capsys.readouterr().err


def test_pins_below_zero_counts_force_unpinned_chunks_unpinned_again():
    from types import SimpleNamespace

    from kvfault.faults.atom.spec import FaultSpec
    from kvfault.faults.atom.worker_faults import WorkerFaults

    faults = WorkerFaults.__new__(WorkerFaults)
    faults.spec, faults.forced = FaultSpec(), []
    assert faults.below_zero_pins() is None  # no pin timeout: the record leaves it out
    faults.spec = FaultSpec(pin_timeout_s=1)
    faults.forced = [SimpleNamespace(meta=SimpleNamespace(pin_count=n)) for n in (0, -1, 1)]
    assert faults.below_zero_pins() == 1


def test_a_store_failure_on_one_rank_explains_that_ranks_load_failure():
    """At TP 2 the worker that answers lookups (rank 0) stored the prompt and reports
    the save finished with its 192 tokens; rank 1's store failed (an injected fault
    naming the save ``unstored``), so rank 1's retrieve of the prompt returns 0 and
    ATOM fails the load. The fault explains that failure, whichever of the fault and
    the report the trace has first; without the fault it is unexplained."""
    from kvfault.faults.properties.ledger import efficiency, load_failures

    save, load = ("a", 0, "save"), ("a", 1, "load")
    data = {"injector": "store_failure", "call": 1, "unstored": True, "rank": 1}
    events = [
        RawEvent(1.0, 0, "save", save, "a", {"start": 0, "end": 192}),
        RawEvent(1.1, 0, "finished_reported", save, "a", {"outcome": "finished", "stored": 192}),
        RawEvent(2.0, 1, "dispatch", load, "a", {"start": 0, "kv_end": 192, "claim": 192}),
        RawEvent(2.1, 1, "retrieve_terminal", load, "a",
                 {"ok": True, "error": None, "retrieved": 192, "asked": 192}),
        RawEvent(2.1, 1, "retrieve_terminal", load, "a",
                 {"ok": False, "error": "lmcache returned 0 of 192", "retrieved": 0,
                  "asked": 192, "rank": 1}),
    ]  # fmt: skip
    unexplained = load_failures(_run(events))
    assert [v.prop for v in unexplained] == ["load_failures"], unexplained
    for t in (1.05, 1.15):  # the fault before the save's report, and after it
        run = _run([*events, RawEvent(t, 0, "fault", save, "a", data)])
        assert load_failures(run) == [] and efficiency(run) == [], t


def test_a_store_failure_explains_one_failed_load_of_its_chunks_not_every_later_one():
    """ATOM learns from a failed load that the tier lacks the chunks (its load_failed
    lowers the save floor so the recompute saves them again). A later load of them,
    dispatched after that failure, that fails again with no save of them since is
    unexplained; one with a save of them in between, or one already in flight when the
    first failed, is not."""
    from kvfault.faults.properties.ledger import load_failures

    save, load, later = ("a", 0, "save"), ("a", 1, "load"), ("a", 2, "load")
    fault = {"injector": "store_failure", "call": 1, "unstored": True, "rank": 1}
    ok = {"ok": True, "error": None, "retrieved": 192, "asked": 192}
    miss = {"ok": False, "error": "lmcache returned 0 of 192", "retrieved": 0, "asked": 192,
            "rank": 1}  # fmt: skip
    first = [
        RawEvent(1.0, 0, "save", save, "a", {"start": 0, "end": 192}),
        RawEvent(1.05, 0, "fault", save, "a", fault),
        RawEvent(1.1, 0, "finished_reported", save, "a", {"outcome": "finished", "stored": 192}),
        RawEvent(2.0, 1, "dispatch", load, "a", {"start": 0, "kv_end": 192, "claim": 192}),
        RawEvent(2.1, 1, "retrieve_terminal", load, "a", ok),
        RawEvent(2.1, 1, "retrieve_terminal", load, "a", miss),
    ]

    def again(at: float) -> list[RawEvent]:
        return [
            RawEvent(at, 2, "dispatch", later, "a", {"start": 0, "kv_end": 192, "claim": 192}),
            RawEvent(at + 0.1, 2, "retrieve_terminal", later, "a", ok),
            RawEvent(at + 0.1, 2, "retrieve_terminal", later, "a", miss),
        ]

    assert load_failures(_run(first)) == []
    found = load_failures(_run([*first, *again(3.0)]))
    assert [(v.prop, v.op) for v in found] == [("load_failures", "load:a#2")], found
    assert "after an earlier load of them had failed" in found[0].message
    resaved = [
        RawEvent(2.5, 1, "save", ("a", 1, "save"), "a", {"start": 0, "end": 192}),
        RawEvent(2.6, 1, "finished_reported", ("a", 1, "save"), "a",
                 {"outcome": "finished", "stored": 192}),
    ]  # fmt: skip
    # Saved again in between, the later load's failure is the plain rule's: the tier
    # holds the chunks for sure.
    found = load_failures(_run([*first, *resaved, *again(3.0)]))
    assert [v.message.startswith("a load of data the tier holds failed") for v in found] == [True]
    # In flight before the first failure ended: the stack could not know yet.
    assert load_failures(_run([*first, *again(2.05)])) == []


def test_a_server_that_died_names_its_error_in_the_case_record():
    # ATOM's worker raised in a forward: the host records a stop event naming no
    # operation (AtomHost.note_death) and no engine stop exists. The case's `stop` (and
    # so summary.json and the row's detail) names the error; before, it was null and
    # the detail said only "never answered".
    died = RawEvent(
        1.0, -1, "stop", None, None,
        {"error": "ValueError", "message": "A: the forward raised ValueError: boom", "server": "A"},
    )  # fmt: skip
    out = _judged(scenario_target("picture_resend", "atom"), [died])
    assert out.verdict == Verdict.FAIL
    assert out.stop == "ValueError: A: the forward raised ValueError: boom"
    assert out.as_json()["stop"] == out.stop
    assert out.signature.endswith("; stop: ValueError: A: the forward raised ValueError: boom")
