"""kvfault's pytest plugin (entry point ``pytest11``): markers for now; fixtures and
options follow. Imports nothing heavy at plugin load."""

from __future__ import annotations


def pytest_configure(config) -> None:
    for line in (
        "gpu: needs a CUDA or HIP device (gpu_tests/)",
        "lmcache: talks to a real lmcache multiprocess server",
        "slow: takes more than a few seconds",
    ):
        config.addinivalue_line("markers", line)
