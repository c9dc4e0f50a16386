"""``efficiency``'s HBM reload rule: a claim from the tier over a prefix that free HBM
blocks still hold (``hbm_resident`` on a lookup, which only a tier that reads the pages
records) is a load the stack's own prefix cache should have served (ATOM's #1725)."""

from __future__ import annotations

from kvfault.faults.properties.ledger import efficiency
from kvfault.faults.runs import EngineOutcome, RunResult
from kvfault.reference.stack.engine import EngineConfig
from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import Geometry, Request

CHUNK = 64


def _run(**lookup: int) -> RunResult:
    """One request of 300 tokens and one lookup; the tier holds nothing (no saves), so
    only the claim rules and the HBM reload rule can speak."""
    clock = iter(range(100))
    trace = Trace(lambda: float(next(clock)))
    data = dict(prompt_len=300, kv_hit=256, hbm_hit=0, claim=256, kv_end=256, states=[])
    data.update(lookup)
    trace.record(Ev.LOOKUP, req_id="third", hybrid=False, **data)
    trace.record(Ev.DISPATCH, req_id="third", start=data["hbm_hit"], kv_end=256, claim=256)
    req = Request("third", tuple(range(3, 303)), max_output_tokens=2)
    return RunResult(
        scenario="reload_twice",
        seed=0,
        trace=trace,
        config=EngineConfig(geometry=Geometry(block_size=16, chunk_size=CHUNK)),
        requests={"third": req},
        outcomes=[EngineOutcome(None, 2.0, 0, {}, hung=False)],
        injectors=[],
    )


def _reloads(run: RunResult) -> list[str]:
    return [v.message for v in efficiency(run) if "HBM still holds" in v.message]


def test_a_tier_load_of_what_free_hbm_blocks_hold_is_caught():
    (msg,) = _reloads(_run(hbm_resident=288))
    assert msg.startswith("third loads from the tier [0, 256) that HBM still holds")


def test_no_reload_when_hbm_served_what_it_holds():
    assert _reloads(_run(hbm_resident=288, hbm_hit=288, claim=288, kv_end=256)) == []


def test_a_tier_without_page_reads_is_not_judged_on_reloads():
    # No ``hbm_resident`` (the reference stack, or an HBM prefix cache turned off).
    assert _reloads(_run()) == []


def test_a_resident_prefix_no_longer_than_the_hbm_hit_is_no_reload():
    assert _reloads(_run(hbm_resident=128, hbm_hit=128, claim=256)) == []


def test_the_whole_prompt_resident_counts_up_to_the_prompt_minus_one_token():
    # A 256-token prompt wholly resident: HBM may claim at most 255, so an HBM hit of
    # 240 (15 blocks) with a tier claim past it is a reload of [240, 255).
    run = _run(prompt_len=256, hbm_resident=256, hbm_hit=240, claim=255, kv_hit=256)
    (msg,) = _reloads(run)
    assert "[240, 255)" in msg
