"""The vllm tier's runs: what vLLM's real scheduler and LMCache's real connector do,
judged by kvfault's properties (docs/vllm/tier.md, docs/vllm/findings.md)."""

from __future__ import annotations

import contextlib

import pytest

from kvfault.faults.campaign.execute import check
from kvfault.faults.runs import RunContext
from kvfault.faults.vllm.catalog import FAULTS, JUDGED, SCENARIOS, VllmRow
from kvfault.reference.trace import Ev


@contextlib.contextmanager
def fixed(executor, on: bool):
    before = executor.fix
    executor.fix = on
    try:
        yield
    finally:
        executor.fix = before


def run(executor, row: VllmRow | None, scenario: str = "prefix_reuse", seed: int = 0):
    injectors = [row.factory(seed)] if row is not None else []
    result, _ = executor.execute(scenario, RunContext(seed=seed, injectors=injectors))
    return result, injectors


def test_tensor_pages_read_back_only_what_was_written() -> None:
    import torch

    from kvfault.faults.vllm.pages import TensorPages

    tensors = {n: torch.zeros(2, 4, 16, 2, 16) for n in ("l0", "l1")}
    pages = TensorPages(torch, tensors)
    pages.write(1, -(2**62) + 12345)
    pages.write(2, 2**62 - 7)
    assert pages.read(1) == -(2**62) + 12345 and pages.read(2) == 2**62 - 7
    assert pages.read(0) is None  # never written
    tensors["l1"][:, 2, 3, 1, 5] += 1  # one element of one layer differs
    assert pages.read(2) is None


def test_prefix_reuse_loads_from_lmcache_and_holds_every_property(executor) -> None:
    result, _ = run(executor, None)
    loads = {e.req_id: e.data["kv_end"] for e in result.trace.of(Ev.DISPATCH)}
    assert loads == {"b0-s0": 128, "b1-s0": 192}  # whole chunks, the last token kept
    applied = [e.data["outcome"] for e in result.trace.of(Ev.COMPLETION_APPLIED)]
    assert applied == ["finished", "finished"]
    assert len(list(result.trace.of(Ev.OUTPUT))) == 4
    assert check(result, SCENARIOS["prefix_reuse"].properties) == []


def test_a_wrong_restore_is_seen_by_correctness(executor) -> None:
    # The break by hand: the first block a load restored is overwritten before the
    # request computes from it. vLLM cannot see it; the judge must.
    row = VllmRow("fault", "corrupt_load", "break by hand", "prefix_reuse", fault="corrupt_load")
    result, injectors = run(executor, row)
    assert injectors[0].fired == 1
    found = check(result, ["correctness"])
    assert found and "differs from its cold run" in found[0].message


IS_IN = "assert req_id in self.requests"


@pytest.mark.parametrize(
    "fault, line, report",
    [
        ("duplicated_completion", "assert RequestStatus.is_finished(req.status)", "load"),
        # The stale load and LMCache's send of one request in one output: vLLM applies
        # the load (frees the request) and dies on the send.
        ("stale_completion", IS_IN, "save"),
        ("invalid_blocks_fail", IS_IN, "save"),
        ("abort_while_loading", IS_IN, "load"),
        ("abort_load_same_step", IS_IN, "save"),  # the same shape as stale_completion
        ("abort_in_load_step", IS_IN, "save"),
    ],
)
def test_the_scheduler_dies_and_the_guard_keeps_it_alive(executor, fault, line, report) -> None:
    row = FAULTS[fault]
    with fixed(executor, False):
        result, injectors = run(executor, row)
    assert injectors[0].fired >= 1
    stop = next(iter(result.trace.of(Ev.STOP)))
    assert stop.data["error"] == "AssertionError"
    assert "vllm/v1/core/sched/scheduler.py:" in stop.data["where"] and line in stop.data["where"]
    assert stop.op is not None and stop.op.kind.value == report  # the report vLLM died on
    assert any(v.prop == "no_false_stop" for v in check(result, JUDGED))
    with fixed(executor, True):
        result, _ = run(executor, row)
    assert not list(result.trace.of(Ev.STOP))
    assert check(result, SCENARIOS[row.scenario].properties) == []


