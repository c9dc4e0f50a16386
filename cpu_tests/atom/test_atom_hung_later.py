"""What one retrieve that never answers does to the loads of LATER batches, at the
checkout: on the dense connector (``hung_retrieve_later_batch``, lead 5) a stored
prompt sent again after the hang has its load dispatched and never run (ATOM's one
load thread); on the hybrid connector (``dsv4_hung_retrieve_later``, a lead) the hung
batch holds ATOM's one SLOT staging row, so a later batch's load is refused at once
and recomputed, and a prompt stored after the hang is not loaded when sent again."""

from __future__ import annotations

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.campaign.execute import run_case
from kvfault.reference.trace import Ev


def _run(atom_src: str, name: str):
    row = catalog.ROWS[name]
    fault = row.factory(0)
    with atom_executor(atom_src) as executor:
        res = run_case(row.scenario, 0, injectors=lambda: [fault], executor=executor)
    assert fault.fired >= 1, fault.fired  # the retrieve hung
    return res


def _first(res, kind: Ev, req: str):
    return next(
        (e for e in res.run.trace.of(kind) if (e.op.req_id if e.op else e.req_id) == req), None
    )


def test_a_later_batchs_load_waits_behind_the_hung_retrieve_on_the_dense_connector(atom_src):
    res = _run(atom_src, "hung_retrieve_later_batch")
    hung = next(e for e in res.run.trace.of(Ev.FAULT) if e.data.get("injector") == "hung_retrieve")
    later = _first(res, Ev.DISPATCH, "again2")
    assert later is not None and later.t > hung.t  # dispatched after the hang fired
    assert _first(res, Ev.RETRIEVE_TERMINAL, "again2") is None  # and never ended
    assert _first(res, Ev.OUTPUT, "again2") is None
    assert res.run.hung
    assert [v.prop for v in res.violations][:1] == ["liveness"]


def test_one_hung_page_retrieve_makes_the_hybrid_connector_refuse_later_batches_loads(atom_src):
    res = _run(atom_src, "dsv4_hung_retrieve_later")
    refused = _first(res, Ev.RETRIEVE_TERMINAL, "again2")
    assert refused is not None and not refused.data["ok"], refused
    assert "no retrieve ran" in refused.data["error"]
    outputs = {e.req_id: e.data["cached"] for e in res.run.trace.of(Ev.OUTPUT)}
    assert outputs["again2"] == 0 and outputs["again3"] == 0  # both recomputed, answered
    lookup = _first(res, Ev.LOOKUP, "again3").data
    assert (lookup["kv_hit"], lookup["claim"]) == (512, 0)  # stored after the hang, not loaded
    found = {v.prop: v.message for v in res.violations}
    assert list(found)[0] == "liveness", found
    # lmcache took no SLOT sidecar of the third prompt (its save found no staging row),
    # so nothing of it was loadable: no efficiency miss.
    assert not [e for e in res.run.trace.of(Ev.SIDECAR) if e.req_id == "third"]
    assert "efficiency" not in found, found
    assert "no retrieve ran" in found["load_failures"]
    assert "correctness" not in found  # every answer right
