"""The one registry of properties (``PROPERTIES`` in ``kvfault.faults.properties.checks``): the
built-in checkers, and every ``Property`` subclass defined in a module of this
package, found when the registry is first read (never at import)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Callable

from kvfault.faults.properties.names import Prop
from kvfault.faults.properties.property import Property
from kvfault.faults.properties.violation import Checker

# The results table's props column: one letter each, Prop.DETERMINISM included (it
# compares two runs; faults.campaign.execute checks it). A Property class says its own.
BUILT_IN_LETTERS: dict[str, str] = {
    Prop.CORRECTNESS: "C",
    Prop.USAGE: "A",
    Prop.KEYS: "K",
    Prop.IDENTITY: "I",
    Prop.GRID: "G",
    Prop.HYBRID: "H",
    Prop.NO_FALSE_STOP: "F",
    Prop.LIVENESS: "L",
    Prop.DETERMINISM: "D",
    Prop.EFFICIENCY: "E",
    Prop.EXACTLY_ONCE: "X",
    Prop.RESOURCES: "R",
    Prop.LOAD_FAILURES: "U",
    Prop.HBM_OWNERS: "O",
}


class Properties(MutableMapping[str, Checker]):
    """Property name -> checker (a function of a run that returns its violations), in
    catalog order: the built-ins, then the ``Property`` classes by module and name.
    Mutable so a test can blind one (``monkeypatch.setitem``)."""

    def __init__(self, built_in: Callable[[], dict[str, Checker]]):
        self._built_in = built_in
        self._checkers: dict[str, Checker] | None = None
        self._classes: dict[str, Property] = {}

    def _loaded(self) -> dict[str, Checker]:
        if self._checkers is None:
            checkers = dict(self._built_in())
            for prop in _defined_here():
                if prop.name in checkers or prop.name in BUILT_IN_LETTERS:
                    raise ValueError(f"property {prop.name!r} is defined twice")
                checkers[prop.name] = prop
                self._classes[prop.name] = prop
            self._checkers = checkers
        return self._checkers

    def __getitem__(self, name: str) -> Checker:
        return self._loaded()[name]

    def __setitem__(self, name: str, checker: Checker) -> None:
        self._loaded()[name] = checker

    def __delitem__(self, name: str) -> None:
        del self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    @property
    def classes(self) -> Mapping[str, Property]:
        """The properties defined as ``Property`` classes, by name."""
        self._loaded()
        return dict(self._classes)

    @property
    def letters(self) -> dict[str, str]:
        """Every judged property's letter in the table ("determinism" included)."""
        return {**BUILT_IN_LETTERS, **{n: p.letter for n, p in self.classes.items()}}

    def added_to(self, scenario: str) -> list[str]:
        """The ``Property`` classes that judge the shared ``scenario`` besides its own list."""
        return [n for n, p in self.classes.items() if scenario in p.scenarios]


def _defined_here() -> list[Property]:
    """An instance of every concrete ``Property`` subclass defined in a module of this
    package (each module imported here, on the registry's first read)."""
    package = __name__.rpartition(".")[0]
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{info.name}")
    found: list[type[Property]] = []
    todo = list(Property.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo += cls.__subclasses__()
        if cls.__module__.startswith(f"{package}.") and not getattr(
            cls, "__abstractmethods__", None
        ):
            found.append(cls)
    return [cls() for cls in sorted(found, key=lambda c: (c.__module__, c.__name__))]
