"""Drawing a timeline picture with matplotlib (the ``plot`` extra), imported only when
``write_timeline`` runs: importing this module does not import matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from faults.report.timeline.layout import _detail_window, _Layout, _layout
from faults.report.timeline.model import (
    PLOT_HINT,
    HybridClaim,
    LoadRow,
    Panel,
    hybrid_claims,
    panel_of,
    picture_format,
    short_op,
)
from faults.report.timeline.notes import _C, _diagnosis, _row_facts, clock_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes  # typed as Any: matplotlib is not followed


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

    ``legacy`` and ``fixed`` are ``RunResult``s, ``CaseResult``s (then each panel is
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

    from faults.safe_io import write_atomic

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
    (``faults.report.timeline.legibility``)."""
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
_ROW_IN = 0.115
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


def _draw_claims(ax: Axes, claims: list[HybridClaim]) -> None:
    """Hybrid hits on a token axis: the prompt, the KV hit, the state images, the joint
    boundary and the claim, one row per hit; a claim short of the boundary shows the
    tokens it loses."""
    end = max(c.prompt_len for c in claims)
    for y, c in enumerate(claims):
        ok = c.claim == c.joint
        color = _C["claim_ok"] if ok else _C["claim_short"]
        ax.barh(y, c.prompt_len, height=0.7, color="#eeeeee", zorder=1, gid="kv:prompt")
        ax.barh(y, c.kv_hit, height=0.55, color=_C["kv_hit"], zorder=2, gid="kv:KV hit")
        ax.plot(c.states, [y] * len(c.states), ls="", marker="|", ms=12, mew=2,
                color=_C["state_image"], zorder=4, gid="kv:state images")  # fmt: skip
        ax.barh(y, c.claim, height=0.28, color=color, zorder=3,
                gid="kv:claim at the boundary" if ok else "kv:claim off the boundary")  # fmt: skip
        if c.claim < c.joint:
            ax.barh(y, c.joint - c.claim, left=c.claim, height=0.28, color="white",
                    edgecolor=_C["claim_short"], hatch="////", zorder=3)  # fmt: skip
        ax.plot([c.joint] * 2, [y - 0.45, y + 0.45], color="black", ls="--", lw=1.5, zorder=5,
                gid="kv:joint boundary")  # fmt: skip
        if y == 0 or c.joint != claims[y - 1].joint:
            ax.annotate(
                f"joint boundary {c.joint}",
                (c.joint, y - 0.45),
                xytext=(-3, 1),
                textcoords="offset points",
                fontsize=7.5,
                ha="right",
                va="bottom",
                zorder=6,
            )
        verdict = "= the boundary" if ok else f"loses {c.joint - c.claim} tokens"
        if c.claim > c.joint:
            verdict = f"{c.claim - c.joint} tokens past the boundary"
        ax.text(
            c.claim / 2,
            y,
            f"{c.label} claims {c.claim} of {c.prompt_len}: {verdict}",
            fontsize=8,
            fontweight="bold",
            color="white",
            ha="center",
            va="center",
            zorder=6,
            bbox={"boxstyle": "round,pad=0.15", "fc": color, "ec": "none"},
            gid="kv:on-bar",  # the claim's own label, on it
        )
    ax.set_ylim(len(claims) - 0.4, -0.8)
    ax.set_yticks(range(len(claims)))
    ax.set_yticklabels([f"{c.label} {short_op(c.req_id)}" for c in claims], fontsize=7)
    ax.tick_params(axis="y", length=0)
    chunk = claims[0].chunk
    if chunk:
        ax.set_xticks(range(0, end + 1, chunk))
    ax.set_xlim(0, end * 1.02)
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel("tokens" + (f" (grid: {chunk}-token chunks)" if chunk else ""), fontsize=9)
    ax.set_title(
        "hybrid hits on a token axis: light blue = KV hit, | = state images, "
        "bar = claimed, dashed = joint KV + state boundary",
        loc="left",
        fontsize=9,
    )


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


