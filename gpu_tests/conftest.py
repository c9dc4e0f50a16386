"""GPU tier fixtures.

On a machine with no GPU at all, no test module here is imported: each is collected as
one skip raised from this file, so ``-rs`` prints ONE line saying why, and a run of
gpu_tests alone still exits 0. On a machine WITH a GPU (device files or the vendor's
tool say so) where torch is missing or sees no device, the run stops at once with one
line saying what to do: a present device never skips silently. With a device, every
test is marked ``gpu``, every test waits for its device work at teardown, so nothing
stays queued, and the summary says how many tests ran, on which device, with which
torch and backend.
"""

from __future__ import annotations

import importlib

import pytest


def _backend(torch) -> str:
    """``hip X`` on a ROCm build of torch, ``cuda X`` otherwise."""
    return f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}"


def _device_missing() -> str | None:
    """Why the GPU tier cannot run here, or None when it can."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return "gpu_tests: torch is not installed; install the torch extra: pip install '.[torch]' (see README)"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return f"gpu_tests: no CUDA or HIP device visible to torch {torch.__version__} ({_backend(torch)})"
    return None


_MISSING = _device_missing()


class _SkippedModule(pytest.Module):
    """A test module that is not imported: it needs torch and a device."""

    def collect(self):
        pytest.skip(_MISSING)


def pytest_configure(config: pytest.Config) -> None:
    if _MISSING:
        from gpu_tests.torch_env import gpu_present

        gpu = gpu_present()
        if gpu is not None:
            raise pytest.UsageError(
                f"{_MISSING}, but this machine has a GPU ({gpu}); run `tox -e gpu` "
                "(docs/gpu_tier.md) or install a CUDA or ROCm build of torch here"
            )


def pytest_pycollect_makemodule(module_path, parent):
    if _MISSING:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # gpu_tests run alone on a machine without a device: every module skipped is a
    # clean result, not "no tests collected".
    if _MISSING and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


def pytest_report_header(config: pytest.Config) -> str:
    if _MISSING:
        return _MISSING
    import torch

    return (
        f"gpu_tests: {torch.cuda.get_device_name(0)}, torch {torch.__version__} ({_backend(torch)})"
    )


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _MISSING:
        return
    import torch

    # pytest files a test under "passed" or "failed" by its call alone; a failing setup
    # or teardown goes under "error".
    n = {
        k: len(terminalreporter.stats.get(k, [])) for k in ("passed", "failed", "error", "skipped")
    }
    terminalreporter.write_line(
        f"gpu_tests: {n['passed'] + n['failed']} ran on {torch.cuda.get_device_name(0)} with "
        f"torch {torch.__version__} ({_backend(torch)}): {n['passed']} passed, {n['failed']} "
        f"failed, {n['error']} errors, {n['skipped']} skipped"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("gpu_tests/"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def device():
    import torch

    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def device_work(device):
    """Calibrated matrix products: real device time for slow forwards and stalls."""
    from gpu_tests.device_stack import DeviceWork

    return DeviceWork(device)


@pytest.fixture(scope="session", autouse=True)
def _calibration_cache_of_this_run(tmp_path_factory):
    """Engines built here calibrate into a cache of this run's own, never the user's."""
    import os

    before = os.environ.get("KVFAULT_CACHE_DIR")
    os.environ["KVFAULT_CACHE_DIR"] = str(tmp_path_factory.mktemp("kvfault-cache"))
    yield
    if before is None:
        os.environ.pop("KVFAULT_CACHE_DIR", None)
    else:
        os.environ["KVFAULT_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def _device_idle_after():
    """No test leaves work queued on the device: wait for all of it at teardown."""
    yield
    import torch

    torch.cuda.synchronize()
