"""``kvfault review``'s judgement as data: each side's rows read from its campaign's
``summary.json``, the per-row diff between the two sides (with the re-runs that tell a
change from noise), the review's one verdict, and the markdown a reviewer pastes into a
pull request. Pure: no process is started here (``kvfault.faults.review`` runs the sides).
Only the standard library and ``kvfault.faults.verdicts``."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvfault.faults.errors import KvfaultError
from kvfault.faults.verdicts import OK, Verdict

# What one run of a row says, as compared across runs and sides.
PASS, FAIL, UNJUDGED = "pass", "fail", "could not judge"

# The statuses of a row in the diff, in the order the summary lists them.
BREAKS, FIXES, UNSTABLE, UNJUDGED_ROW, KNOWN, ADDED, REMOVED, SAME = (
    "breaks", "fixes", "unstable", "could not judge", "known", "added", "removed", "same",
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One row (a target over its seeds) of one side's campaign: its verdict and, when
    it did not pass, the property and message of its first violation (or its signature
    or error, when no property failed)."""

    id: str
    target: dict[str, Any]
    verdict: str
    prop: str | None = None
    first: str | None = None

    @property
    def outcome(self) -> str:
        return outcome(self.verdict)


def outcome(verdict: str) -> str:
    """``pass`` (PASS, FIXED), ``could not judge`` (ERROR: the run itself broke) or
    ``fail`` (everything else: FAIL, NOT EXERCISED, STILL FAILING, ...)."""
    if verdict in OK:
        return PASS
    if verdict in (Verdict.ERROR, Verdict.COULD_NOT_JUDGE):
        return UNJUDGED
    return FAIL


class SummaryError(KvfaultError, ValueError):
    """A side's report that cannot be read as a campaign: one line."""


