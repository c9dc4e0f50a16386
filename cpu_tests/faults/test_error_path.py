"""One error path: ``kvfault: error:`` is written by ``kvfault.faults.errors.report``
alone. An error of kvfault's own is raised to ``cli.main``, which reports it; the few
places that cannot raise to main (the hang guard's thread, the reports a stop signal
or a hang leaves) hand it to ``report`` themselves."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from kvfault.faults.errors import KvfaultOSError, UsageError, report

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "kvfault: error:"


def _writes_the_prefix(source: str) -> list[int]:
    """The lines of ``print``/``write`` calls whose arguments spell the error prefix."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name not in ("print", "write", "_say"):
            continue
        for arg in node.args:
            texts = [c.value for c in ast.walk(arg) if isinstance(c, ast.Constant)]
            if any(isinstance(t, str) and PREFIX in t for t in texts):
                hits.append(node.lineno)
    return hits


def test_only_report_writes_the_error_prefix():
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "faults").rglob("*.py"))
        if (lines := _writes_the_prefix(path.read_text()))
    }
    assert list(found) == ["faults/errors.py"], found
    assert len(found["faults/errors.py"]) == 1


def test_the_scan_finds_a_planted_print():
    planted = 'import sys\nprint(f"kvfault: error: {x}", file=sys.stderr)\nsys.stderr.write("ok")\n'
    assert _writes_the_prefix(planted) == [2]


def test_report_says_one_line_and_returns_the_code():
    out = io.StringIO()
    assert report(UsageError("give -j or --tx, not both"), out) == 2
    assert out.getvalue() == "kvfault: error: give -j or --tx, not both\n"
    out = io.StringIO()
    report(KvfaultOSError(28, "No space left on device", "rep/summary.json"), out)
    assert out.getvalue() == "kvfault: error: rep/summary.json: No space left on device\n"
    closed = io.StringIO()
    closed.close()
    assert report(UsageError("x"), closed) == 2  # a closed stderr: nothing said, same code
