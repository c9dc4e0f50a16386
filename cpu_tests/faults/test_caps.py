"""Issue 24, item 4: every numeric option has a cap or a one-line refusal, and an option
that would have no effect where it is given is refused in one line, not ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvfault.faults import cli
from kvfault.faults.campaign import Case, fault_target, regression_target
from kvfault.faults.campaign.artifacts import ArtifactError, read_artifact, write_artifact


def one_line(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        code = cli.main(argv)
        raise SystemExit(code)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvfault: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "--tx", "99999*popen"], "at most 256 gateways, got '99999*popen'"),
        (["run", "--tx", "popen", "--tx", "200*popen", "--tx", "100*popen"], "--tx starts 301 gateways in all; at most 256"),
        (["run", "-n", "100000"], "at most 256 workers, got 100000"),
        (["sweep", "-j", "999", "--", "-q"], "at most 256 workers"),
        (["run", "--tx", ""], "bad gateway spec '': empty"),
        (["run", "--tx", "   "], "bad gateway spec '   ': empty"),
        (["run", "--rsyncdir", "x"], "--rsyncdir sends a directory to --tx gateways; give --tx too"),
        (["run", "-n", "2", "--rsyncdir", "x"], "--rsyncdir sends a directory to --tx gateways"),
        (["run", "--tier", "atom", "--rsyncdir", "x"], "--rsyncdir sends a directory to --tx gateways"),
        (["sweep", "--rsyncdir", "x", "--", "-q"], "--rsyncdir sends a directory to --tx gateways"),
        (["run", "--swarm", "--pin", ",,,"], "argument --pin: wants comma-separated names, e.g. a,b; got ',,,'"),
        (["run", "--scenario", "two_dp_ranks", "--scale", "16"], "--scale 16 changes nothing here: two_dp_ranks has a fixed size"),
        (["run", "--budget", "-5s"], "argument --budget: wants a duration such as 30s"),
        (["run", "--budget", "-5"], "argument --budget: wants a duration such as 30s"),
        (["run", "--budget", "0"], "argument --budget: wants a duration above zero"),
        (["run", "--timeout", "-1"], "argument --timeout: --timeout (seconds, 0: none) must be at least 0"),
        (["run", "--first-seed", "-3"], "argument --first-seed: a seed must be at least 0, got -3"),
        (["prove", "--old", "a", "--new", "b", "--repeat", "100000", "--", "true"], "argument --repeat: --repeat must be at most 1000"),
        (["prove", "--old", "a", "--new", "b", "--tail", "-1", "--", "true"], "argument --tail: --tail must be at least 0"),
        (["prove", "--old", "a", "--new", "b", "--timeout", "inf", "--", "true"], "argument --timeout: --timeout (seconds, 0: none) must be at most"),
        (["prove", "--old", "a", "--new", "b", "--timeout", "nan", "--", "true"], "argument --timeout: --timeout (seconds, 0: none) wants a number"),
    ],
)  # fmt: skip
def test_refused_in_one_line(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    line = one_line(capsys, argv)
    assert needle in line, line


def test_budget_with_and_without_a_unit_parse_alike(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Both spellings reach --budget's own type: the same message for both negatives.
    a = one_line(capsys, ["run", "--budget", "-5s"])
    b = one_line(capsys, ["run", "--budget=-5s"])
    assert a == b
    from kvfault.faults.argtypes import duration

    assert duration("5") == duration("5s") == 5.0


def test_scale_applies_where_it_grows_and_labels_only_those(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--scenario", "two_dp_ranks", "--scenario", "small_restart_burst",
                     "--scale", "2", "--seeds", "1", "-j", "1", "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    names = [ln.split("  ")[1].strip() for ln in out.splitlines() if ln.startswith("scenario ")]
    assert names == ["two_dp_ranks", "small_restart_burst x2"], out


def test_n_is_capped_at_the_work_there_is(monkeypatch):
    seen = {}

    def fake_fan_out(task, items, *, workers=None, **kw):  # type: ignore[no-untyped-def]
        seen["workers"], seen["items"] = workers, len(items)
        return [], ""

    monkeypatch.setattr("kvfault.faults.campaign.xdist.fan_out", fake_fan_out)
    from kvfault.faults.campaign.session import run_session
    from kvfault.faults.campaign.xdist import Xdist

    run_session([regression_target("media_keys")], [0, 1], Xdist(workers="64"))
    assert seen == {"workers": "2", "items": 2}


def test_timeline_never_creates_a_missing_directory(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    where = tmp_path / "nonexistent" / "dir" / "t.png"
    line = one_line(capsys, ["repro", "media_keys", "--timeline", str(where)])
    assert line == (f"kvfault: error: --timeline {where}: directory {where.parent} does not exist")
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("field, value", [("seed", 5), ("scale", 4)])
def test_an_artifact_whose_plan_disagrees_with_its_case_is_refused(tmp_path, field, value):
    path = write_artifact(Case(fault_target("fence_failure"), 1), tmp_path)
    obj = json.loads(path.read_text())
    obj["plan"][field] = value
    path.write_text(json.dumps(obj))
    with pytest.raises(ArtifactError, match="an artifact is replayed as written or not at all"):
        read_artifact(path)


def test_an_artifact_whose_plan_agrees_is_read(tmp_path):
    path = write_artifact(Case(fault_target("fence_failure"), 1), tmp_path)
    case, _ = read_artifact(Path(path))
    assert case.seed == 1
