"""The candidate fixes of ATOM's findings (``--atom-fix``) and their proof on one commit
(``kvfault.faults.atom.fix_proof``): every fix names a row, an unknown fix is one line and exit
2, and a proof flips its row with the recorded path, or says NOT FIXED when the fix
does not fix the row it is run against; the two_servers fix (a per-server token) reaches
the hybrid connector's socket path too, with both servers at ATOM's default engine port."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from kvfault.faults.atom.at_main import PINNED
from kvfault.faults.atom.catalog import ROWS
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.atom.fixes import FIXES
from kvfault.faults.atom.recorded_path import path_difference
from kvfault.faults.atom.row_config import servers
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.campaign.kinds import scenario_target
from kvfault.faults.verdicts import Verdict


def test_every_fix_is_named_for_a_row_and_names_its_atom_function():
    for name, fix in FIXES.items():
        assert name in ROWS and fix.target.startswith("atom/"), name


def test_an_unknown_fix_is_one_line_and_exit_2(atom_src):
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--atom-src", atom_src,
         "--atom-fix", "nope", "--scenario", "chunk_aligned"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("--atom-fix 'nope' is no fix; known: " + ", ".join(FIXES))
    )


def test_path_difference_groups_lines_by_function_in_spans():
    ran = {("atom/a.py", "f", n) for n in (3, 4, 5, 9)} | {("atom/b.py", "g", 1)}
    other = {("atom/a.py", "f", 4), ("atom/b.py", "g", 1)}
    assert path_difference(ran, other) == ["atom/a.py:3 f: 3, 5, 9"]
    ran.add(("atom/a.py", "f", 6))
    assert path_difference(ran, other) == ["atom/a.py:3 f: 3, 5-6, 9"]


def test_review_proves_a_fix_on_one_commit_and_the_path_shows(atom_src, tmp_path):
    base, head = tmp_path / "base", tmp_path / "head"
    review = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "review", "-C", atom_src, "HEAD", "HEAD",
         "--tier", "atom", "--scenario", "chunk_aligned", "--scenario", "prefix_reuse",
         "--base-args", f"--atom-record-path {base}",
         "--head-args", f"--atom-fix chunk_aligned --atom-record-path {head}"],
        capture_output=True, text=True, timeout=900, env=dict(os.environ),
    )  # fmt: skip
    assert review.returncode == 0, review.stdout[-3000:] + review.stderr[-2000:]
    assert "**FIXED**: 0 breaking, 1 fixed" in review.stdout
    path = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.atom.recorded_path", str(base), str(head),
         "chunk_aligned", "--atom-src", atom_src],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert path.returncode == 0, path.stderr
    # Without the fix the load fails on the partial last chunk and ATOM reports it.
    assert "dense/connector.py" in path.stdout, path.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.atom.recorded_path", str(base), str(head), "two_servers"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 2 and "no recorded run of two_servers" in missing.stderr


def _binds(
    atom_src: str, fixes: tuple[str, ...]
) -> tuple[Verdict, str, dict[str, str], dict[str, int]]:
    """``dsv4_two_servers`` at seed 0 with ``fixes``: its verdict, signature, the lookup
    socket path each server's worker bound, and what each ``again`` request's lookup
    (its scheduler's lookup client) was answered (-1: no answer, lmcache's timeout)."""
    with atom_executor(atom_src, atom_fix=fixes) as executor:
        out = CaseRunner(keep_runs="all", executor=executor).run(
            Case(scenario_target("dsv4_two_servers", "atom"), 0)
        )
    events = out.fixed_result.run.trace.events
    hits = {
        e.req_id: -1 if "unanswered_s" in e.data else int(e.data["kv_hit"])
        for e in events
        if e.kind.value == "lookup" and str(e.req_id).endswith("-again")
    }
    return (
        out.verdict,
        out.signature,
        {e.data["server"]: e.data["path"] for e in events if e.kind.value == "bind"},
        hits,
    )


TOKEN_PATH = re.compile(r"engine_atom-offload-([0-9a-f]{12})-dp0_service_lookup_lmcache_rpc_port_0")


def test_the_two_servers_fix_reaches_the_hybrid_workers_socket_path(atom_src):
    # Finding 4 on the hybrid connector: its worker's lmcache metadata takes the engine
    # id from ATOM's lmcache_engine_id (config.py's build_lmcache_metadata, through
    # build_offload_engine), the function the fix wraps on ATOM's config module. Both
    # servers leave the engine --port at ATOM's default, as its recipes do, so the port
    # cannot tell them apart.
    assert [(s.name, s.port) for s in servers(ROWS["dsv4_two_servers"])] == [
        ("A", 8006),
        ("B", 8006),
    ]
    assert [(s.name, s.port) for s in servers(ROWS["two_servers"])] == [("A", 8006), ("B", 8006)]
    # With the fix each hybrid worker binds a path carrying its own server's token, and
    # each server's scheduler-side lookup reaches a server holding its prompt (which
    # only its own lmcache holds): scheduler and workers of one server read one token.
    verdict, signature, paths, hits = _binds(atom_src, ("two_servers",))
    assert verdict == Verdict.PASS, signature
    tokens = {name: TOKEN_PATH.fullmatch(path) for name, path in paths.items()}
    assert set(tokens) == {"A", "B"} and all(tokens.values()), paths
    assert tokens["A"].group(1) != tokens["B"].group(1), paths  # type: ignore[union-attr]
    assert hits == {"A-again": 512, "B-again": 512}, hits
    if not _head(atom_src).startswith(PINNED):
        return  # another ATOM may have fixed it
    verdict, signature, paths, _ = _binds(atom_src, ())
    assert verdict == Verdict.FAIL and signature.startswith("identity: B binds"), signature
    assert set(paths.values()) == {"engine_atom-offload-dp0_service_lookup_lmcache_rpc_port_0"}
    assert set(paths) == {"A", "B"}


def _head(src: str) -> str:
    return subprocess.run(
        ["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()


@pytest.mark.parametrize(
    "row, connector",
    [("hung_retrieve", "DenseOffload"), ("dsv4_hung_retrieve", "DSV4Offload")],
)
def test_a_hung_row_records_the_path_its_processes_ran(atom_src, tmp_path, row, connector):
    # The hung load is let go at the worker's close, and the load queued behind it runs
    # then: the worker waits for it before lmcache's close frees the pool it copies
    # from (without that wait the worker died there and its close never replied).
    run = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--atom-src", atom_src,
         "--fault", row, "--atom-record-path", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    assert "FAIL atom:fault:" + row in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    record = json.loads((tmp_path / f"{row}-seed0.json").read_text())
    ran = {fn for _f, fn, _n, _k in record}
    assert f"{connector}Scheduler.get_num_new_matched_tokens" in ran  # the scheduler's lookup
    loads = [k for _f, fn, _n, k in record if fn == f"{connector}Connector._do_load_req"]
    assert loads[0] == 2  # the load thread's two loads: the hung one, the one behind it
