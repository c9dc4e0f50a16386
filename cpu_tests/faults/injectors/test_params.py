"""Parameter kinds are types (``kvfault.faults.injectors.params``): each checks a value into
canonical form, says what it wants in one line, and draws values its own check takes.
A new kind is one ``ParamKind`` class; shown with one that lives only in this test."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvfault.faults.injectors.catalog import INJECTORS
from kvfault.faults.injectors.params import PARAM_KINDS, Param, ParamKind


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_every_catalog_parameter_takes_the_values_it_draws(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(INJECTORS)))
    params = INJECTORS[name].params
    if not params:
        return
    key = data.draw(st.sampled_from(sorted(params)))
    value = data.draw(params[key].values())
    assert params[key].check(name, key, value) == value


@pytest.mark.parametrize("kind", sorted(PARAM_KINDS))
def test_each_kind_refuses_a_string_in_one_line(kind: str) -> None:
    p = Param(PARAM_KINDS[kind], "a test parameter", 0, 10)
    with pytest.raises(ValueError) as err:
        p.check("toy", "x", "seven")
    assert str(err.value).startswith("toy: parameter 'x' must be ")
    assert "\n" not in str(err.value)


class Even(ParamKind):
    """An even integer in range (a kind made up by this test)."""

    name = "even"

    def check(self, p: Param, value: Any, bad: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or value % 2:
            raise bad(self.want(p))
        if not p.lo <= value <= p.hi:
            raise bad(self.want(p))
        return value

    def want(self, p: Param) -> str:
        return f"an even integer in [{p.lo:g}, {p.hi:g}]"

    def values(self, p: Param) -> st.SearchStrategy[Any]:
        return st.integers(int(p.lo) // 2, int(p.top) // 2).map(lambda n: 2 * n)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_a_new_kind_is_one_class(data: st.DataObject) -> None:
    p = Param(Even(), "an even count", 0, 10)
    assert p.check("toy", "n", data.draw(p.values())) % 2 == 0
    with pytest.raises(ValueError, match=r"must be an even integer in \[0, 10\], got 3"):
        p.check("toy", "n", 3)
