"""``kvfault.reference.device``'s public surface: importing it costs no torch, and every name it
exports loads the object its module defines (no device needed)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import kvfault.reference.device as device

ROOT = Path(__file__).resolve().parents[1]


def test_importing_the_package_imports_neither_torch_nor_triton():
    probe = (
        "import kvfault.reference.device as d, sys\n"
        "dir(d)\n"
        "print('HEAVY', sorted(m for m in ('torch', 'triton', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.splitlines()[-1] == "HEAVY []"


def test_all_names_exactly_the_lazy_exports():
    assert sorted(device.__all__) == sorted(device._EXPORTS)
    assert set(device.__all__) <= set(dir(device))


@pytest.mark.parametrize("name", sorted(device._EXPORTS))
def test_each_export_is_the_object_its_module_defines(name):
    pytest.importorskip("torch")
    module = importlib.import_module(device._EXPORTS[name])
    assert getattr(device, name) is getattr(module, name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'torch_copy'"):
        device.torch_copy  # noqa: B018
