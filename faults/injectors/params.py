"""An injector parameter's schema (``Param``) and its kinds as types: each
``ParamKind`` checks a value into canonical form, says what it wants, and gives a
hypothesis strategy of its values. ``PARAM_KINDS`` is the one registry; a new kind is
one class here, added to it."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

Bad = Callable[[str], ValueError]


@dataclass(frozen=True)
class Param:
    """One injector parameter: its kind, what it means, and the range a random draw
    (hypothesis, swarm) takes it from. ``lo``/``hi`` bound every number."""

    kind: ParamKind
    doc: str
    lo: float = 0
    hi: float = 2**63 - 1
    max_len: int = 4  # longest list a draw makes
    # A search draws from a narrower range than a spec accepts, so it hits the
    # operations a run actually has (a few dozen loads, stores and forwards).
    draw_hi: float | None = None
    choices: tuple[Any, ...] = ()  # when set, a draw picks from these

    def check(self, injector: str, name: str, value: Any) -> Any:
        """The value in canonical form (tuples, floats), or ``ValueError`` in one line."""

        def bad(want: str) -> ValueError:
            return ValueError(f"{injector}: parameter {name!r} must be {want}, got {value!r}")

        return self.kind.check(self, value, bad)

    def values(self) -> SearchStrategy[Any]:
        """Values within the schema and a range a run can hit (hypothesis)."""
        from hypothesis import strategies as st  # only a search pays for hypothesis

        return st.sampled_from(self.choices) if self.choices else self.kind.values(self)

    @property
    def top(self) -> float:
        """The highest value a draw takes."""
        return self.hi if self.draw_hi is None else self.draw_hi


class ParamKind(abc.ABC):
    """What a parameter's values are. ``name`` is how docs and listings say it."""

    name: ClassVar[str]

    @abc.abstractmethod
    def check(self, p: Param, value: Any, bad: Bad) -> Any:
        """``value`` in canonical form, or ``bad(self.want(p))`` raised."""

    @abc.abstractmethod
    def want(self, p: Param) -> str:
        """What a value must be, for the one-line error."""

    @abc.abstractmethod
    def values(self, p: Param) -> SearchStrategy[Any]:
        """A hypothesis strategy of its values under ``p``'s bounds."""

    def __repr__(self) -> str:
        return f"<param kind {self.name}>"


def _number(p: Param, v: Any, whole: bool, bad: Bad, want: str) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad(want)
    if whole and not isinstance(v, int):
        raise bad(want)
    if not p.lo <= v <= p.hi:
        raise bad(want)
    return v if whole else float(v)


def _range(p: Param) -> str:
    return f" in [{p.lo:g}, {p.hi:g}]"


def _whole(lo: float, hi: float) -> SearchStrategy[float]:
    """Whole seconds as floats: readable in a shrunk plan and in JSON."""
    from hypothesis import strategies as st

    return st.integers(int(max(lo, 0) + (lo % 1 > 0)), int(hi)).map(float)


class Int(ParamKind):
    name = "int"

    def check(self, p: Param, value: Any, bad: Bad) -> Any:
        return _number(p, value, True, bad, self.want(p))

    def want(self, p: Param) -> str:
        return f"an integer{_range(p)}"

    def values(self, p: Param) -> SearchStrategy[Any]:
        from hypothesis import strategies as st

        return st.integers(int(p.lo), int(p.top))


class Float(ParamKind):
    name = "float"

    def check(self, p: Param, value: Any, bad: Bad) -> Any:
        return _number(p, value, False, bad, self.want(p))

    def want(self, p: Param) -> str:
        return f"a number{_range(p)}"

    def values(self, p: Param) -> SearchStrategy[Any]:
        return _whole(p.lo, min(p.top, 60))


class Bool(ParamKind):
    name = "bool"

    def check(self, p: Param, value: Any, bad: Bad) -> Any:
        if not isinstance(value, bool):
            raise bad(self.want(p))
        return value

    def want(self, p: Param) -> str:
        return "true or false"

    def values(self, p: Param) -> SearchStrategy[Any]:
        from hypothesis import strategies as st

        return st.booleans()


class Salt(ParamKind):
    """An integer, or null (drawn from the run's seed)."""

    name = "salt"

    def check(self, p: Param, value: Any, bad: Bad) -> Any:
        return None if value is None else _number(p, value, True, bad, self.want(p))

    def want(self, p: Param) -> str:
        return "an integer or null"

    def values(self, p: Param) -> SearchStrategy[Any]:
        from hypothesis import strategies as st

        return st.none() | st.integers(0, 2**64 - 1)


class Ints(ParamKind):
    """A list of integers (a draw: sorted, distinct, at least one)."""

    name = "ints"

    def check(self, p: Param, value: Any, bad: Bad) -> Any:
        if not isinstance(value, (list, tuple)):
            raise bad(self.want(p))
        return tuple(_number(p, v, True, bad, self.want(p)) for v in value)

    def want(self, p: Param) -> str:
        return f"a list of integers{_range(p)}"

    def values(self, p: Param) -> SearchStrategy[Any]:
        from hypothesis import strategies as st

        return st.lists(
            st.integers(int(p.lo), int(p.top)), min_size=1, max_size=p.max_len, unique=True
        ).map(lambda xs: tuple(sorted(xs)))


class Pairs(ParamKind):
    """A list of ``[forward index >= 0, seconds]`` pairs."""

    name = "pairs"

    def check(self, p: Param, value: Any, bad: Bad) -> Any:
        want = self.want(p)
        if not isinstance(value, (list, tuple)):
            raise bad(want)
        out = []
        for pair in value:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise bad(want)
            idx, secs = pair
            if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
                raise bad(want)
            out.append((idx, _number(p, secs, False, bad, want)))
        return tuple(out)

    def want(self, p: Param) -> str:
        return f"a list of [forward index >= 0, seconds{_range(p)}] pairs"

    def values(self, p: Param) -> SearchStrategy[Any]:
        from hypothesis import strategies as st

        pair = st.tuples(st.integers(0, 6), _whole(p.lo, min(p.top, 40)))
        return st.lists(pair, min_size=1, max_size=p.max_len, unique_by=lambda x: x[0]).map(
            lambda ps: tuple(sorted(ps))
        )


INT, FLOAT, BOOL, SALT, INTS, PAIRS = Int(), Float(), Bool(), Salt(), Ints(), Pairs()
# The one registry of parameter kinds, by name.
PARAM_KINDS: dict[str, ParamKind] = {k.name: k for k in (INT, FLOAT, BOOL, SALT, INTS, PAIRS)}
