"""What the ``vllm`` tier runs: its rows (stories and faults), the properties each is
judged by, how each must end, and why the rest of kvfault's catalog does not apply.
Plain data; imports neither vLLM nor torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfault.faults.properties.names import Prop
from kvfault.faults.runs import Expect, finishes
from kvfault.faults.tiers.row_fault import RowFault

# The properties that have something to judge here (the tier records no ``blocks``
# events, and runs one server with a dense model). ``keys`` judges the chunk keys
# LMCache's MP server files the token ids of each lookup, retrieve and store under.
JUDGED = (
    Prop.CORRECTNESS,
    Prop.LIVENESS,
    Prop.NO_FALSE_STOP,
    Prop.EFFICIENCY,
    Prop.LOAD_FAILURES,
    Prop.EXACTLY_ONCE,
    Prop.RESOURCES,
    Prop.KEYS,
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
        """The fault as a run carries it (``kvfault.faults.tiers.TierFault``)."""
        return VllmFault(self, seed)


class VllmFault(RowFault[VllmRow]):
    """A fault row in a run's ``RunContext.injectors``: it wraps nothing in the campaign
    process; the run's process acts it out, and the executor sets ``fired`` to how often
    that process recorded it acting."""


@dataclass(frozen=True)
class Phase:
    """One vLLM process of a run: the story it tells, the ``PYTHONHASHSEED`` it runs
    under (the run's seed plus ``hash_seed``) and which lmcache server it talks to
    (0: the campaign's; 1: a second one on the same host)."""

    story: str
    hash_seed: int = 0
    server: int = 0
    prompt_set: int = 0


@dataclass(frozen=True)
class VllmScenario:
    """A story as the campaign names it: the properties that judge it, how it must end.
    ``phases``: its vLLM processes (empty: one, telling ``story``), one after another,
    or all at once when ``concurrent``; their events are judged as one run."""

    name: str
    description: str
    story: str
    properties: tuple[str, ...] = JUDGED
    expect: Expect = field(default_factory=finishes)
    scales: str = ""
    phases: tuple[Phase, ...] = ()
    concurrent: bool = False
    pictures: bool = False  # its requests carry pictures: the scheduler needs an encoder budget

    def processes(self) -> tuple[Phase, ...]:
        return self.phases or (Phase(self.story),)


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
        VllmRow(
            "scenario",
            "cross_seed_reuse",
            "one vLLM process stores two prompts through lmcache and exits; a second, "
            "under another PYTHONHASHSEED (so another NONE_HASH: other vLLM block "
            "hashes), sends them again and must load each prefix the first stored",
            "cross_seed_reuse",
        ),
        VllmRow(
            "scenario",
            "two_pictures",
            "one prompt with picture X, then the same token ids with picture Y (vLLM's "
            "MultiModalFeatureSpec, another identifier), then both again: Y must not load "
            "X's KV from lmcache (correctness, keys), and each resend loads its own "
            "picture's prefix (efficiency)",
            "two_pictures",
        ),
        VllmRow(
            "scenario",
            "two_servers",
            "two vLLM + lmcache server sets on one host at once, one model name, other "
            "prompts: each reaches its own server endpoint and maps its own shared-memory "
            "pool (identity), and each restores only its own pages (correctness)",
            "two_servers",
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
        _fault(
            "abort_load_same_step",
            "finding (reported upstream, LMCache PR #4284, closed without merge): the "
            "client aborts a request in WAITING_FOR_REMOTE_KVS whose retrieve reports one "
            "poll late: LMCache reports its load finished and the request done sending "
            "(it stored nothing) in one output",
        ),
        _fault(
            "abort_in_load_step",
            "finding (reported upstream, LMCache issue #4938's cross-step case): the "
            "client's abort arrives during the forward of the step whose output reports "
            "the request's load finished, and vLLM applies it before update_from_output "
            "(EngineCore.step); no lateness injected: vLLM frees the request on its load, "
            "and LMCache reports it done sending (it stored nothing) the next step",
        ),
        _fault(
            "preempt_after_load",
            "once a loaded request runs, the client resets the prefix cache with its "
            "running requests (vLLM's reset_prefix_cache(reset_running_requests=True)): "
            "each is preempted, looks lmcache up again and loads again under its id",
        ),
        _fault("slow_first_forward", "the first forward takes 2 s"),
    )  # fmt: skip
}

SCENARIOS: dict[str, VllmScenario] = {
    "prefix_reuse": VllmScenario("prefix_reuse", ROWS["prefix_reuse"].description, "prefix_reuse")
}
SCENARIOS["prefix_reuse_recomputed"] = VllmScenario(
    "prefix_reuse_recomputed",
    "prefix_reuse where a load failed and was recomputed: judged without efficiency",
    "prefix_reuse",
    tuple(p for p in JUDGED if p != Prop.EFFICIENCY),
)
SCENARIOS["cross_seed_reuse"] = VllmScenario(
    "cross_seed_reuse",
    ROWS["cross_seed_reuse"].description,
    "store",
    phases=(Phase("store"), Phase("reuse", hash_seed=1)),
)
SCENARIOS["two_servers"] = VllmScenario(
    "two_servers",
    ROWS["two_servers"].description,
    "prefix_reuse",
    # Judged without efficiency: its content account assumes one tier, and here the
    # other set's stores of the same prompts are not this set's to hit.
    (Prop.IDENTITY, *(p for p in JUDGED if p != Prop.EFFICIENCY)),
    # Other prompts on the second set: a pool or server they shared would restore one
    # set's pages into the other's requests (correctness), besides identity.
    phases=(Phase("prefix_reuse"), Phase("prefix_reuse", server=1, prompt_set=1)),
    concurrent=True,
)
SCENARIOS["two_pictures"] = VllmScenario(
    "two_pictures", ROWS["two_pictures"].description, "two_pictures", pictures=True
)
FAULTS: dict[str, VllmRow] = {n: r for n, r in ROWS.items() if r.kind == "fault"}

# kvfault's other rows, and why they do not run on vLLM here.
NOT_HERE: dict[str, str] = {
    "transfer deadline rows (slow retrieve, late fence, bound restart)": "vLLM 0.32 has "
    "no deadline for a remote load: a request waits in WAITING_FOR_REMOTE_KVS until its "
    "completion comes (lost_completion shows what that means)",
    "hybrid and state-image rows": "the tier runs a dense model (LMCacheMPConnector "
    "refuses the hybrid KV cache manager)",
    "DP ranks on one host": "not built: the tier runs one vLLM rank per server set "
    "(two_servers runs two sets on one host)",
    "preemption while WAITING_FOR_REMOTE_KVS": "vLLM 0.32 preempts only running "
    "requests (Scheduler._preempt_request asserts RUNNING; schedule() takes its victims "
    "from self.running): a request waiting for its load holds its blocks and cannot be "
    "preempted. preempt_after_load preempts a request whose load landed; it loads again",
    "planted regressions": "they are legacy variants of the reference stack's rules, which "
    "vLLM does not run",
    "wire faults": "the lmcache tier's (its proxy sits between its own client and server)",
}
