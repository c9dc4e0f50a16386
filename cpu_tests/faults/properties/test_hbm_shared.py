"""``hbm_owners``' rule on shared blocks: every block a request takes from the prefix
cache lies within its HBM hit, since it computes from there on. Until it was fixed, the
scheduler took a fully cached prompt's last block from the cache as well, reported an
HBM hit a block short of it and recomputed into it (two resends of one 16-token prompt
overwrote each other's page); these traces are what it recorded."""

from __future__ import annotations

from kvfault.faults.properties.ledger import hbm_owners
from kvfault.faults.runs import EngineOutcome, RunContext, RunResult
from kvfault.faults.scenarios.generated import Prompt, Workload, run_workload
from kvfault.reference.stack.engine import EngineConfig
from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import Geometry, Request

BS = 16


def _run(prompt_len: int, took: list[int], shared: int, hbm_hit: int | None) -> RunResult:
    """One request that takes ``took`` (``shared`` of them from the prefix cache) and,
    unless ``hbm_hit`` is None (a tier that records no lookup), looks up."""
    clock = iter(range(100))
    trace = Trace(lambda: float(next(clock)))
    trace.record(Ev.BLOCKS, req_id="again", engine="S1", took=took, shared=shared)
    if hbm_hit is not None:
        trace.record(
            Ev.LOOKUP,
            req_id="again",
            prompt_len=prompt_len,
            kv_hit=0,
            states=[],
            hbm_hit=hbm_hit,
            claim=0,
            kv_end=0,
            hybrid=False,
        )
    req = Request("again", tuple(range(3, 3 + prompt_len)), max_output_tokens=2)
    return RunResult(
        scenario="generated_dense",
        seed=0,
        trace=trace,
        config=EngineConfig(geometry=Geometry(block_size=BS, chunk_size=BS)),
        requests={"again": req},
        outcomes=[EngineOutcome(None, 2.0, 0, {}, hung=False)],
        injectors=[],
    )


def test_a_whole_block_prompt_sharing_the_block_it_computes_is_caught():
    (v,) = hbm_owners(_run(16, [2], 1, 0))
    assert v.message == (
        "S1 block 2 shared by again from the prefix cache lies past its HBM hit 0: "
        "it computes into a block it shares"
    )


def test_the_shared_block_named_is_the_first_past_the_hit():
    (v,) = hbm_owners(_run(32, [4, 7], 2, 16))
    assert v.message.startswith("S1 block 7 shared by again")


def test_shared_blocks_within_the_hit_are_no_violation():
    assert hbm_owners(_run(32, [4, 9], 1, 16)) == []
    assert hbm_owners(_run(48, [4, 7, 9], 2, 32)) == []


def test_blocks_without_a_lookup_are_not_judged_on_the_hit():
    assert hbm_owners(_run(16, [2], 1, None)) == []


def test_the_healthy_stack_shares_only_blocks_within_the_hit():
    # One two-block prompt sent twice on one server: its first block is an HBM hit,
    # its last is computed again into a block of its own.
    g = Geometry(block_size=BS, chunk_size=BS, prefill_budget=BS, state_checkpoint_interval=BS)
    w = Workload("dense", g, "block", 1, False, (Prompt(32, True, False),), (((0,), ()),) * 2)

    run = run_workload(RunContext(seed=0), "generated_dense", w)
    taken = [e.data for e in run.trace.of(Ev.BLOCKS) if "took" in e.data]
    hits = [e.data["hbm_hit"] for e in run.trace.of(Ev.LOOKUP)]
    assert [d["shared"] for d in taken] == [0, 1] and hits == [0, 16]
    assert hbm_owners(run) == []
