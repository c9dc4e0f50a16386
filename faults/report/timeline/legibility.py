"""A legibility check for timeline pictures, computed from matplotlib's artists after a
draw: no text over other text, no text over a bar or a row's span, every row of an
overview panel labelled, and one meaning per colour (each data artist says what it
means in its ``gid``, ``"kv:<meaning>"``; a colour must mean one thing in the whole
picture, and what the legend says it means)."""

from __future__ import annotations

from typing import Any

_TOL = 0.5  # pixels: boxes that touch are not overlapping


def _boxes_overlap(a: Any, b: Any) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > _TOL and min(a.y1, b.y1) - max(a.y0, b.y0) > _TOL


def _texts(fig: Any) -> list[Any]:
    out = list(fig.texts)
    for leg in fig.legends:
        out += list(leg.get_texts())
    for ax in fig.axes:
        out += list(ax.texts)
        out += [ax.title, ax._left_title, ax._right_title]  # noqa: SLF001 - no public getter
        out += [ax.xaxis.label, ax.yaxis.label]
        # Only the ticks in view: matplotlib keeps labels for ticks past the limits.
        lo, hi = sorted(ax.get_xlim())
        out += [t for t in ax.get_xticklabels() if lo <= t.get_position()[0] <= hi]
        lo, hi = sorted(ax.get_ylim())
        out += [t for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi]
    return [t for t in out if t.get_visible() and t.get_text().strip()]


def _text_box(t: Any, renderer: Any) -> Any:
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    # The text and its box; an annotation's arrow may cross rows (it points at one).
    box = Text.get_window_extent(t, renderer)
    patch = t.get_bbox_patch() if hasattr(t, "get_bbox_patch") else None
    if patch is not None:
        box = Bbox.union([box, patch.get_window_extent(renderer)])
    return box


def _bars(ax: Any, renderer: Any) -> list[tuple[str, Any]]:
    """Every bar and row span of ``ax`` as a display-space box, with its gid."""
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Bbox

    out: list[tuple[str, Any]] = []
    to_px = ax.transData
    dpi_scale = ax.figure.dpi / 72.0
    for coll in ax.collections:
        gid = coll.get_gid() or ""
        if isinstance(coll, LineCollection):
            widths = coll.get_linewidths()
            for k, seg in enumerate(coll.get_segments()):
                if len(seg) < 2:
                    continue
                (x0, y0), (x1, y1) = to_px.transform(seg[0]), to_px.transform(seg[-1])
                half = widths[k % len(widths)] * dpi_scale / 2
                out.append(
                    (
                        gid,
                        Bbox(
                            [[min(x0, x1), min(y0, y1) - half], [max(x0, x1), max(y0, y1) + half]]
                        ),
                    )
                )
        elif isinstance(coll, PolyCollection):
            for path in coll.get_paths():
                out.append((gid, path.get_extents(coll.get_transform())))
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and (patch.get_gid() or "").startswith("kv:"):
            out.append((patch.get_gid(), patch.get_window_extent(renderer)))
    # Backgrounds (a highlighted row's band, the zoomed window) are not bars.
    return [(gid, box) for gid, box in out if gid not in _BACKGROUNDS and "band" not in gid]


_BACKGROUNDS = {"kv:the zoomed window", "kv:prompt"}


def _rows(ax: Any) -> set[float]:
    """The y of every row span drawn in ``ax`` (collections with a ``kv:row-*`` gid)."""
    from matplotlib.collections import LineCollection

    ys: set[float] = set()
    for coll in ax.collections:
        if isinstance(coll, LineCollection) and (coll.get_gid() or "").startswith("kv:row-"):
            ys |= {round(float(seg[0][1]), 3) for seg in coll.get_segments() if len(seg)}
    return ys


def _colour_of(artist: Any) -> list[str]:
    from matplotlib.collections import Collection
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if isinstance(artist, Line2D):
        return [to_hex(artist.get_color())]
    if isinstance(artist, Collection):
        cols = list(artist.get_facecolors()) if len(artist.get_facecolors()) else []
        cols += list(artist.get_edgecolors()) if not cols else []
        return sorted({to_hex(c) for c in cols})
    if isinstance(artist, Patch):
        return [to_hex(artist.get_facecolor())]
    return []


def problems(fig: Any) -> list[str]:
    """What makes ``fig`` hard to read, one line each (empty: it passes)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found: list[str] = []
    texts = [(t, _text_box(t, renderer)) for t in _texts(fig)]
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1 :]:
            if _boxes_overlap(box_a, box_b):
                found.append(f"text {a.get_text()[:40]!r} overlaps text {b.get_text()[:40]!r}")
    for ax in fig.axes:
        bars = _bars(ax, renderer)
        for t, box in texts:
            if t.axes is not ax or t.get_gid() == "kv:on-bar":
                continue
            for gid, bar in bars:
                if _boxes_overlap(box, bar):
                    found.append(f"text {t.get_text()[:40]!r} is drawn over a bar ({gid})")
                    break
        if ax.get_gid() == "kv:overview":
            ticks = {
                round(float(y), 3)
                for y, lab in zip(ax.get_yticks(), ax.get_yticklabels(), strict=False)
                if lab.get_text().strip()
            }
            for y in sorted(_rows(ax) - ticks):
                found.append(f"a row at y={y:g} has no label")
    meanings: dict[str, set[str]] = {}
    for ax in fig.axes:
        for artist in [*ax.collections, *ax.lines, *ax.patches]:
            gid = artist.get_gid() or ""
            if gid.startswith("kv:") and gid != "kv:on-bar":
                for c in _colour_of(artist):
                    meanings.setdefault(c, set()).add(_meaning(gid[3:]))
    for leg in fig.legends:
        for handle, text in zip(leg.legend_handles, leg.get_texts(), strict=False):
            for c in _colour_of(handle):
                meanings.setdefault(c, set()).add(text.get_text())
    for colour, what in sorted(meanings.items()):
        if len(what) > 1:
            found.append(f"colour {colour} means {len(what)} things: {', '.join(sorted(what))}")
    return found


# Artists name their meaning by the legend's words where the legend has one.
_LEGEND_WORDS = {
    "forward": "forward (model step)",
    "forward_fault": "forward slowed by a fault",
    "row-active": "load active (scheduler)",
    "row-retrieve": "retrieve pending",
    "row-wait": "waiting for a restore slot",
    "row-copy": "restore copy (enqueue..complete)",
    "dispatch": "dispatch",
    "reported": "finished reported (worker)",
    "applied": "completion applied (scheduler)",
    "restart": "bound restart",
    "fault": "fault on this load",
    "fence": "fault on this load",
    "stop": "STOP (named error)",
    "engine-restart": "engine restart",
}


def _meaning(key: str) -> str:
    return _LEGEND_WORDS.get(key, key)
