"""The injector of a fault row that a tier's own processes act out (what such a tier's
``TierFault.factory`` returns): in the campaign process it wraps nothing and
carries its row; the tier's executor hands the rows to its processes and sets ``fired``
from what they recorded."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from kvfault.faults.runs import Injector


class _Named(Protocol):
    @property
    def name(self) -> str: ...


RowT = TypeVar("RowT", bound=_Named)


class RowFault(Injector, Generic[RowT]):
    """A fault row in a run's ``RunContext.injectors``, named as its row: it wraps
    nothing here; ``fired`` is set by the tier's executor to how often the processes
    that act it out recorded it firing (never set: the row is NOT EXERCISED)."""

    def __init__(self, row: RowT, seed: int):
        self.name = row.name
        super().__init__(seed)
        self.row = row
