"""Timeline pictures: why the legacy head stopped and the fixed head did not.

``write_timeline(legacy, fixed, path)`` draws two panels, legacy above fixed, on one
shared time axis (simulated seconds). Each panel has a strip of forwards (spans from
``forward_start`` to ``forward_end``; long ones labelled) and one row per load in
dispatch order, showing: dispatch, retrieve pending (submit .. terminal), waiting for a
restore slot, the restore copy (enqueue .. complete), finished reported and completion
applied, bound restarts (the ``bound_restart`` events that list the row's load), faults
that name the load, and the STOP: the named error, the load it names, and the clock the
error counted (from dispatch, submission, enqueue or the last bound restart) against its
limit. Engine restarts are dashed vertical lines.

With many loads only ``max_rows`` rows around the load that matters are drawn (the
stopping load, else the load that stopped the other panel, else the first load never
applied); the rest are folded into two summary rows that say how many they are.
When the decisive moment (the legacy stop) packs many events into a sliver of the axis,
a zoom column on the right shows that window for both panels. A boxed note by the stop
gives the stopping load's own times and one-line diagnoses derived from the trace only
(e.g. its bound was not restarted when the loads before it finished); in the other
panel the same load is highlighted with its times.

The data side (``load_rows``, ``panel_of``) needs nothing but the trace; drawing needs
matplotlib (the ``plot`` extra), imported only when a picture is written.
"""

from kvfault.faults.report.timeline.draw import write_timeline
from kvfault.faults.report.timeline.layout import collapse_rows
from kvfault.faults.report.timeline.model import (
    FORMATS,
    PLOT_HINT,
    HybridClaim,
    LoadRow,
    Panel,
    StopInfo,
    hybrid_claims,
    load_rows,
    panel_of,
    picture_format,
    short_op,
)
from kvfault.faults.report.timeline.notes import ClockStyle, clock_style

__all__ = [
    "ClockStyle",
    "FORMATS",
    "HybridClaim",
    "LoadRow",
    "PLOT_HINT",
    "Panel",
    "StopInfo",
    "clock_style",
    "collapse_rows",
    "hybrid_claims",
    "load_rows",
    "panel_of",
    "picture_format",
    "short_op",
    "write_timeline",
]
