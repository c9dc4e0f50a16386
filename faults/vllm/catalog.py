"""What the ``vllm`` tier runs: its rows (stories and faults), the properties each is
judged by, how each must end, and why the rest of kvfault's catalog does not apply.
Plain data; imports neither vLLM nor torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from faults.injectors.base import Injector
from faults.runs import Expect, finishes

# The properties that have something to judge here (the tier records no ``key``,
# ``sent`` or ``blocks`` events, and runs one server with a dense model).
JUDGED = (
    "correctness",
    "liveness",
    "no_false_stop",
    "efficiency",
    "load_failures",
    "exactly_once",
    "resources",
)


@dataclass(frozen=True)
class VllmRow:
    """One row of the vllm campaign: a story, the fault its run carries (None for a
    scenario), vLLM's ``kv_load_failure_policy`` and how the run must end."""

    kind: str  # "scenario" or "fault"
    name: str
    description: str
    scenario: str
    fault: str | None = None
    policy: str = "fail"
    expect: Expect = field(default_factory=finishes)
    kills_server: bool = False

    @property
    def properties(self) -> tuple[str, ...]:
        """What judges the row: its scenario's properties."""
        return SCENARIOS[self.scenario].properties

    def factory(self, seed: int) -> VllmFault:
        """The fault as a run carries it (``faults.tiers.TierFault``)."""
        return VllmFault(self, seed)


class VllmFault(Injector):
    """A fault row in a run's ``RunContext.injectors``: it wraps nothing in the campaign
    process; the run's process acts it out, and the executor sets ``fired`` to how often
    that process recorded it acting."""

    def __init__(self, row: VllmRow, seed: int):
        self.name = row.name
        super().__init__(seed)
        self.row = row


@dataclass(frozen=True)
class VllmScenario:
    """A story as the campaign names it: the properties that judge it, how it must end."""

    name: str
    description: str
    story: str
    properties: tuple[str, ...] = JUDGED
    expect: Expect = field(default_factory=finishes)
    scales: str = ""


def _fault(
    name: str, description: str, policy: str = "fail", scenario: str = "prefix_reuse"
) -> VllmRow:
    return VllmRow("fault", name, description, scenario, fault=name, policy=policy)


ROWS: dict[str, VllmRow] = {
    r.name: r
    for r in (
        VllmRow(
            "scenario",
            "prefix_reuse",
            "two prompts stored through lmcache, then resent: each resend loads its prefix "
            "from the lmcache server",
            "prefix_reuse",
        ),
        # The next three inject completions that real components do not produce
        # (docs/vllm/findings.md, 1 and 4): robustness and contract rows, not findings.
        _fault(
            "lost_completion",
            "contract row, not a defect: the tier removes the first finished_recving "
            "(vLLM's connector contract requires it); kvfault's liveness judges the wait",
        ),
        _fault(
            "duplicated_completion",
            "robustness row, not a defect: the tier delivers a load's finished_recving "
            "twice (LMCache's worker reports each load once)",
        ),
        _fault(
            "stale_completion",
            "robustness row, not a defect: the tier re-sends a finished_recving after "
            "its request was answered",
        ),
        # After a failed load, recompute is the promise; LMCache's connector does not
        # look the tier up again (its tracker says the load was done), so efficiency
        # has nothing fair to judge here.
        _fault(
            "invalid_blocks_recompute",
            "lmcache's first retrieve fails (its blocks reported as load errors); "
            "kv_load_failure_policy=recompute",
            policy="recompute",
            scenario="prefix_reuse_recomputed",
        ),
        _fault(
            "invalid_blocks_fail",
            "finding (reported upstream, LMCache PR #4826): lmcache's first retrieve "
            "fails; kv_load_failure_policy=fail (vLLM's default); LMCache then reports "
            "the freed request as done sending",
        ),
        _fault(
            "abort_while_loading",
            "finding (reported upstream, LMCache PRs #4939, #4136): the client aborts a "
            "request in WAITING_FOR_REMOTE_KVS while its retrieve is in flight (the tier "
            "makes it two polls late: on a CPU lmcache's copy finishes at submit)",
        ),
        _fault("slow_first_forward", "the first forward takes 2 s"),
    )  # fmt: skip
}

SCENARIOS: dict[str, VllmScenario] = {
    r.name: VllmScenario(r.name, r.description, r.name)
    for r in ROWS.values()
    if r.kind == "scenario"
}
SCENARIOS["prefix_reuse_recomputed"] = VllmScenario(
    "prefix_reuse_recomputed",
    "prefix_reuse where a load failed and was recomputed: judged without efficiency",
    "prefix_reuse",
    tuple(p for p in JUDGED if p != "efficiency"),
)
FAULTS: dict[str, VllmRow] = {n: r for n, r in ROWS.items() if r.kind == "fault"}

# kvfault's other rows, and why they do not run on vLLM here.
NOT_HERE: dict[str, str] = {
    "transfer deadline rows (slow retrieve, late fence, bound restart)": "vLLM 0.32 has "
    "no deadline for a remote load: a request waits in WAITING_FOR_REMOTE_KVS until its "
    "completion comes (lost_completion shows what that means)",
    "hybrid and state-image rows": "the tier runs a dense model (LMCacheMPConnector "
    "refuses the hybrid KV cache manager)",
    "two servers / DP ranks on one host": "not built yet: LMCacheMPConnector reaches its "
    "server over TCP (no per-host socket path to share); a second server needs a second "
    "warm process",
    "hash-seed sweep across processes": "not built yet: each run's server is one process "
    "whose PYTHONHASHSEED is the run's seed (--seeds N sweeps it); lmcache's MP server keys "
    "chunks with blake3 (docs/vllm/findings.md)",
    "preemption during a remote load": "not built yet",
    "two pictures with the same text": "vLLM schedules a picture's encoder input only for "
    "a multimodal model, and a multimodal config needs its processor files (nothing can be "
    "downloaded): with the tier's text-only Llama config such a request never runs. "
    "LMCache's MP connector folds each picture's hash into its key ids "
    "(apply_mm_hashes_to_token_ids); the tier does not exercise it",
    "planted regressions": "they are legacy variants of the reference stack's rules, which "
    "vLLM does not run",
    "wire faults": "the lmcache tier's (its proxy sits between its own client and server)",
}
