"""``efficiency``'s sidecar rule: a lookup marked ``sidecars`` (a hybrid connector that
resumes only where the request's state at a boundary is stored, ATOM's DSV4 SLOT
sidecar) counts its prefix loadable only up to the largest chunk boundary below the
prompt's end where a sidecar of the same content was stored (``sidecar`` events) by a
save reported finished, whatever the PAGE data alone would allow."""

from __future__ import annotations

from kvfault.faults.properties.ledger import efficiency
from kvfault.faults.runs import EngineOutcome, RunResult
from kvfault.reference.stack.engine import EngineConfig
from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import Geometry, OperationId, OpKind, Request

CHUNK = 64
PROMPT = tuple(range(3, 3 + 2 * CHUNK))  # two chunks: the tier's hit of it is 128
OTHER = tuple(range(1000, 1000 + 2 * CHUNK))  # another prompt of two chunks


def _run(
    boundaries: tuple[int, ...],
    sidecars: bool = True,
    owner: str = "first",
    outcome: str = "finished",
    after_lookup: bool = False,
) -> RunResult:
    """``first`` saves the prompt's two chunks (PAGE data, reported finished); a second
    save, of ``owner``'s prompt, stores sidecars at ``boundaries`` and is reported
    ``outcome``. Then ``again`` (the same prompt) looks up: it hits 128 and
    claims 0. With ``after_lookup`` the sidecars are recorded after that lookup."""
    clock = iter(range(100))
    trace = Trace(lambda: float(next(clock)))
    pages, side = OperationId("first", 0, OpKind.SAVE), OperationId(owner, 1, OpKind.SAVE)

    def stored() -> None:
        for b in boundaries:
            trace.record(Ev.SIDECAR, op=side, req_id=owner, boundary=b)

    trace.record(Ev.SAVE, op=pages, req_id="first", start=0, end=2 * CHUNK)
    trace.record(Ev.FINISHED_REPORTED, op=pages, req_id="first", outcome="finished")
    trace.record(Ev.SAVE, op=side, req_id=owner, start=0, end=2 * CHUNK)
    if not after_lookup:
        stored()
    trace.record(Ev.FINISHED_REPORTED, op=side, req_id=owner, outcome=outcome)
    flag = {"sidecars": True} if sidecars else {}
    data = dict(prompt_len=2 * CHUNK, kv_hit=2 * CHUNK, hbm_hit=0, claim=0, kv_end=0, states=[])
    trace.record(Ev.LOOKUP, req_id="again", hybrid=False, **data, **flag)
    if after_lookup:
        stored()
    requests = {r: Request(r, PROMPT, max_output_tokens=2) for r in ("first", "again")}
    requests["other"] = Request("other", OTHER, max_output_tokens=2)
    return RunResult(
        scenario="dsv4_chunk_aligned",
        seed=0,
        trace=trace,
        config=EngineConfig(geometry=Geometry(block_size=16, chunk_size=CHUNK)),
        requests=requests,
        outcomes=[EngineOutcome(None, 2.0, 0, {}, hung=False)],
        injectors=[],
    )


def _misses(run: RunResult) -> list[str]:
    return [v.message for v in efficiency(run) if "loadable" in v.message]


def test_a_sidecar_only_at_the_prompt_end_leaves_nothing_loadable():
    # The whole prompt hits; a claim must leave its last token, so it could resume at
    # 64 only, where no sidecar was stored: claiming 0 is right.
    assert _misses(_run(boundaries=(128,))) == []


def test_a_sidecar_below_the_prompt_end_makes_its_boundary_loadable():
    (msg,) = _misses(_run(boundaries=(64, 128)))
    assert msg == "again claims 0 tokens of a 128-token tier hit; 64 are loadable"


def test_a_lookup_without_sidecars_counts_the_page_data_alone():
    (msg,) = _misses(_run(boundaries=(128,), sidecars=False))
    assert msg.endswith("64 are loadable")


def test_a_sidecar_of_another_prompt_does_not_count():
    assert _misses(_run(boundaries=(64,), owner="other")) == []


def test_a_sidecar_counts_only_once_its_save_is_reported_finished():
    assert _misses(_run(boundaries=(64,), outcome="failed")) == []


def test_a_sidecar_stored_after_the_lookup_does_not_count_at_it():
    assert _misses(_run(boundaries=(64,), after_lookup=True)) == []
