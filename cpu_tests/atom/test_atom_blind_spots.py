"""The judge's blind spots on the atom tier stay closed: a bug planted by hand in a
scratch clone of ATOM's dense connector (one line each) fails rows that pass on the
checkout as it is.

- A worker that reports every successful load as failed: ATOM recomputes, every
  answer is right, and only what the retrieve returned (``retrieve_terminal``, judged
  by ``load_failures``) shows it.
- ATOM keying every KV cache dtype's data as bf16 (neither its page namespace nor
  lmcache's key tells bf16 from fp8): ``shared_tier_kv_dtype``'s fp8 server loads the
  bf16 server's bytes (``correctness``), also when lmcache's write into the shared
  tier lands late (the story waits for it before the fp8 server's request).
- A load reported done that wrote nothing: without poisoned blocks a resent prompt
  gets back blocks still holding its own pages, and the row passed; with them the
  restored pages and the answers are wrong (``correctness``)."""

from __future__ import annotations

from dataclasses import replace

from atom_planted import planted

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.campaign.execute import run_case

REPORTS_FAILED = ("            if loaded:\n", "            if loaded and False:\n")
WRITES_NOTHING = (
    "ret_mask = self._engine.retrieve(",
    "ret_mask = (lambda *a, **k: torch.ones(len(toks), dtype=torch.bool))(",
)


# shared_tier_kv_dtype with A's writes into the shared tier landing 0.5 s after its
# store returned: without the story's wait, B's request came first and missed.
SLOW_SHARE = replace(
    catalog.ROWS["shared_tier_kv_dtype"],
    kind="fault",
    name="shared_tier_kv_dtype_slow_share",
    faults=FaultSpec(slow_remote_write_s=0.5),
    fires=("slow_remote_write",),
    faulted=("A",),
)


def _violations(src: str, rows: list[str | catalog.AtomRow]) -> dict[str, list[str]]:
    out = {}
    with atom_executor(src) as executor:
        for named in rows:
            row = catalog.ROWS[named] if isinstance(named, str) else named
            faults = [row.factory(0)] if row.kind == "fault" else []
            res = run_case(row.scenario, 0, injectors=lambda f=faults: f, executor=executor)
            out[row.name] = [f"{v.prop}: {v.message}" for v in res.violations]
            if row.kind == "fault":
                assert any(res.fired.get(n) for n in row.fires), res.fired  # it ran
    return out


def _props(found: list[str]) -> set[str]:
    """The properties named by ``found``, violations as ``_violations`` gives them."""
    return {v.split(":", 1)[0] for v in found}


def _assert_unstored_load_fails(src: str, row: str) -> None:
    """``row`` on the ATOM at ``src`` (one of whose workers reports saves it never
    stored) fails ``load_failures`` on a retrieve that returned nothing."""
    found = _violations(src, [row])[row]
    assert "load_failures" in _props(found), found
    assert any("lmcache returned 0 of" in v for v in found), found


def _assert_failed_load_fails_again(src: str, row: str) -> None:
    """``row`` on the ATOM at ``src`` fails ``load_failures`` on a load that failed
    after an earlier load of the same chunks had failed (the recompute was never
    stored)."""
    found = _violations(src, [row])[row]
    assert any(
        v.startswith("load_failures:") and "after an earlier load of them had failed" in v
        for v in found
    ), found


def test_loads_reported_failed_fail_load_failures(atom_src, tmp_path):
    found = _violations(planted(atom_src, tmp_path / "atom", REPORTS_FAILED), ["prefix_reuse"])
    failed = [v for v in found["prefix_reuse"] if v.startswith("load_failures:")]
    assert failed, found
    assert "ATOM reported the load failed; lmcache returned" in failed[0]


def test_a_load_that_wrote_nothing_fails_correctness(atom_src, tmp_path):
    rows = ["prefix_reuse", "duplicate_completion"]
    found = _violations(planted(atom_src, tmp_path / "atom", WRITES_NOTHING), rows)
    for name in rows:
        assert any(v.startswith("correctness:") for v in found[name]), (name, found[name])


def test_the_checkout_as_it_is_passes_those_rows(atom_src):
    rows: list[str | catalog.AtomRow] = [
        "prefix_reuse", "duplicate_completion", "shared_tier_kv_dtype", SLOW_SHARE,
    ]  # fmt: skip
    names = ["prefix_reuse", "duplicate_completion", "shared_tier_kv_dtype", SLOW_SHARE.name]
    assert _violations(atom_src, rows) == {r: [] for r in names}


def test_one_namespace_for_two_kv_dtypes_fails_shared_tier_kv_dtype(atom_src, tmp_path):
    src = planted(
        atom_src,
        tmp_path / "atom",
        ('"kv_cache_dtype": str(getattr(config, "kv_cache_dtype", "auto")),',
         '"kv_cache_dtype": "auto",'),
        ("kv_dtype = dtypes.d_dtypes[config.kv_cache_dtype]",
         'kv_dtype = dtypes.d_dtypes["bf16"]'),
        file="atom/kv_transfer/offload/config.py",
    )  # fmt: skip
    found = _violations(src, ["shared_tier_kv_dtype", SLOW_SHARE])
    for name in ("shared_tier_kv_dtype", SLOW_SHARE.name):
        assert any(v.startswith("correctness:") for v in found[name]), found
