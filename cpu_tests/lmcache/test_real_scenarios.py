"""The scenarios (docs/design.md#scenarios) on the real LMCache tier (``kvfault.faults.lmcache.executor.LMCacheExecutor``): the fixed stack
holds every property of each scenario except determinism, in real time, against one
real lmcache server for the whole module.

Determinism (same seed, same trace digest) does not apply in real time: the answers
are the same, the times at which things happen are not; ``test_real_time_traces_differ``
shows both.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from kvfault.faults import SCENARIOS
from kvfault.faults.campaign import properties_of, run_case
from kvfault.faults.catalog import on_tier
from kvfault.faults.lmcache.executor import LMCacheExecutor
from kvfault.faults.lmcache.session import (
    DEFAULT_TIME_SCALE,
    MAX_TIME_SCALE,
    REFERENCE_LOOKUP_S,
    LMCacheSession,
    PumpedTier,
    cpu_share,
    lmcache_context,
    paced_time_scale,
)
from kvfault.faults.lmcache.wire_faults import WIRE_FAULTS
from kvfault.faults.lmcache.wire_proxy import WireFault, WireProxy
from kvfault.reference import Ev


@pytest.fixture(scope="module")
def session() -> Iterator[LMCacheSession]:
    """One real server for this module; closed (and checked clean) afterwards."""
    sess = LMCacheSession()
    try:
        sess.start()
        yield sess
    finally:
        sess.close()
    assert sess.leftovers() == [], sess.leftovers()


def outputs(result, tag: str) -> dict[str, tuple[int, ...]]:
    """Outputs of the requests whose id ends with ``-tag``, keyed by the id before it."""
    out = {}
    for ev in result.run.trace.of(Ev.OUTPUT):
        base, _, t = ev.req_id.rpartition("-")
        if t == tag:
            out[base] = tuple(ev.data["tokens"])
    return out


@pytest.mark.parametrize("name", on_tier("scenario", "lmcache"))
def test_scenario_holds_its_properties_on_the_real_tier(session: LMCacheSession, name: str) -> None:
    res = run_case(name, 0, executor=LMCacheExecutor(session))
    assert "determinism" not in res.checked
    assert set(res.checked) == set(SCENARIOS[name].properties) - {"determinism"}
    assert res.ok, [str(v) for v in res.violations]
    assert res.notes["tier"] == "lmcache" and not res.run.hung
    if name == "real_lost_completion_burst":
        # Its own fault: the lost completion stops the engine, naming that load.
        assert res.fired == {"lost_completion": 1}
        assert res.stop is not None and res.stop.startswith("LoadNotTerminal")
        lost = next(res.run.trace.of(Ev.FAULT))
        assert str(lost.op) in res.stop
    else:
        assert res.stop is None, res.stop


def test_restart_tier_kept_pass2_loads_and_answers_as_pass1(session: LMCacheSession) -> None:
    res = run_case("restart_tier_kept", 1, executor=LMCacheExecutor(session))
    assert res.ok, [str(v) for v in res.violations]
    first, second = outputs(res, "pass1"), outputs(res, "pass2")
    assert len(first) == 24 and second == first  # and both equal the cold run (correctness)
    loaded = list(res.run.trace.of(Ev.COPY_COMPLETE))
    assert len(loaded) >= 20  # pass 2 restores from the real server
    # Never more than the in-process tier (no visibility lag there): a real-tier hit
    # can only be one the stack was entitled to; a late store may only cost hits.
    memory = run_case("restart_tier_kept", 1, properties=["correctness"])
    real_rate, memory_rate = res.notes["pass2_hit_rate"], memory.notes["pass2_hit_rate"]
    assert 0.5 < real_rate <= memory_rate, (real_rate, memory_rate)


def test_two_images_b_never_hits_a(session: LMCacheSession) -> None:
    res = run_case("two_images", 2, executor=LMCacheExecutor(session))
    assert res.ok, [str(v) for v in res.violations]
    claims = {e.req_id: e.data["claim"] for e in res.run.trace.of(Ev.LOOKUP)}
    p0 = [r for r in claims if r.endswith("-p0")]
    p1 = [r for r in claims if r.endswith("-p1")]
    assert claims[p0[0]] == 0 and claims[p1[0]] == 0  # B after A: no hit on A's data
    assert all(claims[r] > 0 for r in claims if r.endswith("-p2"))  # each hits its own


def test_real_time_traces_differ_answers_do_not(session: LMCacheSession) -> None:
    a = run_case("real_restart_tier_kept", 3, executor=LMCacheExecutor(session))
    b = run_case("real_restart_tier_kept", 3, executor=LMCacheExecutor(session))
    assert a.ok and b.ok
    assert outputs(a, "pass2") == outputs(b, "pass2")
    assert a.digest != b.digest  # times differ: determinism is not a real-tier property


def test_runs_use_their_own_namespaces_and_close_their_tiers(session: LMCacheSession) -> None:
    ctx = lmcache_context(session, seed=4)
    res = SCENARIOS["two_servers"].run(ctx)
    factory = ctx.tier_factory
    tiers = factory.tiers  # type: ignore[attr-defined]
    assert len(tiers) == 2 and all(isinstance(t, PumpedTier) for t in tiers)
    assert len({t.model_name for t in tiers}) == 2  # two servers, two caches
    assert res.startup_error is None and len(list(res.trace.of(Ev.OUTPUT))) == 6
    factory.close()  # type: ignore[attr-defined]
    assert all(t.inner._closed for t in tiers)
    # A second run of the same seed starts empty: pass 1 of it hits nothing.
    again = run_case("real_restart_tier_kept", 4, executor=LMCacheExecutor(session))
    pass1 = [e for e in again.run.trace.of(Ev.LOOKUP) if e.req_id.endswith("-pass1")]
    assert pass1 and all(e.data["kv_hit"] == 0 for e in pass1[:1])


def test_the_time_scale_shrinks_deadlines_and_slow_forwards(session: LMCacheSession) -> None:
    res = run_case("real_restart_burst", 0, executor=LMCacheExecutor(session, 0.25))
    assert res.ok, [str(v) for v in res.violations]
    assert res.run.config.transfer_deadline_s == pytest.approx(7.5)
    assert res.run.config.bound_s == pytest.approx(10.0)
    slow = [e.data["seconds"] for e in res.run.trace.of(Ev.FAULT)]
    assert slow == [pytest.approx(29 * 0.25), pytest.approx(21 * 0.25)]


def test_properties_never_include_determinism(session: LMCacheSession) -> None:
    for name in (*on_tier("scenario", "lmcache"), *(w.scenario for w in WIRE_FAULTS.values())):
        props = properties_of(name, LMCacheExecutor(session))
        assert "determinism" not in props and "correctness" in props


def test_the_time_scale_follows_the_lookup_round_trip() -> None:
    assert paced_time_scale(REFERENCE_LOOKUP_S / 4) == DEFAULT_TIME_SCALE  # quiet: as chosen
    assert paced_time_scale(REFERENCE_LOOKUP_S) == pytest.approx(DEFAULT_TIME_SCALE)
    assert paced_time_scale(REFERENCE_LOOKUP_S * 3) == pytest.approx(3 * DEFAULT_TIME_SCALE)
    assert paced_time_scale(10.0) == MAX_TIME_SCALE  # never slower than the story itself


def test_the_time_scale_follows_the_cpu_share() -> None:
    # Lookups at the reference pace while other work takes the cores: the run's own
    # steps get a quarter of a core, so every bound is 4x longer.
    quick = REFERENCE_LOOKUP_S / 4
    assert paced_time_scale(quick, cpu_share=1.0) == DEFAULT_TIME_SCALE
    assert paced_time_scale(quick, cpu_share=0.25) == pytest.approx(4 * DEFAULT_TIME_SCALE)
    # The larger of the two slowdowns, never their product; still bounded above.
    assert paced_time_scale(REFERENCE_LOOKUP_S * 3, cpu_share=0.5) == pytest.approx(
        3 * DEFAULT_TIME_SCALE
    )
    assert paced_time_scale(REFERENCE_LOOKUP_S, cpu_share=0.25) == pytest.approx(
        4 * DEFAULT_TIME_SCALE
    )
    assert paced_time_scale(quick, cpu_share=0.01) == MAX_TIME_SCALE
    assert paced_time_scale(quick, cpu_share=0.0) == MAX_TIME_SCALE


def test_cpu_share_is_cpu_time_over_wall_time() -> None:
    now = [0.0]

    def wall() -> float:
        now[0] += 0.01
        return now[0]

    def quarter() -> float:  # the thread runs a quarter of the wall time passed
        return now[0] / 4

    assert cpu_share(0.5, wall=wall, cpu=quarter) == pytest.approx(0.25)
    assert 0 < cpu_share(0.02) <= 1.0  # the real clocks: a share of one core


def test_a_slower_server_gets_longer_bounds(session: LMCacheSession, monkeypatch) -> None:
    # Every lookup reply 15 ms late (4x the reference round trip): the measurement sees it.
    assert session.server is not None
    slow = WireProxy(session.server.url, [WireFault("delay", op="lookup", delay_s=0.015)])
    with slow:
        lookup_s = session.measure_pace(slow.url)
    assert lookup_s >= 0.015
    assert paced_time_scale(lookup_s) >= 0.015 / REFERENCE_LOOKUP_S * DEFAULT_TIME_SCALE
    # A run paces to what the check before it measured: its story and its tier's bounds.
    measured = session.measure_pace
    slower = 3 * REFERENCE_LOOKUP_S

    def as_if_slower(url: str) -> float:
        measured(url)
        session.lookup_s = slower
        session.cpu_share = 1.0  # the load of the box must not move this run's scale
        return slower

    monkeypatch.setattr(session, "measure_pace", as_if_slower)
    built: list[PumpedTier] = []
    monkeypatch.setattr(PumpedTier, "__init__", _recording(PumpedTier.__init__, built))
    res = run_case("real_restart_tier_kept", 5, executor=LMCacheExecutor(session))
    assert res.ok, [str(v) for v in res.violations]
    assert res.notes["lookup_s"] == slower
    assert res.notes["time_scale"] == pytest.approx(3 * DEFAULT_TIME_SCALE)
    assert res.run.config.transfer_deadline_s == pytest.approx(30 * 3 * DEFAULT_TIME_SCALE)
    assert built and all(
        t.inner.lookup_timeout_s == pytest.approx(3 * session.lookup_timeout_s) for t in built
    )


def _recording(init, into: list):  # type: ignore[no-untyped-def]
    def record(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        into.append(self)

    return record
