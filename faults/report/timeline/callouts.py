"""The boxed notes of a timeline panel: the stop's note (the error, its load, the clock
it counted against its limit, what the row shows), the note on the load that stopped the
other run, the band below the rows that holds them, and the stop's clock drawn on the
stopping load's row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvfault.faults.report.timeline.layout import _ROW_IN, _Layout
from kvfault.faults.report.timeline.model import short_op
from kvfault.faults.report.timeline.notes import _C, _diagnosis, _row_facts, clock_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes  # typed as Any: matplotlib is not followed


def _stop_note(lay: _Layout) -> str:
    """The boxed note of a stopped panel: the error, its op, the clock it counted (whose
    timer, from which event, against which limit) and what the row shows."""
    panel, stop = lay.panel, lay.panel.stop
    assert stop is not None
    # A judged run that passes and still stops made the stop it must (a lost completion).
    lines = [f"STOP  {stop.error}" + ("  (the stop this run must make)" if panel.ok else "")]
    if stop.op:
        lines.append(f"op {short_op(stop.op)}")
    if stop.elapsed is not None:
        clock = (
            f"{stop.elapsed:.1f} s counted from {stop.clock_from}"
            if stop.clock_from
            else f"after {stop.elapsed:.1f} s"
        )
        if stop.limit is not None:
            clock += f" > {stop.limit_name} {stop.limit:g} s"
        lines.append(clock)
    if not stop.op and stop.message:
        lines.append(stop.message[:100])
    row = next((r for r in reversed(panel.rows) if r.op == stop.op), None)
    if row is not None:
        lines.append(_row_facts(row, panel, stop.error))
        lines += _diagnosis(row, panel, stop)
    return "\n".join(lines)


def _other_note(lay: _Layout) -> tuple[str, tuple[float, float]] | None:
    """The boxed note on the load that stopped the other run, and where it points."""
    if lay.panel.stop is not None or lay.why != "other" or lay.focus not in lay.ypos:
        return None
    row = next(r for r in lay.shown if r.op == lay.focus)
    at = row.applied if row.applied is not None else lay.panel.end
    about = lay.other_error or ""
    text = f"the load that stopped legacy ({about}), here:\n{_row_facts(row, lay.panel, about)}"
    return text, (at, lay.ypos[row.op])


# A boxed note's line (8 pt type, matplotlib's 1.2 spacing, the box's padding) in rows.
_NOTE_LINE_ROWS = 8 * 1.2 / 72 / _ROW_IN


def _note_rows(lay: _Layout) -> float:
    """Rows of blank band below a panel's loads that hold its boxed note, so the note
    is drawn over no bar."""
    if lay.panel.stop is not None:
        text = _stop_note(lay) if lay.ypos.get(lay.panel.stop.op or "") is not None else ""
    else:
        note = _other_note(lay)
        text = note[0] if note else ""
    if not text:
        return 0.0
    return (text.count("\n") + 1) * _NOTE_LINE_ROWS + 1.6


def _draw_stop(ax: Axes, lay: _Layout, xlim: tuple[float, float], overview: bool) -> None:
    stop = lay.panel.stop
    assert stop is not None
    # Below the row markers: the bound restarts at the stop's instant must stay visible.
    ax.axvline(stop.t, color=_C["stop"], lw=1.5, zorder=4.5, alpha=0.8, gid="kv:stop")
    y = lay.ypos.get(stop.op or "")
    if not overview:
        ax.text(
            stop.t,
            -0.5,
            " STOP",
            fontsize=8,
            color=_C["stop"],
            fontweight="bold",
            va="bottom",
            ha="left",
            clip_on=True,
        )
        return
    text = _stop_note(lay)
    if y is None:
        ax.text(
            stop.t,
            0.5,
            text,
            fontsize=8,
            color=_C["stop"],
            ha="right",
            va="top",
            zorder=10,
            bbox={"boxstyle": "round", "fc": "white", "ec": _C["stop"], "lw": 1},
        )
        return
    if stop.elapsed is not None:
        # The clock the error counted, on the stopping load's row, against its limit:
        # the scheduler's bound above the row, the worker's deadline below it, each in
        # its owner's colour and named with the event it counted from.
        style = clock_style(stop)
        t_start = stop.t - stop.elapsed
        yc = y + style.side * 0.45
        ax.annotate(
            "",
            xy=(stop.t, yc),
            xytext=(t_start, yc),
            arrowprops={"arrowstyle": "<->", "color": style.color, "lw": 2.0},
            zorder=9,
        )
        ax.plot([t_start], [yc], marker=style.marker, color=style.color, ms=8, zorder=9.5,
                gid=f"kv:{style.label}")  # fmt: skip
        # Named in the legend, not on the rows: a label here would cover the next row.
        if stop.limit is not None:
            t_limit = t_start + stop.limit
            ax.plot([t_limit] * 2, [yc - 0.45, yc + 0.45], color=style.color, lw=1.5, zorder=9,
                    gid=f"kv:{style.label}")  # fmt: skip
    _callout(ax, text, (stop.t, y), xlim, _C["stop"], bold=True, y_text=lay.bottom + 0.3)


def _callout(
    ax: Axes,
    text: str,
    xy: tuple[float, float],
    xlim: tuple[float, float],
    color: str,
    bold: bool,
    y_text: float,
) -> None:
    """A boxed note pointing at ``xy``, on whichever side of it has more room, in the
    blank band below the panel's rows (``_note_rows``), so it covers no bar."""
    span = xlim[1] - xlim[0]
    right_half = xy[0] > xlim[0] + 0.5 * span
    x_text = xy[0] - 0.02 * span if right_half else xy[0] + 0.02 * span
    ax.annotate(
        text,
        xy=xy,
        xytext=(x_text, y_text),
        textcoords="data",
        ha="right" if right_half else "left",
        va="top",
        fontsize=8,
        color=color,
        fontweight="bold" if bold else "normal",
        zorder=10,
        bbox={"boxstyle": "round", "fc": "white", "ec": color, "lw": 1, "alpha": 0.95},
        arrowprops={"arrowstyle": "->", "color": color, "lw": 1},
    )
