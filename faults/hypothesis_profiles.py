"""kvfault's hypothesis profiles, registered by the pytest plugin for a project that
sets the ini value ``kv_hypothesis_profile`` (no other project's profiles are touched).

- ``dev``: a few examples per property, for the edit-test loop.
- ``ci``: more examples, derandomized (the same examples on every CI run, so a red CI
  reproduces locally with ``HYPOTHESIS_PROFILE=ci``).
- ``nightly``: many examples, random, for a nightly job's wider search.
- ``mutation``: the dev budget, derandomized and without a database, so a mutant's
  verdict is the same on every run (``tox -e mutation``, docs/mutation.md).

Simulated runs take milliseconds of wall time but their cost varies with the drawn
geometry, so no profile has a per-example deadline; virtual time is asserted instead.
"""

from __future__ import annotations

from typing import Any

PROFILES = ("dev", "ci", "nightly", "mutation")
ENV = "HYPOTHESIS_PROFILE"


def register() -> None:
    """Register the profiles with hypothesis (loads none)."""
    from hypothesis import HealthCheck, Phase, settings

    common: dict[str, Any] = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
    # The explain phase re-runs a shrunk failure many times to point at the lines that
    # matter; with whole simulated runs per example that takes minutes. dev and ci skip
    # it, so a failure reports in seconds; nightly keeps it.
    fast = tuple(p for p in Phase if p is not Phase.explain)
    settings.register_profile("dev", max_examples=12, phases=fast, **common)
    settings.register_profile(
        "ci", max_examples=150, derandomize=True, database=None, print_blob=True,
        phases=fast, **common,
    )  # fmt: skip
    settings.register_profile("nightly", max_examples=1000, print_blob=True, **common)
    settings.register_profile(
        "mutation", max_examples=12, derandomize=True, database=None, phases=fast, **common
    )


def registered(name: str) -> bool:
    """Whether hypothesis knows a profile called ``name`` (a project's own)."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    try:
        settings.get_profile(name)
    except InvalidArgument:
        return False
    return True


def choose(env_value: str | None, ini_value: str | None) -> str | None:
    """The profile to load: ``HYPOTHESIS_PROFILE`` when set, else the project's
    ``kv_hypothesis_profile`` ini value, else none (hypothesis's own defaults).
    ``ValueError`` in one line for a name that is not one of ``PROFILES``."""
    name = env_value or ini_value or None
    if name is not None and name not in PROFILES:
        source = f"{ENV}={name!r}" if env_value else f"kv_hypothesis_profile = {name!r}"
        raise ValueError(f"{source} is not a kvfault profile; use {', '.join(PROFILES)}")
    return name
