"""The hash seeds of one sweep as pytest items, so pytest-xdist spreads the seeds.

``faults.sweep.sweep(..., jobs="auto")`` runs this module as
``python -m pytest faults/sweep_items.py -n auto`` with ``$KVFAULT_SWEEP_SPEC`` naming a
JSON spec (seeds, pytest args, cwd); each item runs one seed's pytest subprocess and
writes its outcome next to the spec. Without a spec there is nothing to collect.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from faults.sweep import SPEC_ENV, run_seed, write_seed_outcome


def _spec() -> dict | None:
    path = os.environ.get(SPEC_ENV)
    return json.loads(Path(path).read_text()) if path else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hash_seed" in metafunc.fixturenames:
        spec = _spec()
        seeds = spec["seeds"] if spec else []
        metafunc.parametrize("hash_seed", seeds, ids=[f"PYTHONHASHSEED={s}" for s in seeds])


def test_hash_seed(hash_seed: int) -> None:
    spec = _spec()
    assert spec is not None
    outcome = run_seed(hash_seed, spec["args"], spec["cwd"], spec["python"], spec["timeout_s"])
    write_seed_outcome(outcome, Path(spec["out"]))
    assert outcome.exit_code == 0, f"PYTHONHASHSEED={hash_seed}: {outcome.status} {outcome.summary}"
