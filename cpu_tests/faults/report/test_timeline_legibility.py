"""Issue 24, item 6: every regression's timeline picture passes the legibility check
(kvfault.faults.report.timeline.legibility: no text over text or over bars, every row labelled,
one meaning per colour), and the check catches each kind of problem."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from kvfault.faults.campaign import Case, CaseRunner, regression_target  # noqa: E402
from kvfault.faults.regressions.legacy import REGRESSIONS  # noqa: E402
from kvfault.faults.report.timeline import draw  # noqa: E402
from kvfault.faults.report.timeline.legibility import problems  # noqa: E402


def _figure(name: str):  # type: ignore[no-untyped-def]
    o = CaseRunner(keep_runs="all").run(Case(regression_target(name), 0))
    return draw.timeline_figure(o.legacy_result, o.fixed_result, title=f"{o.case.id}: {o.verdict}")


@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_every_regression_timeline_is_legible(name):
    plt, fig = _figure(name)
    try:
        assert problems(fig) == []
    finally:
        plt.close(fig)


def test_the_check_sees_text_over_text_and_over_bars():
    plt, fig = _figure("load_bound_without_restart")
    try:
        ax = fig.axes[0]
        title = ax.title
        ax.text(*title.get_position(), "over the title", transform=title.get_transform())
        y = ax.get_yticks()[1]
        ax.text(sum(ax.get_xlim()) / 2, y, "over the rows", fontsize=9)
        found = problems(fig)
        assert any("overlaps text" in p for p in found), found
        assert any("'over the rows' is drawn over a bar" in p for p in found), found
    finally:
        plt.close(fig)


def test_the_check_sees_an_unlabelled_row(monkeypatch):
    from kvfault.faults.report.timeline import panel

    real = panel._y_labels

    def fewer(ax, lay):  # type: ignore[no-untyped-def]
        real(ax, lay)
        labels = [t.get_text() for t in ax.get_yticklabels()]
        ax.set_yticks(list(ax.get_yticks())[:-1])  # drop the last row's label
        ax.set_yticklabels(labels[:-1])

    monkeypatch.setattr(panel, "_y_labels", fewer)
    plt, fig = _figure("media_keys")
    try:
        assert any("has no label" in p for p in problems(fig))
    finally:
        plt.close(fig)


def test_the_check_sees_a_colour_with_two_meanings(monkeypatch):
    from kvfault.faults.report.timeline import notes

    # The bound's clock drawn in the bound restarts' purple, as it used to be.
    monkeypatch.setitem(notes._C, "bound_clock", notes._C["restart"])
    plt, fig = _figure("load_bound_without_restart")
    try:
        found = problems(fig)
        assert any(p.startswith(f"colour {notes._C['restart']} means 2 things") for p in found), (
            found
        )
    finally:
        plt.close(fig)
