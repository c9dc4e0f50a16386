"""What the timeline pictures show (issue 12, item 13): runs of identical loads fold into
one row with a count; one y-axis label that overlaps nothing; a hybrid's claim drawn
against the joint boundary on a token axis; the bound and the deadline drawn as
different clocks (whose timer, from which event)."""

from __future__ import annotations

import pytest

from kvfault.faults.report.timeline import (
    clock_style,
    collapse_rows,
    hybrid_claims,
    panel_of,
    write_timeline,
)


def test_identical_loads_fold_into_one_row_with_a_count(bound_pair, tmp_path):
    legacy = panel_of(bound_pair[0], "legacy")
    span = legacy.end - legacy.start
    groups = collapse_rows(legacy.rows, span / 400, keep=legacy.stop.op)
    # 64 loads: two restored, the stopping one alone, and 61 that never got a copy.
    assert [len(g) for g in groups] == [2, 1, 1, 60]
    assert [r.op for g in groups for r in g] == [r.op for r in legacy.rows]  # order kept
    assert any(len(g) == 1 and g[0].op == legacy.stop.op for g in groups)
    pytest.importorskip("matplotlib")
    svg = write_timeline(*bound_pair, tmp_path / "b.svg").read_text()
    assert "loads 5–64 (×60)" in svg


def test_rows_that_differ_stay_apart(bound_pair):
    legacy = panel_of(bound_pair[0], "legacy")
    # Identical times still fold; without a row to keep, the stopping load joins its twin.
    assert [len(g) for g in collapse_rows(legacy.rows, 1e-9)] == [2, 2, 60]
    fixed = panel_of(bound_pair[1], "fixed")
    assert len(collapse_rows(fixed.rows, 1e-6)) > 30  # copies 23 ms apart do not


def test_one_y_axis_label_that_overlaps_nothing(hybrid_pair, tmp_path, monkeypatch):
    """On a small picture (one load a panel) the y labels must not run into each other."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    write_timeline(*hybrid_pair, tmp_path / "small.png")
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    labels = [ax.yaxis.label for ax in fig.axes if ax.yaxis.label.get_text()]
    labels += [t for t in fig.texts if t.get_rotation() == 90 and t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert boxes, "no y-axis label at all"
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    ticks = [
        t.get_window_extent(renderer)
        for ax in fig.axes
        for t in ax.get_yticklabels()
        if t.get_text()
    ]
    assert not any(a.overlaps(b) for a in boxes for b in ticks)
    plt.close("all")


def test_a_hybrid_claim_is_drawn_against_the_joint_boundary(hybrid_pair, tmp_path):
    legacy, fixed = hybrid_pair
    (lc,) = hybrid_claims(legacy, "legacy")
    (fc,) = hybrid_claims(fixed, "fixed")
    assert (lc.prompt_len, lc.kv_hit, lc.claim, lc.joint, lc.chunk) == (2048, 2048, 1792, 1920, 256)
    assert fc.claim == fc.joint == 1920
    pytest.importorskip("matplotlib")
    svg = write_timeline(legacy, fixed, tmp_path / "h.svg").read_text()
    for text in (
        "legacy claims 1792 of 2048: loses 128 tokens",
        "fixed claims 1920 of 2048: = the boundary",
        "joint boundary 1920",
        "tokens (grid: 256-token chunks)",
    ):
        assert text in svg


def test_no_token_axis_when_every_claim_is_the_boundary(bound_pair, tmp_path):
    claims = hybrid_claims(bound_pair[0])
    assert len(claims) == 64 and all(c.claim == c.joint for c in claims)
    pytest.importorskip("matplotlib")
    assert "token axis" not in write_timeline(*bound_pair, tmp_path / "b.svg").read_text()


def test_the_bound_and_the_deadline_are_different_clocks(bound_pair, deadline_pair, tmp_path):
    bound = panel_of(bound_pair[0], "legacy").stop
    deadline = panel_of(deadline_pair[0], "legacy").stop
    # The same load stops at the same instant after the same 50 s in both...
    assert (bound.op, bound.t, bound.elapsed) == (deadline.op, deadline.t, deadline.elapsed)
    b, d = clock_style(bound), clock_style(deadline)
    # ...but whose timer ran out, and from which event, is drawn differently.
    assert b.label == "scheduler's load bound 40 s, counted from dispatch"
    assert d.label == "worker's transfer deadline 30 s, counted from retrieve submission"
    assert b.color != d.color and b.side != d.side and b.marker != d.marker
    pytest.importorskip("matplotlib")
    assert b.label in write_timeline(*bound_pair, tmp_path / "b.svg").read_text()
    assert d.label in write_timeline(*deadline_pair, tmp_path / "d.svg").read_text()