def read_rows(summary: Path) -> dict[str, Row]:
    """The rows of the campaign whose ``summary.json`` is at ``summary``, by row id,
    in the table's order. ``SummaryError`` in one line when it is missing or not a
    kvfault summary (``kvfault.summary/2``)."""
    try:
        obj = json.loads(summary.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SummaryError(f"no {summary.name}: the campaign wrote no report") from None
    except (OSError, ValueError) as exc:
        raise SummaryError(f"{summary}: not readable JSON ({exc})") from None
    try:
        targets = obj["meta"]["campaign"]["targets"]
        cases = obj["cases"]
    except (KeyError, TypeError):
        raise SummaryError(
            f"{summary}: not a kvfault campaign summary (no meta.campaign)"
        ) from None
    first: dict[str, tuple[str | None, str | None]] = {}
    for c in cases:
        if c.get("ok"):
            continue
        row_id = str(c.get("id", "")).rsplit("@seed", 1)[0]  # the row's own id
        if row_id in first:
            continue
        violations = c.get("violations") or c.get("legacy_violations") or []
        if violations:
            v = violations[0]
            ev = v.get("evidence") or {}
            at = f" [{ev['op']}]" if ev.get("op") else ""
            first[row_id] = (v.get("property"), f"{v.get('message')}{at}")
        else:
            text = c.get("signature") or c.get("error") or c.get("verdict")
            first[row_id] = (None, str(text).strip().splitlines()[-1] if text else None)
    rows: dict[str, Row] = {}
    for t in targets:
        prop, msg = first.get(t["id"], (None, None))
        if t.get("ok"):
            prop, msg = None, None
        elif msg is None:
            msg = t.get("detail")
        target = t.get("target") or {}
        rows[row_key(t["id"], target)] = Row(
            row_key(t["id"], target), target, str(t["verdict"]), prop, msg
        )
    return rows


def row_key(row_id: str, target: dict[str, Any]) -> str:
    """The id that matches a row across sides: the row's id without the stack a side's
    own arguments put under it (``--legacy NAME`` on one side only)."""
    stack = target.get("stack")
    return row_id.replace(f"-legacy-{stack}", "") if stack else row_id


@dataclass
class RowDiff:
    """One row compared: its status (``breaks``, ``fixes``, ``known``, ``unstable``,
    ``could not judge``, ``added``, ``removed``, ``same``), each side's row from the
    campaign, and the outcome of every run of the row on each side (the campaign's
    first, then the re-runs)."""

    id: str
    status: str
    base: Row | None
    head: Row | None
    base_runs: list[str] = field(default_factory=list)
    head_runs: list[str] = field(default_factory=list)
    finding: str | None = None


# Re-runs the given rows K times on each side; returns, by row id, each side's outcomes.
Rerun = Callable[[list[Row]], dict[str, tuple[list[str], list[str]]]]


def diff(base: dict[str, Row], head: dict[str, Row], rerun: Rerun) -> list[RowDiff]:
    """Compare every row. The rows whose outcome differs between the sides are re-run
    (``rerun``, all of them together) before any is called a change: a row ``breaks``
    (passes at the base, fails at the head) or ``fixes`` (the other way) only when every
    run of each side agrees; when a side's runs disagree it is ``unstable`` and is no
    change. A row that could not be judged on a side (ERROR) is ``could not judge``;
    failing on both is ``known``; passing on both is ``same``."""
    out: list[RowDiff] = []
    differing: list[RowDiff] = []
    for row_id in [*base, *(r for r in head if r not in base)]:
        b, h = base.get(row_id), head.get(row_id)
        if b is None or h is None:
            out.append(RowDiff(row_id, ADDED if b is None else REMOVED, b, h))
            continue
        d = RowDiff(row_id, SAME, b, h, [b.outcome], [h.outcome])
        if UNJUDGED in (b.outcome, h.outcome):
            d.status = UNJUDGED_ROW
        elif b.outcome == h.outcome:
            d.status = SAME if b.outcome == PASS else KNOWN
        else:
            differing.append(d)
        out.append(d)
    again = rerun([d.base for d in differing if d.base is not None]) if differing else {}
    for d in differing:
        assert d.base is not None
        more_b, more_h = again.get(d.base.id, ([UNJUDGED], [UNJUDGED]))
        d.base_runs += more_b
        d.head_runs += more_h
        if len(set(d.base_runs)) > 1 or len(set(d.head_runs)) > 1:
            d.status = UNSTABLE
        elif UNJUDGED in (d.base_runs[0], d.head_runs[0]):
            d.status = UNJUDGED_ROW
        elif d.base_runs[0] == d.head_runs[0]:  # both sides moved together: noise
            d.status = UNSTABLE
        else:
            d.status = BREAKS if d.base_runs[0] == PASS else FIXES
    return out


def decide(rows: Sequence[RowDiff], unjudged_side: str | None) -> tuple[Verdict, str]:
    """The review's verdict: COULD NOT JUDGE when a side could not run the code under
    test (``unjudged_side`` says why); else REGRESSED when a row breaks; else COULD NOT
    JUDGE when a row could not be judged; else FIXED when a row is fixed; else
    UNCHANGED. Returns (verdict, one-line reason)."""
    if unjudged_side:
        return Verdict.COULD_NOT_JUDGE, unjudged_side
    n = Counter(d.status for d in rows)
    counts = (
        f"{n[BREAKS]} breaking, {n[FIXES]} fixed, {n[KNOWN]} failing on both, "
        f"{n[UNSTABLE]} unstable, {n[UNJUDGED_ROW]} not judged, {n[SAME]} passing on both"
    )
    if n[BREAKS]:
        return Verdict.REGRESSED, counts
    if n[UNJUDGED_ROW]:
        return Verdict.COULD_NOT_JUDGE, counts
    if n[FIXES]:
        return Verdict.FIXED, counts
    return Verdict.UNCHANGED, counts


def runs_text(runs: Sequence[str]) -> str:
    """``FAIL 3/3``, or the counts of a side whose runs disagree."""
    counts = Counter(runs)
    if len(counts) == 1:
        ((what, k),) = counts.items()
        return f"{what.upper() if what != UNJUDGED else 'ERROR'} {k}/{k}"
    return ", ".join(f"{k}x {w}" for w, k in counts.most_common())


def _cell(text: str | None, width: int = 160) -> str:
    text = (text or "").replace("|", "\\|").replace("\n", " ").strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def _heading_slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def finding_anchor(doc: Path, name: str, shown_as: str) -> str | None:
    """The ``DOC#anchor`` of the finding in ``doc`` that is about row ``name``, with
    ``shown_as`` as the document's path: the numbered heading (``## 6. ...``) that names
    the row in backticks (``(`store_failure`, efficiency)``), else the first numbered
    section whose reproduction line (``kvfault run --tier ...``) selects the row
    (``--scenario NAME``, ``--fault NAME``); None where the document has neither."""
    try:
        text = doc.read_text(encoding="utf-8")
    except OSError:
        return None
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = re.match(r"## (\d+\. .*)", line)
        if m:
            sections.append((m.group(1), []))
        elif line.startswith("## "):
            sections.append(("", []))  # an unnumbered section: not a finding
        elif sections:
            sections[-1][1].append(line)
    for heading, _ in sections:
        if heading and re.search(r"\(`" + re.escape(name) + r"`[,)]", heading):
            return f"{shown_as}#{_heading_slug(heading)}"
    selects = re.compile(r"--(?:scenario|fault|regression)[ =]" + re.escape(name) + r"(?:\s|$)")
    for heading, body in sections:
        if heading and any(ln.startswith("kvfault run ") and selects.search(ln) for ln in body):
            return f"{shown_as}#{_heading_slug(heading)}"
    return None


def as_json(
    verdict: Verdict, reason: str, sides: Sequence[Side], rows: Sequence[RowDiff]
) -> dict[str, Any]:
    """``review.json``: the verdict, each side, and every row with its status, each
    side's verdict, the outcome of every run on each side, and the property and first
    violation on the side that did not pass."""

    def one(d: RowDiff) -> dict[str, Any]:
        failing = d.head if d.head is not None and d.head.outcome != PASS else d.base
        return {
            "id": d.id,
            "status": d.status,
            "base": d.base.verdict if d.base else None,
            "head": d.head.verdict if d.head else None,
            "base_runs": d.base_runs,
            "head_runs": d.head_runs,
            "property": failing.prop if failing else None,
            "first_violation": failing.first if failing else None,
            "finding": d.finding,
        }

    counts = Counter(d.status for d in rows)
    return {
        "schema": "kvfault.review/1",
        "verdict": verdict.value,
        "exit_code": verdict.exit_code,
        "reason": reason,
        "counts": {
            k: counts[k]
            for k in (BREAKS, FIXES, KNOWN, UNSTABLE, UNJUDGED_ROW, SAME, ADDED, REMOVED)
        },  # fmt: skip
        "sides": [vars(s) for s in sides],
        "rows": [one(d) for d in rows],
    }


@dataclass
class Side:
    """What the report says about one side: the revision as given, its commit, the
    extra arguments it ran with, what ran (the code under test, in one phrase), the
    campaign's exit status and its row count."""

    name: str
    rev: str
    sha: str
    args: list[str]
    code: str
    returncode: int | None
    rows: int
    failing: int


def markdown(
    *,
    command: str,
    sides: Sequence[Side],
    rows: Sequence[RowDiff],
    verdict: Verdict,
    reason: str,
    replay: Callable[[RowDiff], str] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The summary a reviewer pastes into a pull request: the command, what each side
    ran, then the rows that break, are fixed, fail on both (known, with the finding's
    entry where the docs have one), are unstable or could not be judged; the verdict is
    the last line."""
    out = [f"### kvfault review: {verdict.value}", "", f"`{command}`", ""]
    for s in sides:
        extra = f", with `{' '.join(s.args)}`" if s.args else ""
        ran = (
            f"exit {s.returncode}, {s.rows} rows, {s.failing} not passing"
            if s.returncode is not None
            else "not run: the other side could not be judged"
        )
        out.append(f"- **{s.name}** `{s.rev}` = `{s.sha[:12]}`{extra}: {s.code} ({ran})")
    out.extend(f"- note: {n}" for n in notes)

    def table(title: str, status: str, cols: str, render: Callable[[RowDiff], str]) -> None:
        chosen = [d for d in rows if d.status == status]
        if not chosen:
            return
        out.extend(["", f"**{title}** ({len(chosen)})", "", cols,
                    "|" + "---|" * cols.count("|", 1)])  # fmt: skip
        out.extend(render(d) for d in chosen)

    def failing(d: RowDiff, row: Row | None) -> str:
        return f"{_cell(row.prop) or '-'} | {_cell(row.first)}" if row else "- | -"

    def rep(d: RowDiff) -> str:
        return f" | `{replay(d)}`" if replay is not None else ""

    rcol = " replay |" if replay is not None else ""
    table(
        "This PR breaks",
        BREAKS,
        "| row | base | head | property | first violation |" + rcol,
        lambda d: (
            f"| `{d.id}` | {runs_text(d.base_runs)} | {runs_text(d.head_runs)} | "
            f"{failing(d, d.head)}{rep(d)} |"
        ),
    )
    table(
        "This PR fixes",
        FIXES,
        "| row | base | head | property at base | first violation at base |" + rcol,
        lambda d: (
            f"| `{d.id}` | {runs_text(d.base_runs)} | {runs_text(d.head_runs)} | "
            f"{failing(d, d.base)}{rep(d)} |"
        ),
    )
    table(
        "Unstable: a side's runs disagree, so no change is claimed",
        UNSTABLE,
        "| row | base runs | head runs | property | first violation |",
        lambda d: (
            f"| `{d.id}` | {runs_text(d.base_runs)} | {runs_text(d.head_runs)} | "
            f"{failing(d, d.head if d.head and d.head.outcome != PASS else d.base)} |"
        ),
    )
    table(
        "Could not judge",
        UNJUDGED_ROW,
        "| row | base | head | why |",
        lambda d: (
            f"| `{d.id}` | {d.base.verdict if d.base else '-'} | "
            f"{d.head.verdict if d.head else '-'} | "
            f"{_cell((d.head if d.head and d.head.outcome == UNJUDGED else d.base).first if d.base else '')} |"
        ),
    )

    def known(d: RowDiff) -> str:
        assert d.base is not None and d.head is not None
        moved = f" (base: {_cell(d.base.prop)})" if d.base.prop != d.head.prop else ""
        where = f" | {d.finding}" if d.finding else " | -"
        return f"| `{d.id}` | {d.head.verdict} | {_cell(d.head.prop) or '-'}{moved} | {_cell(d.head.first, 120)}{where} |"

    table(
        "Known: failing on both",
        KNOWN,
        "| row | verdict | property | first violation at head | finding |",
        known,
    )
    for status, what in ((ADDED, "only at head"), (REMOVED, "only at base")):
        chosen = [d.id for d in rows if d.status == status]
        if chosen:
            out.extend(["", f"Rows {what}: " + ", ".join(f"`{i}`" for i in chosen)])
    same = sum(d.status == SAME for d in rows)
    if rows:
        out.extend(["", f"{same} rows pass on both sides."])
    out.extend(["", f"**{verdict.value}**: {reason}"])
    return "\n".join(out)