def test_an_abort_applied_in_its_loads_step_kills_the_engine_with_no_late_retrieve(
    executor,
) -> None:
    # vLLM's EngineCore.step applies an abort that arrived during the forward before
    # update_from_output: the load lmcache reported in that output frees the request,
    # and lmcache reports it done sending next step (it stored nothing).
    with fixed(executor, False):
        result, _ = run(executor, FAULTS["abort_in_load_step"])
    acted = [e for e in result.trace.of(Ev.FAULT) if e.data.get("injector") != "vllm"]
    assert len(acted) == 1 and acted[0].data.get("aborted")  # nothing made a load late
    aborted = acted[0].req_id
    assert aborted in {e.req_id for e in result.trace.of(Ev.COMPLETION_APPLIED)}
    stop = next(iter(result.trace.of(Ev.STOP)))
    assert stop.op is not None and (stop.op.req_id, stop.op.kind.value) == (aborted, "save")
    assert stop.step == acted[0].step + 1
    assert "assert req_id in self.requests" in stop.data["where"]


def test_a_failed_load_is_recomputed_under_the_recompute_policy(executor) -> None:
    row = FAULTS["invalid_blocks_recompute"]
    result, _ = run(executor, row)
    applied = {e.req_id: e.data["outcome"] for e in result.trace.of(Ev.COMPLETION_APPLIED)}
    # Which load lmcache submits first follows which lookup answered first.
    failed = next(iter(result.trace.of(Ev.FAULT))).req_id
    assert applied == {r: "failed" if r == failed else "finished" for r in ("b0-s0", "b1-s0")}
    assert not list(result.trace.of(Ev.STOP))
    assert check(result, SCENARIOS[row.scenario].properties) == []


def test_a_lost_completion_leaves_the_request_waiting_forever(executor) -> None:
    # vLLM has no bound on WAITING_FOR_REMOTE_KVS: the run hits its limit.
    result, injectors = run(executor, FAULTS["lost_completion"])
    assert injectors[0].fired == 1 and result.hung
    assert [v.prop for v in check(result, ["liveness"])] == ["liveness"]


def test_a_run_past_its_limit_is_killed_and_the_next_run_works(executor, monkeypatch) -> None:
    import kvfault.faults.vllm.executor as ex

    monkeypatch.setattr(ex, "SETUP_S", -7.5)  # the run's 8 s limit becomes 0.5 s
    with pytest.raises(ex.VllmRunError, match="passed 0.5s; killed"):
        run(executor, None)
    monkeypatch.undo()
    result, _ = run(executor, None)  # the warm interpreter forks the next run as before
    assert check(result, SCENARIOS["prefix_reuse"].properties) == []


def test_a_second_process_under_another_hash_seed_reuses_the_stored_prefix(executor) -> None:
    # The store runs under PYTHONHASHSEED=seed, the resend in another process under
    # seed+1: vLLM's NONE_HASH, hence its block hashes, differ; lmcache's MP server keys
    # chunks by token ids (blake3), so the second process loads what the first stored.
    result, _ = run(executor, None, scenario="cross_seed_reuse")
    lookups = {e.req_id: e.data for e in result.trace.of(Ev.LOOKUP)}
    first, second = lookups["a0-s0"], lookups["e1-b0-s0"]
    assert (first["server"], second["server"]) == ("engine_0", "engine_1")
    assert first["vllm_block_hash"] != second["vllm_block_hash"]
    loads = {e.req_id: e.data["kv_end"] for e in result.trace.of(Ev.DISPATCH)}
    assert loads == {"e1-b0-s0": 128, "e1-b1-s0": 192}
    assert check(result, SCENARIOS["cross_seed_reuse"].properties) == []


def test_two_server_sets_on_one_host_hold_their_own_endpoints_and_pools(executor) -> None:
    result, _ = run(executor, None, scenario="two_servers")
    binds: dict[str, list[str]] = {}
    for e in result.trace.of(Ev.BIND):
        binds.setdefault(e.data["server"], []).append(e.data["path"])
    assert set(binds) == {"engine_0", "engine_1"}
    assert all(len(paths) == 2 for paths in binds.values())  # endpoint and shm pool
    assert not set(binds["engine_0"]) & set(binds["engine_1"])
    # Both ran at once: each set's first lookup came before the other's last unbind.
    first_lookup = {e.data["server"]: e.t for e in reversed(list(result.trace.of(Ev.LOOKUP)))}
    last_unbind = {e.data["server"]: e.t for e in result.trace.of(Ev.UNBIND)}
    assert first_lookup["engine_1"] < last_unbind["engine_0"]
    assert first_lookup["engine_0"] < last_unbind["engine_1"]
    loads = sorted(e.req_id for e in result.trace.of(Ev.DISPATCH))
    assert loads == ["b0-s0", "b1-s0", "e1-b0-s0", "e1-b1-s0"]
    assert check(result, SCENARIOS["two_servers"].properties) == []


