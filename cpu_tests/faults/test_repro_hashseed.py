"""Reproduction is deterministic: ``kvfault repro``, ``replay`` and ``run`` run under a
PYTHONHASHSEED they know (executing themselves again under it where the process's is
random or differs), every artifact records it, and a replay gets it back. The planted
hash-order regression names a different load under each hash seed, so it shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "restart_numbering_in_hash_order"


def kvfault(*args: str, cwd: Path, hashseed: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env["PYTHONPATH"] = str(ROOT)
    if hashseed is not None:
        env["PYTHONHASHSEED"] = hashseed
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300,
    )  # fmt: skip


def loads(out: str) -> list[str]:
    """The loads the output names (``...-burst#216``): what a hash order changes."""
    return re.findall(r"-burst#\d+", out)


def test_repro_names_the_same_load_every_time_and_records_the_hash_seed(tmp_path):
    runs = [kvfault("repro", NAME, "--seed", "0", cwd=tmp_path) for _ in range(3)]
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
    assert loads(runs[0].stdout)
    assert runs[1].stdout == runs[0].stdout and runs[2].stdout == runs[0].stdout
    assert f"replay: PYTHONHASHSEED=0 kvfault repro {NAME} --seed 0" in runs[0].stdout
    artifact = tmp_path / ".kvfault" / "artifacts" / f"regression-{NAME}-seed0.json"
    assert json.loads(artifact.read_text())["pythonhashseed"] == "0"


def test_replay_runs_under_the_recorded_hash_seed_whatever_its_own(tmp_path):
    made = kvfault("repro", NAME, "--seed", "0", cwd=tmp_path, hashseed="11")
    assert made.returncode == 0, made.stdout + made.stderr
    artifact = tmp_path / ".kvfault" / "artifacts" / f"regression-{NAME}-seed0.json"
    assert json.loads(artifact.read_text())["pythonhashseed"] == "11"
    # Another hash seed names other loads (1: burst#214, 11: #218): replays get 11's back.
    other = kvfault("repro", NAME, "--seed", "0", "--artifacts", "other", cwd=tmp_path,
                    hashseed="1")  # fmt: skip
    assert loads(other.stdout) != loads(made.stdout)
    for own in (None, "1", "0"):
        replay = kvfault("replay", str(artifact), cwd=tmp_path, hashseed=own)
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert loads(replay.stdout) == loads(made.stdout), own
        assert f"replay: PYTHONHASHSEED=11 kvfault repro {NAME} --seed 0" in replay.stdout


def test_a_campaign_without_a_hash_seed_picks_one_and_records_it(tmp_path):
    seeds = []
    for report in ("a", "b"):
        r = kvfault("run", "--seeds", "1", "--scenario", "two_images", "--no-progress",
                    "--report", report, cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        summary = json.loads((tmp_path / report / "summary.json").read_text())
        seed = summary["meta"]["pythonhashseed"]
        assert seed is not None and seed.isdigit() and int(seed) < 1 << 32
        assert summary["cases"][0]["command"].startswith(f"PYTHONHASHSEED={seed} kvfault run")
        seeds.append(seed)
    assert seeds[0] != seeds[1]  # a fresh one each time (1 in 2**32 to collide)
