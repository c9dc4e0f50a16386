"""Single rows through the campaign API: a wrong restore through ATOM's real load path
is caught; the host leaves no process, socket or directory behind; the two-servers
finding is ATOM's engine id (a one-line patch that gives it the port makes the row
pass; ``kvfault prove`` shows both heads)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from faults.atom import catalog
from faults.atom.campaign import atom_campaign
from faults.atom.source import AtomSource
from faults.atom.spec import FaultSpec
from faults.verdicts import Verdict


@pytest.fixture(scope="module")
def campaign(atom_src):
    with atom_campaign(AtomSource.find(atom_src)) as c:
        yield c


def test_a_corrupted_restore_fails_correctness(campaign):
    row = dataclasses.replace(
        catalog.ROWS["retrieve_failure"],
        name="corrupt_load",
        faults=FaultSpec(corrupt_load=1),
        fires=("corrupt_load",),
    )
    out = campaign.run_row(row, 0)
    assert out.verdict is Verdict.FAIL
    assert any(
        v.prop == "correctness" and "restored pages differ" in v.message for v in out.violations
    ), out.detail


def test_a_healthy_reuse_loads_and_passes(campaign):
    out = campaign.run_row(catalog.ROWS["prefix_reuse"], 1)
    assert out.verdict is Verdict.PASS, out.detail
    kinds = [e.kind.value for e in out.run.trace.events]
    assert kinds.count("dispatch") == 2 and kinds.count("copy_complete") == 2


def test_a_host_leaves_nothing_behind(campaign):
    from faults.atom.host import AtomHost
    from faults.atom.spec import ServerSpec
    from faults.processes import running

    host = AtomHost(campaign.pool)
    server = host.start(ServerSpec("A"))
    sockets = os.listdir(host.socket_dir)
    assert sockets, "the worker's lookup socket is under the host's directory"
    assert all(running(pid) for pid in server.pids)
    host.close()
    assert not os.path.exists(host.dir)
    assert not any(running(pid) for pid in server.pids)


def test_a_broken_story_is_an_error_and_still_cleans_up(campaign, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def broken(run):
        run.server("A")
        raise RuntimeError("the story broke")

    row = dataclasses.replace(catalog.ROWS["prefix_reuse"], story=broken)
    out = campaign.run_row(row, 0)
    assert out.verdict is Verdict.ERROR and "the story broke" in out.detail
    assert list(tmp_path.iterdir()) == []


def test_two_servers_pass_when_the_engine_id_carries_the_port(atom_src, tmp_path, pytestconfig):
    scratch = tmp_path / "atom"
    subprocess.run(["git", "clone", "-q", atom_src, str(scratch)], check=True)
    config = scratch / "atom/kv_transfer/offload/config.py"
    text = config.read_text()
    old = 'return f"atom-offload-dp{dp_rank}"'
    if old not in text:
        pytest.skip("this ATOM's lmcache_engine_id is not the one-line form the patch edits")
    config.write_text(
        text.replace(old, "return f\"atom-offload-{getattr(config, 'port', 0)}-dp{dp_rank}\"")
    )
    git = [
        "git",
        "-C",
        str(scratch),
        "-c",
        "user.name=kvfault",
        "-c",
        "user.email=kvfault@localhost",
    ]
    subprocess.run([*git, "commit", "-qam", "engine id carries the port"], check=True)
    proc = subprocess.run(
        [
            sys.executable, "-m", "faults.prove", "-C", str(scratch),
            "--old", "HEAD~1", "--new", "HEAD", "--expect", "identity: B binds",
            "--", sys.executable, "-m", "faults.cli", "run", "--tier", "atom",
            "--atom-src", ".", "--scenario", "two_servers", "--no-progress",
        ],
        capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # the proof in the test log
        for line in proc.stdout.splitlines():
            reporter.write_line(line)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FIXED" in proc.stdout.splitlines()[-1]
