"""The campaign's results table: one row per target (kind, name, scenario, seeds, the
properties judged as letters, verdict, simulated and wall seconds, detail), each failing
case's signature and replay command under it, and the footer."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvfault.faults.campaign.artifacts import replay_command
from kvfault.faults.properties.checks import PROPERTIES

if TYPE_CHECKING:
    from kvfault.faults.campaign import CampaignResult


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join([line.rstrip(), sep, *body])


def seed_span(seeds: list[int]) -> str:
    if not seeds:
        return "-"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


# One letter per property keeps the table narrow; the legend prints under it.
def letters(props: list[str]) -> str:
    known = PROPERTIES.letters
    return "".join(known.get(p, "?") for p in props) or "-"


# The detail column's width: a longer detail ends in "..." and is whole in the failing
# case's lines under the table. Violations listed per failing case, at most.
DETAIL_WIDTH = 100
MAX_LISTED = 20


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def format_campaign(result: CampaignResult, artifacts: dict[str, Path] | None = None) -> str:
    """The results table, then each failing case's signature and replay command."""

    rows = [
        [
            t.target.kind.name,
            t.target.name + (f" x{t.target.scale}" if t.target.scale != 1 else ""),
            t.target.scenario,
            seed_span(t.seeds),
            letters(t.checked),
            t.verdict,
            f"{t.sim_seconds:.1f}",
            f"{t.wall_seconds:.2f}",
            _cut(t.detail(), DETAIL_WIDTH),
        ]
        for t in result.targets
    ]
    header = ["kind", "name", "scenario", "seeds", "props", "verdict", "sim s", "wall s", "detail"]
    out = [table(rows, header)] if rows else []
    if rows:
        out.append("props: " + ", ".join(f"{v}={k}" for k, v in PROPERTIES.letters.items()))
    for c in result.cases:
        if c.ok:
            continue
        out.append(f"\n{c.verdict} {c.case.id}: {c.signature}")
        # The signature names the first violation and "(+N more)": the others are read
        # here, not only in summary.json.
        viols = list(c.violations) or list(c.legacy_violations)
        if len(viols) > 1:
            out.extend(f"  - {v}" for v in viols[:MAX_LISTED])
            if len(viols) > MAX_LISTED:
                out.append(f"  (+{len(viols) - MAX_LISTED} more in summary.json)")
        out.append(f"  replay: {replay_command(c.case, c.timeout_s)}")
        if artifacts and c.case.id in artifacts:
            out.append(f"  artifact: {artifacts[c.case.id]}")
    for f in result.failures:
        out.append(f"\n{f.message}" if f.kind == "not_exercised" else f"\n{f.verdict}: {f.message}")
    if result.never_drawn:
        out.append(
            f"note: no swarm run drew {', '.join(result.never_drawn)} (more seeds draw more)"
        )
    if result.draws and (result.unexercised or result.never_drawn):
        from kvfault.faults.injectors.plans import swarm_seeds_to_cover

        n = swarm_seeds_to_cover()
        out.append(
            f"note: a swarm over every scenario with --seeds {n} gives each injector a turn "
            "on its own scenario at its catalog defaults"
        )
    out.extend(f"code: {c}" for c in _codes(result))
    out.append("\n" + footer(result))
    return "\n".join(out)


def _codes(result: CampaignResult) -> list[str]:
    """The engine checkouts the rows ran (``kvfault.faults.provenance``), each in one phrase
    with its commit and whether its tree was dirty: the output names the code it
    judged. None for kvfault's own stack."""
    from kvfault.faults.campaign import Case
    from kvfault.faults.campaign.artifacts import case_code

    seen: list[str] = []
    for t in result.targets:
        code = case_code(Case(t.target, 0))
        if code is not None and code.describe() not in seen:
            seen.append(code.describe())
    return seen


def footer(result: CampaignResult) -> str:
    """The last line: targets and runs, how many rows held and failed, and the
    campaign-level failures, if any; it says "0 failed" with no campaign failure
    exactly when the run exits 0."""
    n_ok = sum(t.ok for t in result.targets)
    text = (
        f"{len(result.targets)} targets, {len(result.cases)} runs: {n_ok} ok, "
        f"{len(result.targets) - n_ok} failed"
    )
    failures = result.failures
    if failures:
        kinds = ", ".join(str(f.verdict) for f in failures)
        text += f", {len(failures)} campaign failure{'s' * (len(failures) > 1)} ({kinds})"
    return f"{text} in {result.wall_seconds:.2f}s wall"
