"""A property is one ``Property`` class in a module of ``kvfault.faults.properties``: the one
registry (``PROPERTIES``) finds it, the shared scenarios it names judge it, the table
shows its letter, and a run that breaks it fails with its name. Shown here with a
property that exists only in this test, put where the registry looks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# A property that fails every answer whose first token is even: a break by design, so
# the campaign must see it fail, by name, in exactly the scenarios it names.
_MODULE = '''
from kvfault.faults.properties.property import Property
from kvfault.faults.properties.violation import Violation
from kvfault.reference.trace import Ev


class FirstTokenOdd(Property):
    """Every answer starts with an odd token (a property made up by a test)."""

    name = "first_token_odd"
    letter = "Q"
    scenarios = ("two_images", "restart_burst")
    proven_by = "cpu_tests/faults/properties/test_property_classes.py::test_x"

    def check(self, run):
        return [
            Violation(self.name, f"{e.req_id} starts with {e.data['tokens'][0]}", t=e.t)
            for e in run.trace.of(Ev.OUTPUT)
            if e.data["tokens"] and e.data["tokens"][0] % 2 == 0
        ]

    def judges(self, run):
        return any(True for _ in run.trace.of(Ev.OUTPUT))
'''

_RUN = """
import sys
import kvfault.faults.properties
kvfault.faults.properties.__path__.append(sys.argv[1])  # where the registry looks: this package
from kvfault.faults.cli import main
from kvfault.faults.properties import PROPERTIES
from kvfault.faults.campaign import properties_of
assert "first_token_odd" in PROPERTIES and PROPERTIES.letters["first_token_odd"] == "Q"
print("judged-by", sorted(s for s in ("two_images", "restart_burst", "two_servers")
                          if "first_token_odd" in properties_of(s)))
sys.exit(main(sys.argv[2:]))
"""


def test_one_property_class_is_all_a_new_property_takes(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "first_token_odd.py").write_text(textwrap.dedent(_MODULE))
    report = tmp_path / "report"
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(extra), "run", "--seeds", "1", "--no-progress",
         "--scenario", "two_images", "--scenario", "two_servers", "--report", str(report)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "judged-by ['restart_burst', 'two_images']" in out.stdout, out.stdout + out.stderr
    assert out.returncode == 1, out.stdout + out.stderr  # it found what it was made to find
    cases = {c["name"]: c for c in json.loads((report / "summary.json").read_text())["cases"]}
    assert cases["two_images"]["verdict"] == "FAIL"
    assert {v["property"] for v in cases["two_images"]["violations"]} == {"first_token_odd"}
    assert cases["two_servers"]["verdict"] == "PASS"  # it names two_images, not two_servers
    assert "Q=first_token_odd" in out.stdout  # the table's legend


def test_prop_names_every_built_in_property_once_and_prints_as_its_string() -> None:
    """``Prop`` is the built-in properties' one vocabulary: each member is a checker
    of the registry (or ``determinism``, which compares two runs) with a letter, every
    built-in checker is a member, and a member is its plain string wherever it is
    written out, so verdict files and messages read as they did with strings."""
    from kvfault.faults.properties import PROPERTIES, Prop
    from kvfault.faults.properties.registry import BUILT_IN_LETTERS

    built_in = set(PROPERTIES) - set(PROPERTIES.classes)
    assert built_in | {Prop.DETERMINISM} == set(Prop)
    assert set(BUILT_IN_LETTERS) == set(Prop)
    assert len(set(BUILT_IN_LETTERS.values())) == len(Prop)
    assert json.dumps({Prop.KEYS: [Prop.GRID]}) == '{"keys": ["grid"]}'
    assert (str(Prop.KEYS), f"{Prop.KEYS}", f"{Prop.KEYS!r}") == ("keys", "keys", "'keys'")
    assert Prop("keys") is Prop.KEYS and {"keys": 1}[Prop.KEYS] == 1
