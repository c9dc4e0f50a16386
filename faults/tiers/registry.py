"""The tiers installed here: read from the ``kvfault.tiers`` entry-point group when first
asked for, never at import. kvfault's own tiers register the way an outside package
does (``[project.entry-points."kvfault.tiers"]`` in its ``pyproject.toml``); when
kvfault runs from a checkout, that file is read instead of the installed metadata for
its own tiers, so a checkout that was never installed (or whose editable install is
older than its declarations) finds them as they stand."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from kvfault.faults.tiers.tier import Tier, TierError

GROUP = "kvfault.tiers"


class Tiers:
    """The registered tiers by name, in ``rank`` order (then name). Built from
    ``Tier`` declarations; two with one name are a ``TierError``."""

    def __init__(self, tiers: Iterable[Tier]):
        by_name: dict[str, Tier] = {}
        for t in tiers:
            if t.name in by_name:
                raise TierError(f"tier {t.name!r} is registered twice")
            by_name[t.name] = t
        self._tiers = {t.name: t for t in sorted(by_name.values(), key=lambda t: (t.rank, t.name))}

    @classmethod
    def load(cls, entry_points: Callable[..., Iterable[Any]] | None = None) -> Tiers:
        """Every tier of the ``kvfault.tiers`` entry points (``entry_points``: a
        stand-in for ``importlib.metadata.entry_points``). An entry point names a
        ``Tier`` (``"module:attribute"``) whose ``name`` is the entry point's.
        ``TierError`` in one line for a plugin that does not load, is not a
        ``Tier``, or registers a name twice, and when there is none at all."""
        if entry_points is None:
            found = _registered()
        else:
            found = list(entry_points(group=GROUP))
        if not found:
            raise TierError(
                f"no tiers are registered (entry-point group {GROUP}): kvfault registers "
                "its own when installed (pip install -e .)"
            )
        seen: dict[str, str] = {}
        tiers = []
        for ep in found:
            where = f"{ep.name} = {ep.value}"
            if ep.name in seen:
                raise TierError(f"tier {ep.name!r} is registered twice ({seen[ep.name]}; {where})")
            seen[ep.name] = where
            try:
                tier = ep.load()
            except Exception as exc:  # noqa: BLE001  any plugin failure: one line, named
                first = str(exc).splitlines()[0] if str(exc) else ""
                raise TierError(
                    f"tier plugin {where} does not load: {type(exc).__name__}: {first}"
                ) from None
            if not isinstance(tier, Tier):
                raise TierError(
                    f"tier plugin {where} is a {type(tier).__name__}, not a kvfault.faults.tiers.Tier"
                )
            if tier.name != ep.name:
                raise TierError(f"tier plugin {where} declares the name {tier.name!r}")
            tiers.append(tier)
        return cls(tiers)

    @staticmethod
    def installed() -> Tiers:
        """The tiers this interpreter has installed, loaded once per process (the
        installed entry points do not change while it runs)."""
        return _installed()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tiers)

    @property
    def default(self) -> Tier:
        """The tier a run uses when none is named: the first in ``rank`` order. The
        core asks for it here and never names a tier itself."""
        for tier in self._tiers.values():
            return tier
        raise TierError(f"no tiers are registered (entry-point group {GROUP})")

    def __getitem__(self, name: str) -> Tier:
        tier = self._tiers.get(name)
        if tier is None:
            raise TierError(f"unknown tier {name!r}; known: {', '.join(self._tiers)}")
        return tier

    def __contains__(self, name: object) -> bool:
        return name in self._tiers

    def __iter__(self) -> Iterator[Tier]:
        return iter(self._tiers.values())


def default_tier() -> str:
    """The name of the installed default tier (``Tiers.default``): what a target, a
    command or a replay means when it names no tier."""
    return Tiers.installed().default.name


def tier_or_default(tier: str | None) -> str:
    """``tier``, or the default tier's name where none is named (None)."""
    return default_tier() if tier is None else tier


@functools.lru_cache(maxsize=1)
def _installed() -> Tiers:
    return Tiers.load()


def _registered() -> list[Any]:
    """The ``kvfault.tiers`` entry points: the installed ones, with kvfault's own taken
    from the checkout this package runs from, when it runs from one."""
    from importlib.metadata import entry_points

    found = list(entry_points(group=GROUP))
    own = _checkout_tiers()
    if own is None:
        return found
    others = [ep for ep in found if getattr(ep.dist, "name", None) != "kvfault"]
    return [EntryPoint(name, value, GROUP) for name, value in own.items()] + others


def _checkout_tiers(root: Path = Path(__file__).resolve().parents[2]) -> dict[str, str] | None:
    """kvfault's own tiers as the ``pyproject.toml`` of the checkout at ``root``
    declares them; None outside a checkout (an installed wheel: its metadata says)."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return None
    try:  # by name: the type checker targets Python 3.10, which has no tomllib
        tomllib = importlib.import_module("tomllib")
    except ImportError:  # Python 3.10: the installed metadata says
        return None
    try:
        project = tomllib.loads(path.read_text()).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if project.get("name") != "kvfault":
        return None
    return dict(project.get("entry-points", {}).get(GROUP, {}))
