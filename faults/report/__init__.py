"""What a run leaves behind: the JSON summary, JUnit XML, replay artifacts and timeline
pictures."""

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "format_campaign": "kvfault.faults.report.table",
    "read_artifact": "kvfault.faults.campaign.artifacts",
    "write_artifact": "kvfault.faults.campaign.artifacts",
    "junit_tree": "kvfault.faults.report.summary",
    "panel_of": "kvfault.faults.report.timeline",
    "summary_json": "kvfault.faults.report.summary",
    "write_junit": "kvfault.faults.report.summary",
    "write_reports": "kvfault.faults.report.summary",
    "write_summary": "kvfault.faults.report.summary",
    "write_timeline": "kvfault.faults.report.timeline",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
