"""The registry of tiers (``kvfault.faults.tiers.Tiers``): read from entry points when asked,
kvfault's own tiers registered there, declarations that import no tier library."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvfault.faults.campaign import select_targets
from kvfault.faults.catalog import entries
from kvfault.faults.runs import Ending, finishes, stops
from kvfault.faults.tiers import GROUP, Tier, TierError, Tiers, default_tier

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class _EntryPoint:
    name: str
    value: str
    loaded: object = None

    def load(self) -> object:
        if isinstance(self.loaded, Exception):
            raise self.loaded
        return self.loaded


def _tiers(*eps: _EntryPoint) -> Tiers:
    def entry_points(group: str) -> list[_EntryPoint]:
        assert group == GROUP
        return list(eps)

    return Tiers.load(entry_points)


def test_kvfault_registers_its_own_tiers_as_entry_points() -> None:
    from importlib.metadata import entry_points

    mine = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    assert mine == {
        "memory": "kvfault.faults.memory.tier:TIER",
        "lmcache": "kvfault.faults.lmcache.tier:TIER",
        "atom": "kvfault.faults.atom.tier:TIER",
        "vllm": "kvfault.faults.vllm.tier:TIER",
    }
    tiers = Tiers.installed()
    assert tiers.names == ("memory", "lmcache", "atom", "vllm")  # by rank
    assert tiers.default.name == default_tier() == "memory"  # it ranks first
    assert tiers["lmcache"].fault("wire_kill").kills_server
    assert tiers["atom"].own_listing() is not None and tiers["atom"].rows("scenario")


def test_a_checkout_that_was_never_installed_finds_its_own_tiers(tmp_path: Path) -> None:
    # -S: no site-packages, so no installed metadata of kvfault at all; the checkout
    # on PYTHONPATH alone. Its pyproject.toml declares the tiers.
    out = subprocess.run(
        [sys.executable, "-S", "-m", "kvfault.faults.cli", "list", "--tiers"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()] == [
        "memory",
        "lmcache",
        "atom",
        "vllm",
    ]


def test_the_checkout_declares_kvfault_s_own_tiers_over_stale_installed_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An editable install older than the checkout: its metadata names a module that
    # moved. The checkout's pyproject.toml wins for kvfault's own; others stay.
    import importlib.metadata

    from kvfault.faults.tiers import registry

    class _Dist:
        def __init__(self, name: str) -> None:
            self.name = name

    stale = importlib.metadata.EntryPoint("memory", "faults.gone:TIER", GROUP)
    outside = importlib.metadata.EntryPoint("toy", "toy_tier:TIER", GROUP)
    stale_ep = type("EP", (), {"name": stale.name, "value": stale.value, "dist": _Dist("kvfault")})
    outside_ep = type(
        "EP", (), {"name": outside.name, "value": outside.value, "dist": _Dist("toy")}
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [stale_ep, outside_ep])
    got = {ep.name: ep.value for ep in registry._registered()}
    assert got == {
        "memory": "kvfault.faults.memory.tier:TIER",
        "lmcache": "kvfault.faults.lmcache.tier:TIER",
        "atom": "kvfault.faults.atom.tier:TIER",
        "vllm": "kvfault.faults.vllm.tier:TIER",
        "toy": "toy_tier:TIER",
    }
    assert registry._checkout_tiers(ROOT / "docs") is None  # no pyproject.toml there


def test_reading_the_declarations_imports_no_tier_library() -> None:
    # The registry is read by `kvfault list` and every run: it must stay cheap.
    code = (
        "import sys\n"
        "from kvfault.faults.tiers import Tiers\n"
        "t = Tiers.load()\n"
        "assert t.names == ('memory', 'lmcache', 'atom', 'vllm'), t.names\n"
        "declared = {'kvfault', 'kvfault.faults', 'kvfault.reference', 'kvfault.reference._lazy', 'kvfault.faults.errors', 'kvfault.faults.lmcache', 'kvfault.faults.lmcache.tier', "
        "'kvfault.faults.atom', 'kvfault.faults.atom.tier', 'kvfault.faults.memory', 'kvfault.faults.memory.tier', 'kvfault.faults.vllm', 'kvfault.faults.vllm.tier'}\n"
        "print(sorted(m for m in sys.modules if m.removeprefix('kvfault.').split('.')[0] in "
        "('lmcache', 'torch', 'atom', 'vllm', 'zmq', 'kvfault', 'faults', 'reference', 'fakes') "
        "and not m.startswith('kvfault.faults.tiers') and m not in declared))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_tiers_are_ranked_and_unknown_names_answer_in_one_line() -> None:
    a = Tier("a", "first", "m:f", rank=5)
    b = Tier("b", "second", "m:f", rank=1)
    tiers = _tiers(_EntryPoint("a", "x:A", a), _EntryPoint("b", "x:B", b))
    assert tiers.names == ("b", "a") and "a" in tiers and "c" not in tiers
    with pytest.raises(TierError, match=r"^unknown tier 'c'; known: b, a$"):
        tiers["c"]


def test_the_default_tier_is_the_first_by_rank_whatever_its_name() -> None:
    # The core names no tier: the default is whichever ranks first (then by name).
    late = Tier("memory", "in-process", executor="m:E", rank=50)
    first = Tier("toy", "a plugin", "m:f", rank=-1)
    tied = Tier("aardvark", "ties with toy", "m:f", rank=-1)
    assert Tiers([late, first]).default is first
    assert Tiers([late, first, tied]).default is tied
    with pytest.raises(TierError, match=r"^no tiers are registered"):
        _ = Tiers([]).default


@pytest.mark.parametrize(
    "eps, says",
    [
        ((), "no tiers are registered (entry-point group kvfault.tiers)"),
        (
            (_EntryPoint("x", "x_tier:TIER", ImportError("no module named lmcache")),),
            "tier plugin x = x_tier:TIER does not load: ImportError: no module named lmcache",
        ),
        ((_EntryPoint("x", "x_tier:TIER", 42),), "is a int, not a kvfault.faults.tiers.Tier"),
        (
            (_EntryPoint("x", "x_tier:TIER", Tier("y", "d", "m:f")),),
            "tier plugin x = x_tier:TIER declares the name 'y'",
        ),
        (
            (
                _EntryPoint("x", "one:TIER", Tier("x", "d", "m:f")),
                _EntryPoint("x", "two:TIER", Tier("x", "d", "m:f")),
            ),
            "tier 'x' is registered twice (x = one:TIER; x = two:TIER)",
        ),
    ],
    ids=["none", "broken", "not-a-tier", "misnamed", "twice"],
)
def test_a_bad_registry_is_one_line(eps: tuple[_EntryPoint, ...], says: str) -> None:
    with pytest.raises(TierError) as err:
        _tiers(*eps)
    assert says in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_declaration_that_points_at_nothing_is_one_line() -> None:
    tier = Tier(
        "x", "d", opener="faults.no_such_module:open", catalog="kvfault.faults.tiers:nothing"
    )
    with pytest.raises(TierError, match=r"tier 'x': cannot load kvfault.faults.tiers:nothing"):
        tier.rows("scenario")
    with pytest.raises(TierError, match=r"cannot load faults.no_such_module:open"):
        with tier.open():
            pass
    with pytest.raises(TierError, match="declares no opener"):
        with Tier("y", "d").open():
            pass


def test_the_catalog_is_what_the_tiers_declare() -> None:
    # A tier left out of the registry takes its rows with it.
    only_memory = Tiers([Tiers.installed()["memory"]])
    assert "wire_kill" in entries("fault") and "wire_kill" not in entries("fault", only_memory)
    assert entries("scenario")["two_servers"].tiers == ("memory", "lmcache", "atom", "vllm")
    assert entries("scenario", only_memory)["two_servers"].tiers == ("memory",)
    # The atom tier dropped its multimodal rows: two_images runs on the others only.
    assert entries("scenario")["two_images"].tiers == ("memory", "lmcache")


def test_wire_fault_endings_are_expects() -> None:
    # The wire faults' ending vocabulary is Expect's: a stop with TransferUnprovable on
    # any operation at any time, a finish, or either.
    from kvfault.faults.lmcache.wire_faults import EITHER, FINISH, STOP

    unprovable = Ending("stop", "TransferUnprovable", "load", 31.0)
    other = Ending("stop", "LoadNotTerminal", "load", 41.0)
    done, hung = Ending("finish"), Ending("hang")
    assert STOP == stops("TransferUnprovable") and FINISH == finishes()
    assert [STOP.unmet(e) is None for e in (unprovable, other, done, hung)] == [1, 0, 0, 0]
    assert [FINISH.unmet(e) is None for e in (unprovable, other, done, hung)] == [0, 0, 1, 0]
    assert [EITHER.unmet(e) is None for e in (unprovable, other, done, hung)] == [1, 0, 1, 0]
    assert str(EITHER) == "run to the end or stop with TransferUnprovable"
    assert EITHER.unmet(other) == (
        "expected to run to the end or stop with TransferUnprovable; "
        "it stopped with LoadNotTerminal on a load after 41.0s"
    )


def test_a_target_on_a_tier_without_plans_is_built_by_its_catalog() -> None:
    targets = select_targets(faults=["wire_drop_retrieve"], tier="lmcache")
    assert [t.id for t in targets] == ["lmcache:fault:wire_drop_retrieve"]
    assert targets[0].plan(0) is None  # its tier's catalog builds it, not a plan
    (memory,) = select_targets(faults=["lost_completion"])
    assert memory.plan(0) is not None


def test_full_changes_nothing_on_a_tier_without_a_long_matrix() -> None:
    from kvfault.faults.campaign.select import long_matrix

    for tier in ("memory", "lmcache"):
        assert long_matrix(tier) == []
        ids = [t.id for t in select_targets(tier=tier)]
        assert ids and ids == [t.id for t in select_targets(tier=tier, full=True)]


@pytest.mark.parametrize(
    ("tier", "options", "says"),
    [
        ("memory", ["--atom-src", "x"], "'--atom-src' is no option of tier memory (it takes none)"),
        ("atom", ["--atom-src"], "options ['--atom-src'] are not FLAG VALUE pairs"),
        ("atom", ["--atom-src", "/a", "--atom-src", "/b"], "--atom-src is given twice"),
        (
            "atom",
            ["--pin", "x"],
            "'--pin' is no option of tier atom (it takes --atom-src, ",
        ),
        ("atom", ["--property", "nope"], "--property 'nope' is no property; known: correctness"),
    ],
)
def test_a_target_takes_only_options_its_tier_takes(
    tier: str, options: list[str], says: str
) -> None:
    # A replay opens the tier with the target's options: what its tier would not take
    # is refused when the target is read back (an artifact), not ignored.
    from kvfault.faults.campaign import CampaignError
    from kvfault.faults.campaign.reading import target_from_json

    name = "prefix_reuse" if tier == "atom" else "two_servers"
    with pytest.raises(CampaignError) as caught:
        target_from_json({"kind": "scenario", "name": name, "tier": tier, "options": options})
    assert str(caught.value).startswith(f"target 'options': {says}"), str(caught.value)


def test_the_options_a_tier_takes_are_read_back_by_keyword() -> None:
    atom = Tiers.installed()["atom"]
    words = ["--property", "keys", "--atom-src", "/a", "--property", "correctness"]
    assert atom.opener_options(words) == {"property": ["keys", "correctness"], "atom_src": "/a"}
    assert atom.opener_options([]) == {}