def _draw_panel(ax: Axes, lay: _Layout, xlim: tuple[float, float], overview: bool) -> None:
    panel = lay.panel
    _draw_forwards(ax, panel, xlim)
    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    labelled = float("-inf")
    for t in panel.restarts:
        if xlim[0] <= t <= xlim[1]:
            ax.axvline(t, color=_C["muted"], lw=1, ls="--", zorder=1, gid="kv:engine-restart")
            # One label for restarts closer than the label is wide.
            room = (t - labelled) / (xlim[1] - xlim[0]) * width_pt > _text_pt(" engine restart", 7)
            if overview and room:
                labelled = t
                ax.text(
                    t,
                    -0.5,
                    " engine restart",
                    fontsize=7,
                    color=_C["muted"],
                    va="bottom",
                    ha="left",
                    clip_on=True,
                )
    if lay.focus in lay.ypos:
        band = "#fde0dd" if lay.why == "stop" else "#fff3bf"
        y = lay.ypos[lay.focus]
        ax.axhspan(y - 0.5, y + 0.5, color=band, zorder=0, gid=f"kv:band of the {lay.why} load")

    end_of_run = panel.stop.t if panel.stop else panel.end
    dense = len(lay.shown) > 24
    _draw_rows(
        ax,
        lay,
        end_of_run,
        lw_thin=0.8 if dense else 1.2,
        lw_bar=2.2 if dense else 4.0,
        ms=5 if dense else 7,
    )
    if lay.earlier:
        _summary_row(ax, lay.earlier, lay.y_earlier, overview)
    if lay.later:
        _summary_row(ax, lay.later, lay.y_later, overview)

    if panel.stop is not None:
        _draw_stop(ax, lay, xlim, overview)
    elif overview and (other := _other_note(lay)) is not None:
        text, xy = other
        _callout(ax, text, xy, xlim, _C["other"], bold=False, y_text=lay.bottom + 0.3)
    if overview and not panel.rows:
        ax.text(
            0.5,
            0.5,
            "no loads in this run",
            transform=ax.transAxes,
            ha="center",
            fontsize=9,
            color=_C["muted"],
        )

    ax.set_ylim(lay.bottom + _note_rows(lay), -1.5)
    ax.grid(axis="x", color="#eeeeee", lw=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(axis="y", length=0)
    if not overview:
        ax.tick_params(axis="y", labelleft=False)
        return
    ax.set_gid("kv:overview")
    _y_labels(ax, lay)
    color = {True: _C["applied"], False: _C["stop"], None: "black"}[panel.ok]
    head = f"{panel.label} — {panel.verdict}"
    if panel.note:
        note = panel.note if len(panel.note) <= 150 else panel.note[:147] + "..."
        head += f"\n{note}"
    ax.set_title(head, loc="left", fontsize=10, color=color, fontweight="bold")


def _y_labels(ax: Axes, lay: _Layout) -> None:
    ticks: list[tuple[float, str, str]] = [(0.0, "forwards", "black")]
    if lay.earlier:
        assert lay.y_earlier is not None  # placed with the rows folded into it (layout)
        ticks.append((lay.y_earlier, f"+{len(lay.earlier)} earlier loads", _C["muted"]))
    focus_i = next((i for i, r in enumerate(lay.shown) if r.op == lay.focus), None)
    for i, row in enumerate(lay.shown):
        if i == focus_i:
            ticks.append(
                (
                    lay.ypos[row.op],
                    short_op(row.op),
                    _C["stop"] if lay.why == "stop" else _C["other"],
                )
            )
        elif row.op in lay.members:
            group = lay.members[row.op]
            ticks.append(
                (
                    lay.ypos[row.op],
                    f"loads {group[0].rank}–{group[-1].rank} (×{len(group)})",
                    "black",
                )
            )
        else:  # every row is labelled (legibility.problems checks none overprints)
            ticks.append((lay.ypos[row.op], f"load {row.rank}", _C["muted"]))
    if lay.later:
        assert lay.y_later is not None  # placed with the rows folded into it (layout)
        ticks.append((lay.y_later, f"+{len(lay.later)} later loads", _C["muted"]))
    ax.set_yticks([t for t, _, _ in ticks])
    ax.set_yticklabels([label for _, label, _ in ticks], fontsize=6.5)
    for lab, (_, _, color) in zip(ax.get_yticklabels(), ticks, strict=True):
        lab.set_color(color)
        if color in (_C["stop"], _C["other"]):
            lab.set_fontweight("bold")


def _draw_forwards(ax: Axes, panel: Panel, xlim: tuple[float, float]) -> None:
    span = xlim[1] - xlim[0]
    plain = [
        (a, max(b - a, span * 0.0008))
        for a, b, f in panel.forwards
        if not f and b >= xlim[0] and a <= xlim[1]
    ]
    slow = [
        (a, max(b - a, span * 0.0008))
        for a, b, f in panel.forwards
        if f and b >= xlim[0] and a <= xlim[1]
    ]
    if plain:
        ax.broken_barh(plain, (-0.4, 0.8), color=_C["forward"], lw=0, gid="kv:forward")
    if slow:
        ax.broken_barh(slow, (-0.4, 0.8), color=_C["forward_fault"], lw=0, gid="kv:forward_fault")
    # Points per second of the axis, to label only a forward its label fits inside.
    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    for a, b, fault in panel.forwards:
        # Only label long forwards whose middle is in view: text is not clipped by
        # default, and an earlier pass's compile off to the left would stretch the layout.
        mid = (a + b) / 2
        text = f"{_seconds(b - a)} forward" + (f" — {fault}" if fault else "")
        fits = _text_pt(text, 7.5) < (b - a) / span * width_pt
        if b - a > 0.06 * span and fits and xlim[0] <= mid <= xlim[1]:
            ax.text(
                mid,
                0.0,
                text,
                ha="center",
                va="center",
                fontsize=7.5,
                color="white",
                fontweight="bold",
                clip_on=True,
                gid="kv:on-bar",  # the forward's own label, inside it
            )
    ax.axhline(0.75, color="#dddddd", lw=0.8)


def _text_pt(text: str, size: float) -> float:
    """About how wide ``text`` is in points (DejaVu Sans bold averages 0.62 em)."""
    return 0.62 * size * len(text)


def _seconds(d: float) -> str:
    return f"{d:.0f} s" if d >= 1.5 else f"{d * 1000:.0f} ms"


def _draw_rows(
    ax: Axes, lay: _Layout, end_of_run: float, lw_thin: float, lw_bar: float, ms: float
) -> None:
    """All rows at once: one line collection per kind of span, one call per marker
    (a 64-load burst is thousands of artists otherwise)."""
    from matplotlib.collections import LineCollection

    spans: dict[str, list] = {k: [] for k in ("active", "retrieve", "wait", "copy")}
    marks: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("dispatch", "restart", "reported", "applied", "fence", "fault")
    }

    def span_of(kind: str, a: float | None, b: float | None, y: float) -> None:
        if a is not None:
            spans[kind].append([(a, y), (b if b is not None else end_of_run, y)])

    def mark(kind: str, t: float, y: float) -> None:
        marks[kind][0].append(t)
        marks[kind][1].append(y)

    for row in lay.shown:
        y = lay.ypos[row.op]
        span_of("active", row.dispatched, row.applied, y)
        span_of("retrieve", row.submitted, row.retrieved, y)
        if (
            row.retrieved is not None
            and row.retrieve_ok is not False
            and (row.enqueued is None or row.enqueued > row.retrieved)
        ):
            span_of("wait", row.retrieved, row.enqueued, y)
        span_of("copy", row.enqueued, row.copied, y)
        mark("dispatch", row.dispatched, y)
        for t in row.restarts:
            mark("restart", t, y)
        if row.reported is not None:
            mark("reported", row.reported, y - 0.2)
        if row.applied is not None:
            mark("applied", row.applied, y)
        for t in row.fence_errors:
            mark("fence", t, y)
        for t, name in row.faults:
            mark("fault", t, y)
            ax.annotate(
                name,
                (t, y),
                xytext=(5, -7),
                textcoords="offset points",
                fontsize=7,
                color=_C["fault"],
                annotation_clip=True,
            )

    styles = {
        "active": (lw_thin, 2),
        "retrieve": (lw_bar, 3),
        "wait": (lw_bar * 0.7, 3),
        "copy": (lw_bar, 4),
    }
    for kind, segs in spans.items():
        if segs:
            lw, z = styles[kind]
            ax.add_collection(
                LineCollection(
                    segs, colors=_C[kind], linewidths=lw, zorder=z, capstyle="butt",
                    gid=f"kv:row-{kind}",
                )
            )  # fmt: skip
    marker_style = {
        "dispatch": dict(marker="|", color=_C["dispatch"], ms=ms, zorder=5),
        "reported": dict(marker="^", color=_C["reported"], ms=ms - 2, zorder=6),
        "applied": dict(marker="o", color=_C["applied"], ms=ms - 3, zorder=7),
        # Drawn above the completion markers: a restart is the event the bound rules differ in.
        "restart": dict(marker="|", color=_C["restart"], ms=ms + 2, mew=2.0, zorder=8.5),
        "fence": dict(marker="x", color=_C["fault"], ms=ms, zorder=8),
        "fault": dict(marker="X", color=_C["fault"], ms=ms + 1, zorder=9),
    }
    for kind, (xs, ys) in marks.items():
        if xs:
            ax.plot(xs, ys, ls="", gid=f"kv:{kind}", **marker_style[kind])


def _summary_row(ax: Axes, rows: list[LoadRow], y: float | None, overview: bool) -> None:
    """Folded loads: their dispatches and applied completions as ticks on one line."""
    lo = min(r.dispatched for r in rows)
    hi = max((r.applied if r.applied is not None else r.dispatched) for r in rows)
    ax.plot([lo, hi], [y, y], color=_C["active"], lw=0.8, ls=":", zorder=2, gid="kv:row-active")
    ax.plot(
        [r.dispatched for r in rows],
        [y] * len(rows),
        marker="|",
        ls="",
        color=_C["dispatch"],
        ms=5,
        zorder=5,
        gid="kv:dispatch",
    )
    applied = [r.applied for r in rows if r.applied is not None]
    if applied:
        ax.plot(
            applied, [y] * len(applied), marker="o", ls="", color=_C["applied"], ms=2.5, zorder=6,
            gid="kv:applied",
        )  # fmt: skip
    stuck = len(rows) - len(applied)
    if stuck and overview:
        ax.annotate(
            f"{stuck} never applied",
            (hi, y),
            xytext=(4, -3),
            textcoords="offset points",
            fontsize=7,
            color=_C["stop"],
        )


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
