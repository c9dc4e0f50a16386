"""The one verdict vocabulary of kvfault, with its exit codes.

Every command speaks it: a case, a campaign row, ``kvfault repro``, ``kvfault replay``,
``kvfault prove`` and ``kvfault review``. The value is what gets printed and written to
reports.

Exit codes: 0 when the verdict is good, 1 when the code under test is wrong, 2 when
the run proved nothing (not reproduced, flaky, error, timeout, could not judge). One
more, 3, is ``kvfault review``'s UNCHANGED: good, and distinct from FIXED (docs/prove.md).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Verdict(str, enum.Enum):
    """One outcome; compares equal to its printed value."""

    PASS = "PASS"  # the fixed stack met its expectation and every property held
    FIXED = "FIXED"  # a regression: legacy fails with its signature, the fix passes
    FAIL = "FAIL"  # a property failed or the expectation was not met
    STILL_FAILING = "STILL FAILING"  # a regression: the fixed side fails too
    NOT_EXERCISED = "NOT EXERCISED"  # a planned fault never fired: the run proves nothing
    NOT_REPRODUCED = "NOT REPRODUCED"  # a regression: legacy passed (or failed otherwise)
    FLAKY = "FLAKY"  # a proof whose repeats disagree
    ERROR = "ERROR"  # the run itself broke (crash, timeout, bad setup)
    # A side that could not run the code under test (an import that fails, a tier that
    # refuses the checkout, an exit 2): never a failure of that code (prove, review).
    COULD_NOT_JUDGE = "COULD NOT JUDGE"
    REGRESSED = "REGRESSED"  # review: a row passes at the base and fails at the head
    UNCHANGED = "UNCHANGED"  # review: no row changed its verdict between the two heads

    # Print the value, not ``Verdict.PASS`` (str mixins format by name on some Pythons).
    __str__ = str.__str__

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    @property
    def ok(self) -> bool:
        return self in OK

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self]


OK = frozenset({Verdict.PASS, Verdict.FIXED, Verdict.UNCHANGED})

EXIT_CODES: dict[Verdict, int] = {
    Verdict.PASS: 0,
    Verdict.FIXED: 0,
    Verdict.FAIL: 1,
    Verdict.STILL_FAILING: 1,
    Verdict.NOT_EXERCISED: 1,
    Verdict.NOT_REPRODUCED: 2,
    Verdict.FLAKY: 2,
    Verdict.ERROR: 2,
    Verdict.COULD_NOT_JUDGE: 2,
    Verdict.REGRESSED: 1,
    Verdict.UNCHANGED: 3,
}

# Worst first: a group of verdicts (a target over its seeds, a campaign) takes the
# first of these that any member has.
SEVERITY = (
    Verdict.COULD_NOT_JUDGE,
    Verdict.ERROR,
    Verdict.REGRESSED,
    Verdict.STILL_FAILING,
    Verdict.FAIL,
    Verdict.NOT_EXERCISED,
    Verdict.NOT_REPRODUCED,
    Verdict.FLAKY,
)


def worst(verdicts: Iterable[str]) -> Verdict | None:
    """The most severe bad verdict among ``verdicts`` (None: all were good)."""
    seen = {Verdict(v) for v in verdicts}
    return next((v for v in SEVERITY if v in seen), None)


def exit_code(verdicts: Iterable[str]) -> int:
    """A run's exit status over its cases: 2 if any proved nothing, else 1 if any
    failed, else 0."""
    codes = [0 if Verdict(v).ok else EXIT_CODES[Verdict(v)] for v in verdicts]
    if 2 in codes:
        return 2
    return 1 if 1 in codes else 0
