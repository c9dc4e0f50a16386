"""Drawing a timeline picture with matplotlib (the ``plot`` extra), imported only when
``write_timeline`` runs: importing this module does not import matplotlib.

This module lays out the figure (its panels, the zoom column, the token axis, the
legend) and writes it; each panel is drawn by ``panel``, its boxed notes by
``callouts``, the token axis of hybrid hits by ``claims``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvfault.faults.report.timeline.callouts import _note_rows
from kvfault.faults.report.timeline.claims import _draw_claims
from kvfault.faults.report.timeline.layout import _ROW_IN, _detail_window, _Layout, _layout
from kvfault.faults.report.timeline.model import PLOT_HINT, hybrid_claims, panel_of, picture_format
from kvfault.faults.report.timeline.notes import _C, clock_style
from kvfault.faults.report.timeline.panel import _draw_panel


def _import_pyplot() -> Any:  # matplotlib.pyplot
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"timeline pictures need matplotlib; {PLOT_HINT}") from None
    matplotlib.use("Agg", force=True)  # files only; never open a window in CI
    import matplotlib.pyplot as plt

    return plt


def write_timeline(
    legacy: Any,
    fixed: Any,
    path: str | Path,
    title: str = "",
    max_rows: int = 48,
) -> Path:
    """Draw the legacy run above the fixed run on one time axis and write ``path``.

    ``legacy`` and ``fixed`` are ``RunResult``s, ``JudgedRun``s (then each panel is
    headed PASS/FAIL with its first violated property and message) or ``None`` (that
    panel is left out; at least one is needed). When the decisive moment crowds many
    events into a sliver of the axis, a zoom column on the right shows it. The path's
    extension names the format (``FORMATS``: .png, .svg, .pdf, .jpg); any other is a
    ``ValueError`` before anything is drawn. Returns the path written. Raises
    ``ImportError`` naming the plot extra when matplotlib is missing, and ``OSError``
    when the file cannot be written (its directory must exist).
    """
    fmt = picture_format(path)
    plt, fig = timeline_figure(legacy, fixed, title, max_rows)
    import io

    from kvfault.faults.safe_io import write_atomic

    path = Path(path)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt, dpi=110)
    finally:
        plt.close(fig)
    # Whole or not at all, never through a link planted at the path; the directory must
    # exist (a missing one is a typo, not a request to create it).
    return write_atomic(path, buf.getvalue())


def timeline_figure(legacy: Any, fixed: Any, title: str = "", max_rows: int = 48) -> Any:
    """``(pyplot, figure)`` of ``write_timeline``'s picture, not yet written (the caller
    closes it): for checks that look at the drawn artists
    (``kvfault.faults.report.timeline.legibility``)."""
    if legacy is None and fixed is None:
        raise ValueError("write_timeline needs at least one run (legacy or fixed)")
    if max_rows < 4:
        raise ValueError(f"max_rows must be at least 4, got {max_rows}")
    leg = panel_of(legacy, "legacy") if legacy is not None else None
    fix = panel_of(fixed, "fixed") if fixed is not None else None
    panels = [p for p in (leg, fix) if p is not None]
    t0 = min(p.start for p in panels)
    t1 = max(p.end for p in panels)
    span = max(t1 - t0, 1e-3)
    xlim = (t0 - 0.03 * span, t1 + 0.03 * span)
    detail = _detail_window(panels, xlim)
    # Rows fold when they look alike on the overview (about a pixel apart); the zoom
    # then shows one row per folded group, still in dispatch order.
    quantum = (xlim[1] - xlim[0]) / 400
    layouts = [
        _layout(p, o, max_rows, quantum) for p, o in ((leg, fix), (fix, leg)) if p is not None
    ]
    plt = _import_pyplot()

    # The token axis shows the requests whose claim missed the joint boundary in
    # either run (both runs' claims for each), so a picture without a hybrid fault
    # gets none.
    claims = [c for p, r in (("legacy", legacy), ("fixed", fixed)) if r is not None
              for c in hybrid_claims(r, p)]  # fmt: skip
    missed = {c.req_id for c in claims if c.claim != c.joint}
    claims = [c for c in claims if c.req_id in missed][:_MAX_TOKEN_ROWS]
    axes, token_ax = _figure(plt, layouts, detail is not None, bool(title), len(claims))
    fig = axes[0][0].figure
    if token_ax is not None:
        _draw_claims(token_ax, claims)
    for i, lay in enumerate(layouts):
        _draw_panel(axes[i][0], lay, xlim, overview=True)
        if detail:
            _draw_panel(axes[i][1], lay, detail, overview=False)
    axes[-1][0].set_xlabel("time (simulated seconds)")
    axes[-1][0].set_xlim(*xlim)
    if detail:
        axes[0][1].set_title(
            f"zoom: t = {detail[0]:.2f} .. {detail[1]:.2f} s",
            loc="left",
            fontsize=9,
            color=_C["muted"],
        )
        axes[-1][1].set_xlabel("time (simulated seconds), zoomed")
        axes[-1][1].set_xlim(*detail)
        for i in range(len(layouts)):
            axes[i][0].axvspan(*detail, color="#000000", alpha=0.06, lw=0, zorder=0,
                               gid="kv:the zoomed window")  # fmt: skip

    # One y-axis label for all panels, centred on them: one per panel overlapped its
    # neighbour's on short panels.
    lows = [ax.get_position().y0 for row in axes for ax in row]
    highs = [ax.get_position().y1 for row in axes for ax in row]
    fig.text(
        0.012,
        (min(lows) + max(highs)) / 2,
        "loads, in dispatch order",
        rotation=90,
        va="center",
        ha="left",
        fontsize=8,
        gid="ylabel",
    )
    fig.legend(
        handles=_legend_handles() + _clock_handles(layouts),
        loc="lower center",
        ncol=6,
        fontsize=8,
        frameon=False,
    )
    if title:
        fig.suptitle(
            title, fontsize=12, fontweight="bold", y=1 - 0.12 / fig.get_figheight(), va="top"
        )
    return plt, fig


# Fixed margins in inches instead of tight_layout: it draws the whole figure once more
# just to measure it, which doubles the cost of a picture.
# The left margin holds the longest row label (a shortened request id, bold) beside the
# shared y-axis title.
_LEFT_IN, _RIGHT_IN, _COL_GAP_IN = 2.5, 0.3, 0.15
_TOP_IN, _SUPTITLE_IN, _PANEL_TITLE_IN, _BOTTOM_IN = 0.15, 0.45, 0.55, 1.2
_TOKEN_ROW_IN, _TOKEN_GAP_IN = 0.5, 0.55
_MAX_TOKEN_ROWS = 8


def _figure(
    plt: Any, layouts: list[_Layout], detail: bool, title: bool, token_rows: int = 0
) -> tuple[list[list[Any]], Any]:
    """The figure and its axes, ``axes[panel][column]``, and the token axes below them
    when ``token_rows`` (else None); panel height follows its rows, so a 4-load run
    does not get a 64-row canvas."""
    # A panel with a stop keeps room for the stop's boxed note, however few its rows.
    # One row's height per unit of the panel's y range (rows, the forwards above them,
    # the note band below), so rows never crowd their labels.
    heights = [_ROW_IN * max(lay.bottom + 1.5 + _note_rows(lay), 6) for lay in layouts]
    fig_w = 15.0 if detail else 13.0
    token_h = _TOKEN_ROW_IN * max(token_rows, 2) if token_rows else 0.0
    fig_h = (
        _TOP_IN
        + (_SUPTITLE_IN if title else 0)
        + sum(_PANEL_TITLE_IN + h for h in heights)
        + (_TOKEN_GAP_IN + _PANEL_TITLE_IN + token_h if token_rows else 0)
        + _BOTTOM_IN
    )
    fig = plt.figure(figsize=(fig_w, fig_h))
    usable = fig_w - _LEFT_IN - _RIGHT_IN - (_COL_GAP_IN if detail else 0)
    widths = [usable * 3 / 4.2, usable * 1.2 / 4.2] if detail else [usable]
    axes: list[list[Any]] = []
    top = fig_h - _TOP_IN - (_SUPTITLE_IN if title else 0)
    for i, h in enumerate(heights):
        top -= _PANEL_TITLE_IN
        x = _LEFT_IN
        row: list[Any] = []
        for j, w in enumerate(widths):
            share_x = axes[0][j] if axes else None
            ax = fig.add_axes(
                (x / fig_w, (top - h) / fig_h, w / fig_w, h / fig_h),
                sharex=share_x,
                sharey=row[0] if row else None,
            )
            if i < len(heights) - 1:
                ax.tick_params(labelbottom=False)
            row.append(ax)
            x += w + _COL_GAP_IN
        axes.append(row)
        top -= h
    token_ax = None
    if token_rows:
        top -= _TOKEN_GAP_IN + _PANEL_TITLE_IN
        token_ax = fig.add_axes(
            (_LEFT_IN / fig_w, (top - token_h) / fig_h, widths[0] / fig_w, token_h / fig_h)
        )
    return axes, token_ax


def _clock_handles(layouts: list[_Layout]) -> list[Any]:
    """A legend entry for each stop's clock (whose timer, its limit, from which event):
    the diamond marks where it started counting, the bar where it ran out."""
    from matplotlib.lines import Line2D

    out, seen = [], set()
    for lay in layouts:
        stop = lay.panel.stop
        if stop is None or stop.elapsed is None or lay.ypos.get(stop.op or "") is None:
            continue
        style = clock_style(stop)
        if style.label not in seen:
            seen.add(style.label)
            out.append(Line2D([], [], color=style.color, marker=style.marker, lw=2, ms=6,
                              label=style.label))  # fmt: skip
    return out


def _legend_handles() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return [
        Patch(color=_C["forward"], label="forward (model step)"),
        Line2D([], [], color=_C["dispatch"], marker="|", ls="", ms=8, label="dispatch"),
        Line2D([], [], color=_C["active"], lw=1, label="load active (scheduler)"),
        Line2D([], [], color=_C["retrieve"], lw=3, label="retrieve pending"),
        Line2D([], [], color=_C["wait"], lw=2, label="waiting for a restore slot"),
        Line2D([], [], color=_C["copy"], lw=3, label="restore copy (enqueue..complete)"),
        Line2D(
            [],
            [],
            color=_C["reported"],
            marker="^",
            ls="",
            ms=5,
            label="finished reported (worker)",
        ),
        Line2D(
            [],
            [],
            color=_C["applied"],
            marker="o",
            ls="",
            ms=4,
            label="completion applied (scheduler)",
        ),
        Line2D([], [], color=_C["restart"], marker="|", ls="", ms=8, mew=2, label="bound restart"),
        Line2D([], [], color=_C["fault"], marker="X", ls="", ms=6, label="fault on this load"),
        Line2D([], [], color=_C["stop"], lw=1.5, label="STOP (named error)"),
        Line2D([], [], color=_C["muted"], lw=1, ls="--", label="engine restart"),
    ]
