"""What a run leaves behind: the JSON summary, JUnit XML, replay artifacts and timeline
pictures."""

from reference._lazy import lazy_exports

_EXPORTS = {
    "format_campaign": "faults.report.table",
    "read_artifact": "faults.campaign.artifacts",
    "write_artifact": "faults.campaign.artifacts",
    "junit_tree": "faults.report.summary",
    "panel_of": "faults.report.timeline",
    "summary_json": "faults.report.summary",
    "write_junit": "faults.report.summary",
    "write_reports": "faults.report.summary",
    "write_summary": "faults.report.summary",
    "write_timeline": "faults.report.timeline",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
