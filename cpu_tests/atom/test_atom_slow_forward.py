"""``slow_first_forward`` and its hybrid twin ``dsv4_slow_first_forward``: the worker's
first forward (the stored prompt's prefill; on the DeepSeek-V4 server the forward of
its first 512 tokens) takes 2 s. At the checkout ATOM hands lmcache the prompt's save
only after that forward ended (the save frontier is the scheduler's computed count,
``seq.num_cached_tokens``, which advances once the forward has run), and both rows
pass. An ATOM planted in a scratch clone to count the tokens the step schedules instead
(``seq.num_tokens``: the dense connector's save frontier, the hybrid connector's PAGE
frontier) dispatches the save with the forward that computes its blocks: lmcache's
store runs during the slow forward, reads blocks not yet written, and the resent prompt
restores them, so each row fails on ``correctness``."""

from __future__ import annotations

import pytest
from atom_planted import planted

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.campaign.execute import run_case
from kvfault.reference.trace import Ev

DENSE = "atom/kv_transfer/offload/dense/connector.py"
HYBRID = "atom/kv_transfer/offload/hybrid/dsv4/connector.py"
# build_connector_meta's save frontier: the dense connector's.
DENSE_SCHEDULED_FRONTIER = (
    "            computed = min(\n"
    '                int(getattr(seq, "num_cached_tokens", 0)),\n'
    "                int(seq.num_prompt_tokens),\n"
    "            )\n"
    "            is_last_prefill",
    "            computed = min(\n"
    "                int(seq.num_tokens),  # planted: the tokens scheduled, not computed\n"
    "                int(seq.num_prompt_tokens),\n"
    "            )\n"
    "            is_last_prefill",
)
# The hybrid connector's PAGE frontier (its SLOT sidecar keeps the computed count: a
# sidecar is saved only at a boundary the computed count stands on).
HYBRID_SCHEDULED_PAGE_FRONTIER = (
    "            aligned = (computed // chunk) * chunk\n            sidecar_candidate",
    "            aligned = (min(int(seq.num_tokens), int(seq.num_prompt_tokens)) // chunk) "
    "* chunk  # planted\n            sidecar_candidate",
)
ROWS = ("slow_first_forward", "dsv4_slow_first_forward")
PLANTS = {
    "slow_first_forward": (DENSE_SCHEDULED_FRONTIER, DENSE),
    "dsv4_slow_first_forward": (HYBRID_SCHEDULED_PAGE_FRONTIER, HYBRID),
}


def _run(src: str, name: str) -> tuple[list[str], str]:
    """``name``'s violations on ``src`` and when the first store of ``first`` was sent
    to lmcache: ``before`` the slow forward ended (which computes the blocks after its
    wait), ``after`` it, or ``never``."""
    row = catalog.ROWS[name]
    faults = [row.factory(0)]
    with atom_executor(src) as executor:
        res = run_case(row.scenario, 0, injectors=lambda: faults, executor=executor)
    assert res.fired.get("slow_first_forward") == 1, res.fired  # it ran
    where, ended = "never", False
    for e in res.run.trace.events:
        if e.kind == Ev.FORWARD_END and e.data.get("index") == 0:
            ended = True
        elif e.kind == Ev.SENT and e.req_id == "first" and e.data.get("what") == "store":
            where = "after" if ended else "before"
            break
    return [f"{v.prop}: {v.message}" for v in res.violations], where


@pytest.mark.parametrize("name", ROWS)
def test_the_checkout_saves_after_the_slow_forward_and_passes(atom_src, name):
    assert _run(atom_src, name) == ([], "after")


@pytest.mark.parametrize("name", ROWS)
def test_a_save_frontier_of_scheduled_tokens_fails_the_row(atom_src, tmp_path, name):
    edit, file = PLANTS[name]
    found, where = _run(planted(atom_src, tmp_path / "atom", edit, file=file), name)
    assert where == "before", where
    assert "correctness: restored pages differ from recompute" in found, found
    assert "correctness: output of again differs from its cold run" in found, found