@pytest.mark.parametrize("guard", [False, True])
def test_a_preempted_request_loads_again_under_its_id(executor, guard) -> None:
    # reset_prefix_cache(reset_running_requests=True) preempts both loaded requests;
    # each looks lmcache up again and its second load (generation 1) is applied. With
    # the guard too: it must pass a second load under the same id (findings.md).
    with fixed(executor, guard):
        result, injectors = run(executor, FAULTS["preempt_after_load"])
    assert injectors[0].fired == 1
    # Which requests ran at the reset follows which loads had landed by then.
    preempted = next(iter(result.trace.of(Ev.FAULT))).data["preempted"]
    assert preempted
    applied = sorted(str(e.op) for e in result.trace.of(Ev.COMPLETION_APPLIED))
    assert applied == sorted(
        f"load:{r}#{g}" for r in ("b0-s0", "b1-s0") for g in ((0, 1) if r in preempted else (0,))
    )
    assert not list(result.trace.of(Ev.STOP)) and not result.hung
    assert check(result, SCENARIOS["prefix_reuse"].properties) == []


def test_two_pictures_with_the_same_ids_each_load_only_their_own_kv(executor) -> None:
    # x and y: one prompt's token ids (text and a picture's placeholder ids), two
    # pictures. vLLM's block hashes differ by picture (its mm extra keys); LMCache's
    # MP connector folds each picture's identifier into the ids it keys (lookup key).
    result, _ = run(executor, None, scenario="two_pictures")
    prompts = {r.prompt_token_ids for r in result.requests.values()}
    assert len(prompts) == 1 and len({r.cache_seed for r in result.requests.values()}) == 2
    lookups = {e.req_id: e.data for e in result.trace.of(Ev.LOOKUP)}
    assert {r: d["kv_hit"] for r, d in lookups.items()} == {
        "x0-s0": 0, "y0-s0": 0, "x1-s0": 128, "y1-s0": 128
    }  # fmt: skip
    hashes = {r: d["vllm_block_hash"] for r, d in lookups.items()}
    assert hashes["x0-s0"] == hashes["x1-s0"] != hashes["y0-s0"] == hashes["y1-s0"]
    keys = {e.req_id: e.data["first"] for e in result.trace.of(Ev.KEY)}
    assert keys["x0-s0"] == keys["x1-s0"] != keys["y0-s0"] == keys["y1-s0"]
    loads = {e.req_id: e.data["kv_end"] for e in result.trace.of(Ev.DISPATCH)}
    assert loads == {"x1-s0": 128, "y1-s0": 128}
    assert check(result, SCENARIOS["two_pictures"].properties) == []


def test_pictures_unkeyed_in_lmcache_share_kv_and_the_judge_sees_it(executor) -> None:
    # The break by hand: LMCache's request tracker sees no pictures, so it keys the
    # bare token ids; vLLM still hands the runner each request's own picture. y0 then
    # loads x0's KV: correctness and keys must fail.
    row = VllmRow("fault", "pictures_unkeyed", "break by hand", "two_pictures",
                  fault="pictures_unkeyed")  # fmt: skip
    result, injectors = run(executor, row, scenario="two_pictures")
    assert injectors[0].fired == 1
    loads = {e.req_id: e.data["kv_end"] for e in result.trace.of(Ev.DISPATCH)}
    assert loads.get("y0-s0") == 128
    found = {(v.prop, v.message) for v in check(result, SCENARIOS["two_pictures"].properties)}
    assert ("correctness", "output of y0-s0 differs from its cold run") in found
    assert any(p == "keys" and "lookup key" in m and "2 different media" in m for p, m in found)
