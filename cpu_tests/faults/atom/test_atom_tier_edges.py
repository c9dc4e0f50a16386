"""The atom tier's edges that need no ATOM checkout: finding the checkout, the CLI's
one-line refusals, the listing, and the judge over hand-made runs."""

from __future__ import annotations

import pytest

from faults.atom import catalog
from faults.atom.campaign import judge, table
from faults.atom.runs import result_of
from faults.atom.source import ENV, AtomSource, AtomSourceMissing
from faults.atom.spec import AtomRequest, RawEvent
from faults.cli import main
from faults.verdicts import Verdict
from reference.types import Geometry

GEO = Geometry(block_size=16, chunk_size=64, prefill_budget=512)


def test_no_checkout_names_the_flag(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(AtomSourceMissing, match="--atom-src"):
        AtomSource.find(None)


def test_a_directory_without_atom_is_refused(tmp_path):
    with pytest.raises(AtomSourceMissing, match="not an ATOM checkout"):
        AtomSource.find(str(tmp_path))


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
        (["--regression", "media_keys"], "regressions"),
        (["--swarm"], "--swarm"),
        (["-j", "2"], "-j"),
        (["--scale", "2"], "--scale"),
        (["--scenario", "no_such_row"], "unknown atom row"),
        (["--property", "speed"], "--property 'speed' is no property"),
        (["--scenario", "restart", "--property", "efficiency"], "restart is not judged by it"),
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


def _run(events, faults=(), hung=False):
    reqs = [AtomRequest("a", tuple(range(3, 203)))]
    return result_of("reuse_once", 0, events, 0.0, reqs, GEO, hung, None, faults)


def _ev(t, kind, **data):
    return RawEvent(t, 0, kind, None, data.pop("req_id", None), data)


def test_a_fault_that_never_fired_is_not_exercised_and_one_that_did_passes():
    from fakes.model import DeterministicModel
    from reference.types import Request

    row = catalog.ROWS["retrieve_failure"]
    cold = DeterministicModel("dense", GEO).cold_output(
        Request("a", tuple(range(3, 203)), max_output_tokens=4)
    )
    answered = [_ev(1.0, "output", req_id="a", tokens=list(cold))]
    verdict, detail, _ = judge(row, _run(answered, row.fires))
    assert verdict is Verdict.NOT_EXERCISED and "retrieve_failure" in detail
    fired = answered + [_ev(0.5, "fault", injector="retrieve_failure", call=1)]
    verdict, detail, _ = judge(row, _run(fired, row.fires))
    assert verdict is Verdict.PASS and detail == "fired retrieve_failure x1"
    wrong = [_ev(1.0, "output", req_id="a", tokens=[c ^ 1 for c in cold])]
    verdict, detail, _ = judge(row, _run(wrong, row.fires))
    assert verdict is Verdict.FAIL and detail.startswith("correctness: output of a differs")


def test_a_hung_run_fails_liveness_and_a_shared_socket_fails_identity():
    row = catalog.ROWS["two_servers"]
    binds = [
        _ev(1.0, "bind", server="A", path="engine_x"),
        _ev(2.0, "bind", server="B", path="engine_x"),
    ]
    verdict, detail, _ = judge(row, _run(binds))
    assert verdict is Verdict.FAIL and detail.startswith("identity: B binds engine_x")
    verdict, detail, violations = judge(catalog.ROWS["prefix_reuse"], _run([], hung=True))
    assert verdict is Verdict.FAIL
    assert any(v.prop == "liveness" for v in violations)


def test_events_of_all_processes_are_merged_in_time_order():
    run = _run([_ev(3.0, "arrive", req_id="a"), _ev(1.0, "bind", server="A", path="p")])
    assert [e.kind.value for e in run.trace.events] == ["bind", "arrive"]
    assert run.trace.events[0].t == 1.0


def test_the_table_has_one_line_per_row():
    from faults.atom.campaign import RowOutcome, SeedOutcome

    outs = [RowOutcome(catalog.ROWS["two_servers"], [SeedOutcome(0, Verdict.FAIL, "identity: x")])]
    text = table(outs, [0])
    assert "two_servers" in text and "FAIL" in text and "identity: x" in text


def test_property_narrows_each_row_to_the_named_properties():
    from faults.atom.command import judged_by

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
    from faults.properties.ledger import resources

    def run(pins):
        held = {"hbm_blocks": 0, "loads": 0, "lookup_pins": pins}
        events = [RawEvent(1.0, 1, "quiescent", None, None, {"engine": "A", **held})]
        return result_of("reload_twice", 0, events, 0.0, [], GEO, False, None)

    assert resources(run(0)) == []
    (v,) = resources(run(1))
    assert v.message == "A quiescent but still holds lookup_pins=1"
