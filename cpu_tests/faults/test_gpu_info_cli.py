"""``kvfault gpu-info`` where there is no GPU (CI): one line saying why, exit 2; a bad
page size is refused like any bad argument. (On a device: gpu_tests/test_calibration.py.)"""

from __future__ import annotations

import pytest

from kvfault.faults.cli import main


def test_without_a_device_it_says_why_in_one_line(capsys):
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: gpu_tests run gpu-info")
    assert main(["gpu-info"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("kvfault: error: gpu-info: ")
    assert ("no CUDA or HIP device visible" in line) or ("torch is not installed" in line)


@pytest.mark.parametrize("bad", ["0", "-8", "big"])
def test_a_page_size_that_is_no_positive_number_is_refused(capsys, bad):
    assert main(["gpu-info", "--page-kib", bad]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kvfault: error: argument --page-kib: a page size is a positive")
