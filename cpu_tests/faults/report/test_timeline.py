"""Timeline pictures (faults/report/timeline/): the data each panel draws, and the files."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvfault.faults.campaign import run_case
from kvfault.faults.regressions import REGRESSIONS
from kvfault.faults.report.timeline import load_rows, panel_of, short_op, write_timeline
from kvfault.faults.report.timeline.notes import _diagnosis

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_rows_tell_why_the_legacy_bound_stopped(bound_pair):
    legacy, fixed = bound_pair
    assert legacy.violations and not fixed.violations
    lp, fp = panel_of(legacy, "legacy"), panel_of(fixed, "fixed")
    assert len(lp.rows) == len(fp.rows) == 64
    assert [r.rank for r in lp.rows] == list(range(1, 65))
    stop = lp.stop
    assert stop is not None and stop.error == "LoadNotTerminal" and stop.op
    assert stop.limit == 40.0 and stop.limit_name == "load bound"
    assert stop.clock_from == "dispatch"  # never restarted: the bound counted from dispatch
    row = next(r for r in lp.rows if r.op == stop.op)
    assert row.restarts == [] and row.applied is None
    assert stop.t - row.dispatched == pytest.approx(stop.elapsed)
    assert any(
        "not restarted when the loads before it finished" in line
        for line in _diagnosis(row, lp, stop)
    )
    # The same load in the fixed run: restarted by the loads ahead of it, then finished.
    same = next(r for r in fp.rows if r.op == stop.op)
    assert same.restarts and same.applied is not None and fp.stop is None
    assert lp.verdict.startswith("FAIL [no_false_stop]") and fp.verdict.startswith("PASS")
    # Forwards include the 29 s compile marked as an injected slow forward.
    assert any(b - a == pytest.approx(29.0) and label for a, b, label in fp.forwards)


def test_restart_all_clock_runs_from_a_later_loads_restart(restart_all_pair):
    legacy, fixed = restart_all_pair
    lp = panel_of(legacy, "legacy")
    stop = lp.stop
    assert stop is not None and stop.clock_from == "its last bound restart"
    row = next(r for r in lp.rows if r.op == stop.op)
    assert any(name == "lost_completion" for _, name in row.faults)
    assert any("dispatched after it" in line for line in _diagnosis(row, lp, stop))
    fp = panel_of(fixed, "fixed")
    assert fp.stop is not None and fp.ok is True  # stopping is right when a completion is lost
    assert fp.stop.t < stop.t


def test_png_of_a_failing_legacy_and_fixed_pair(bound_pair, tmp_path: Path):
    pytest.importorskip("matplotlib")
    legacy, fixed = bound_pair
    # 16 rows a panel keeps the test quick; the folding of the other 48 is drawn too.
    out = write_timeline(
        legacy,
        fixed,
        tmp_path / "bound.png",
        title="load_bound_without_restart",
        max_rows=16,
    )
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 30_000  # two panels, a zoom and a legend: not a blank canvas


def test_svg_parses_and_names_the_stop(restart_all_pair, tmp_path: Path):
    pytest.importorskip("matplotlib")
    legacy, _ = restart_all_pair
    # One panel (the other is None) and few rows: the cheap path through the drawing code.
    out = write_timeline(legacy.run, None, tmp_path / "legacy.svg", max_rows=6)
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    text = out.read_text()
    assert "LoadNotTerminal" in text and "STOP" in text


def test_bad_arguments(tmp_path: Path, bound_pair):
    with pytest.raises(ValueError, match="at least one run"):
        write_timeline(None, None, tmp_path / "x.png")
    with pytest.raises(ValueError, match="max_rows"):
        write_timeline(bound_pair[0], None, tmp_path / "x.png", max_rows=2)
    with pytest.raises(TypeError, match="RunResult"):
        write_timeline(object(), None, tmp_path / "x.png")


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path: Path, bound_pair):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    with pytest.raises(ImportError, match=r"pip install '\.\[plot\]'"):
        write_timeline(bound_pair[0], None, tmp_path / "x.png")


def test_runs_without_loads_or_with_a_startup_stop():
    reg = REGRESSIONS["engine_id_without_port"]
    run = run_case(reg.scenario, 0, reg.rules, properties=[reg.signature])
    panel = panel_of(run, "legacy")
    assert panel.ok is False and panel.note  # the identity violation heads the panel
    assert all(r.rank == i + 1 for i, r in enumerate(load_rows(run.run)))


def test_short_op():
    assert (
        short_op("load:chatcmpl-e9abfb0d-9be5-4401-bb33-241efa2225d7-burst#3")
        == "chatcmpl-e9abfb0d…burst#3"
    )
    assert short_op("load:req-1#2") == "req-1#2"
