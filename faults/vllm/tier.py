"""The ``vllm`` tier's declaration (entry point ``kvfault.tiers: vllm``): vLLM's real
v1 scheduler and KV cache manager with LMCache's real ``LMCacheMPConnector`` and a real
lmcache server (docs/vllm/tier.md). Reading it imports nothing of vLLM, lmcache or
torch."""

from __future__ import annotations

from kvfault.faults.tiers.tier import Row, Tier, TierOption


def rows() -> list[Row]:
    """Every row of the tier's catalog (``kvfault.faults.vllm.catalog.ROWS``)."""
    from kvfault.faults.vllm.catalog import ROWS

    return [Row(r.kind, r.name, r.description, r.scenario) for r in ROWS.values()]


TIER = Tier(
    name="vllm",
    description="vLLM's real v1 scheduler and KV cache manager with LMCache's "
    "LMCacheMPConnector and a real lmcache server (needs vllm: scripts/install_vllm.sh)",
    opener="kvfault.faults.vllm.executor:vllm_executor",
    catalog="kvfault.faults.vllm.tier:rows",
    faults="kvfault.faults.vllm.catalog:FAULTS",
    scenarios="kvfault.faults.vllm.catalog:SCENARIOS",
    options=(
        TierOption(
            "--vllm-fix",
            "run vLLM with kvfault's demonstration guard around "
            "Scheduler._update_from_kv_xfer_finished (docs/vllm/findings.md; a real fix "
            "needs LMCache's connector and vLLM's scheduler): on or off",
            metavar="on|off",
            elsewhere="--vllm-fix is for --tier vllm; add --tier vllm",
        ),
    ),
    refuses="kvfault.faults.vllm.command:refused",
    listing="kvfault.faults.vllm.command:list_command",
    rank=30,
    seeds=1,
)
