"""The ``atom`` tier's declaration (entry point ``kvfault.tiers: atom``): ATOM's real
scheduler and offload connector from an ATOM checkout, with a real lmcache engine
(docs/atom/tier.md), run through the one campaign loop like every tier. Reading it
imports nothing of ATOM, lmcache or torch."""

from __future__ import annotations

from kvfault.faults.tiers.tier import Row, Tier, TierOption


def rows() -> list[Row]:
    """Every row of the tier's catalog (``kvfault.faults.atom.catalog.ROWS``), each on
    its story; the rows of its long matrix (``LONG_MATRIX``) run with ``--full``."""
    from kvfault.faults.atom.catalog import LONG_MATRIX, ROWS

    return [
        Row(r.kind, r.name, r.description, r.scenario, full=r.name in LONG_MATRIX)
        for r in ROWS.values()
    ]


TIER = Tier(
    name="atom",
    description="ATOM's real scheduler and offload connector from --atom-src, with a real "
    "lmcache engine (needs the lmcache and atom extras)",
    opener="kvfault.faults.atom.executor:atom_executor",
    catalog="kvfault.faults.atom.tier:rows",
    faults="kvfault.faults.atom.catalog:FAULTS",
    scenarios="kvfault.faults.atom.catalog:SCENARIOS",
    options=(
        TierOption(
            "--atom-src",
            "the ATOM checkout under test (default: $KVFAULT_ATOM_SRC)",
            metavar="PATH",
            elsewhere="--atom-src names the ATOM checkout of --tier atom; add --tier atom",
            env="KVFAULT_ATOM_SRC",
            path=True,
        ),
        TierOption(
            "--atom-fix",
            "run every ATOM server with this candidate fix of a finding (repeatable; "
            "names: kvfault list --tier atom)",
            metavar="NAME",
            repeat=True,
            elsewhere="--atom-fix is for --tier atom",
        ),
        TierOption(
            "--atom-record-path",
            "record the lines of ATOM's source each run executes, one file per run in DIR "
            "(off by default: a line tracer slows the servers)",
            metavar="DIR",
            elsewhere="--atom-record-path is for --tier atom",
        ),
        TierOption(
            "--atom-schedules",
            "tell every row's story on N thread schedules per case (default: each row's "
            "own, 2 or 3 for the rows that exist for a race, 1 for the rest)",
            metavar="N",
            elsewhere="--atom-schedules is for --tier atom",
        ),
        TierOption(
            "--atom-tp",
            "run every server with N tensor-parallel worker ranks, 1 or 2 (default 1), "
            "except where a row's story sets its own (the tp2_ rows run 2)",
            metavar="N",
            elsewhere="--atom-tp is for --tier atom",
        ),
        TierOption(
            "--atom-pp",
            "run every server with N pipeline stages, 1 or 2 (default 1), except where a "
            "row's story sets its own (the pp2_ rows run 2; the dsv4_ and deferred-output "
            "rows 1)",
            metavar="N",
            elsewhere="--atom-pp is for --tier atom",
        ),
        TierOption(
            "--property",
            "judge only this property (repeatable): a proof of one fix at a commit that "
            "carries other bugs (kvfault list --properties)",
            metavar="NAME",
            repeat=True,
            elsewhere="--property is for --tier atom; the other tiers judge every property",
        ),
    ),
    refuses="kvfault.faults.atom.command:refused",
    listing="kvfault.faults.atom.command:list_command",
    rank=20,
    seeds=1,
    source="--atom-src",
    engine="ATOM",
    own_hash_seeds=True,  # a row's seed is every server's PYTHONHASHSEED
    findings="docs/atom/findings.md",
)
