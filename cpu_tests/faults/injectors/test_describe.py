"""How faults name themselves in reports and campaign rows: each injector, trigger,
fault spec and plan describes its own parameters, so a reader can rebuild the run."""

from __future__ import annotations

import pytest

from kvfault.faults.injectors import (
    EngineRestart,
    EvictAfterLookup,
    FenceFailure,
    HashOrderShuffle,
    LateVisibility,
    LostCompletion,
    LostTierReply,
    PortZeroIds,
    RetrieveFailure,
    SaltedId,
    SlowForward,
    Trigger,
)
from kvfault.faults.injectors.plans import FaultPlan, FaultSpec


@pytest.mark.parametrize(
    "trigger, text",
    [
        (Trigger(), "never"),
        (Trigger((2, 5)), "nth=[2, 5]"),
        (Trigger(p=0.25), "p=0.25"),
        (Trigger((1,), 0.5), "nth=[1], p=0.5"),
    ],
)
def test_trigger_describes_what_it_hits(trigger, text):
    assert trigger.describe() == text


@pytest.mark.parametrize(
    "injector, text",
    [
        (SlowForward({0: 29.0}), "slow_forward({0: 29.0})"),
        (SlowForward({0: 5.0}, p=0.5, seconds=3.0), "slow_forward({0: 5.0}, p=0.5 -> 3s)"),
        (EngineRestart((3,), limit=2), "engine_restart(nth=[3], limit=2)"),
        (LostCompletion((1, 4)), "lost_completion(nth=[1, 4])"),
        (LostTierReply(p=0.05), "lost_tier_reply(p=0.05)"),
        (RetrieveFailure((2,)), "retrieve_failure(nth=[2])"),
        (EvictAfterLookup((1,), chunk=-1), "evict_after_lookup(nth=[1], chunk=-1)"),
        (LateVisibility((1,), delay_s=2.5), "late_visibility(nth=[1], delay_s=2.5)"),
        (FenceFailure((1,)), "fence_failure(nth=[1], transient)"),
        (
            FenceFailure((1,), persistent=True, name="fence_failure_persistent"),
            "fence_failure_persistent(nth=[1], persistent)",
        ),
        (PortZeroIds(), "port_zero_ids(ports=[0, 0])"),
        (PortZeroIds((5, 7)), "port_zero_ids(ports=[5, 7])"),
        (HashOrderShuffle(3, replay_salt=4), "hash_order_shuffle(salt=3, replay_salt=4)"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_injector_describes_its_parameters(injector, text):
    assert injector.describe() == text


def test_spec_and_plan_describe_every_fault_and_the_seed():
    spec = FaultSpec("lost_completion", {"nth": [1, 3]})
    assert spec.describe() == "lost_completion(nth=[1, 3])"
    plan = FaultPlan((spec, FaultSpec("engine_restart", {"nth": [2]})), 7)
    assert plan.describe() == "seed 7: lost_completion(nth=[1, 3]), engine_restart(nth=[2])"
    assert FaultPlan((), 0).describe() == "seed 0: no faults"
    two = FaultSpec.of("engine_restart", nth=[2], limit=1)
    assert two.describe() == "engine_restart(limit=1, nth=[2])"


def test_a_salted_id_compares_as_its_text():
    a, b = SaltedId("req-1", 1), SaltedId("req-1", 2)
    assert a == b == "req-1" and not (a != b) and not (a != "req-1")
    assert a != "req-2" and not (a == "req-2")
    assert hash(a) != hash(b)  # the salt, not the text alone, picks the bucket


def test_a_salted_id_pickles_as_plain_text():
    import pickle

    back = pickle.loads(pickle.dumps(SaltedId("req-1", 9)))
    assert back == "req-1" and type(back) is str
