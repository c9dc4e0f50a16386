"""The campaign's targets as pytest items, so pytest-xdist spreads a campaign.

``kvfault run -n auto`` runs ``python -m pytest faults/campaign/items.py -n auto`` with
``$KVFAULT_CAMPAIGN_SPEC`` naming a JSON spec (targets, seeds, where to write); each
item runs one target over every seed and writes its outcome for the CLI to read back.

Run directly, the spec comes from the plugin's options instead: every target of the
default campaign (``--kv-fault NAME`` narrows the faults; ``--kv-seed``, ``--kv-seeds``
pick the seeds)::

    pytest faults/campaign/items.py -n auto --kv-seeds 3
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from faults.campaign.runner import run_target
from faults.campaign.targets import Target, select_targets

SPEC_ENV = "KVFAULT_CAMPAIGN_SPEC"


def result_path(directory: Path, target: Target) -> Path:
    """Where the item of ``target`` writes its outcome."""
    return directory / (re.sub(r"[^A-Za-z0-9_.-]+", "-", target.id) + ".json")


def _spec(config: pytest.Config) -> dict[str, Any]:
    path = os.environ.get(SPEC_ENV)
    if path:
        return json.loads(Path(path).read_text())
    first, n = config.getoption("kv_seed"), config.getoption("kv_seeds")
    faults = config.getoption("kv_fault") or None
    scale = config.getoption("kv_scale")
    targets = (
        select_targets(None, faults, None, scale=scale) if faults else select_targets(scale=scale)
    )
    return {"targets": [t.as_json() for t in targets], "seeds": list(range(first, first + n))}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "campaign_target" in metafunc.fixturenames:
        spec = _spec(metafunc.config)
        targets = [Target.from_json(t) for t in spec["targets"]]
        metafunc.parametrize("campaign_target", targets, ids=[t.id for t in targets])


def test_campaign_target(campaign_target: Target, request: pytest.FixtureRequest) -> None:
    from faults.repro import arm_hang_guard, disarm_hang_guard, write_artifact

    spec = _spec(request.config)
    artifacts = Path(spec["artifacts"]) if spec.get("artifacts") else None

    def before(case):
        path = write_artifact(case, artifacts) if artifacts else None
        arm_hang_guard(spec.get("timeout_s"))
        return path

    def after(case, outcome, path):
        disarm_hang_guard()
        if path is not None and outcome.ok:
            path.unlink(missing_ok=True)

    outcome = run_target(campaign_target, spec["seeds"], before=before, after=after)
    if spec.get("out"):
        result_path(Path(spec["out"]), campaign_target).write_text(json.dumps(outcome.as_json()))
    bad = [c for c in outcome.cases if not c.ok]
    assert outcome.ok, f"{outcome.verdict}: {outcome.detail()}" + "".join(
        f"\n{c.verdict} {c.case.id}: {c.signature}\n  replay: {c.case.command}" for c in bad
    )
