"""A property as one class: everything kvfault needs of it in one place, so adding a
property is one class in one module of ``kvfault.faults.properties`` plus its test. The
registry (``kvfault.faults.properties.registry.Properties``, the one ``PROPERTIES``) finds every
subclass defined in this package when it is first read."""

from __future__ import annotations

import abc
from typing import ClassVar

from kvfault.faults.properties.violation import Violation
from kvfault.faults.runs import RunResult


class Property(abc.ABC):
    """A checker over a run's trace (its docstring says what it catches). ``name``
    names it (the ``Violation.prop`` of what it finds); ``letter`` is its column in the
    results table; ``scenarios`` are the shared scenarios it judges, besides those that
    list it (at least two, so a regression of one story cannot hide it); ``proven_by``
    is the test that breaks the stack by hand and sees it fail (``path::test``)."""

    name: ClassVar[str]
    letter: ClassVar[str]
    scenarios: ClassVar[tuple[str, ...]] = ()
    proven_by: ClassVar[str] = ""

    @abc.abstractmethod
    def check(self, run: RunResult) -> list[Violation]:
        """The violations in ``run``, each with its evidence (none: it holds)."""

    def judges(self, run: RunResult) -> bool:
        """Whether ``run`` holds something for this property to judge (a property
        checked only on runs where it has nothing to look at proves nothing)."""
        return True

    def __call__(self, run: RunResult) -> list[Violation]:
        return self.check(run)
