"""One panel of a timeline picture: the forwards strip, one row per load (its spans
and markers, drawn as one collection per kind), the folded summary rows, the engine
restarts, the row labels and the panel's title. Its boxed notes are ``callouts``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvfault.faults.report.timeline.callouts import _callout, _draw_stop, _note_rows, _other_note
from kvfault.faults.report.timeline.layout import _Layout
from kvfault.faults.report.timeline.model import LoadRow, Panel, short_op
from kvfault.faults.report.timeline.notes import _C

if TYPE_CHECKING:
    from matplotlib.axes import Axes  # typed as Any: matplotlib is not followed


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
