"""The gpu tox env's launcher (gpu_tests/torch_env.py) and gpu_tests' own guard, on a
machine without a GPU: device detection, finding torch in another environment, the one
line for each refusal, the link it writes, and the skip that only a GPU-less machine gets.

A fake torch (a package that reports a CUDA build and one device) stands in for the
real one; fake ``nvidia-smi`` and device files stand in for a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_tests import torch_env

ROOT = Path(__file__).resolve().parents[1]

FAKE_TORCH = """
__version__ = "2.11.0+cu130"
class version:
    cuda = "13.0"
    hip = None
class cuda:
    @staticmethod
    def is_available():
        return {devices} > 0
    @staticmethod
    def device_count():
        return {devices}
    @staticmethod
    def get_device_name(i):
        return "Fake H200"
"""


def _python_with_torch(tmp: Path, name: str, devices: int | None) -> str:
    """A 'python' whose environment holds a fake torch seeing ``devices`` devices
    (None: no torch at all)."""
    env = tmp / name
    site = env / "site-packages"
    site.mkdir(parents=True)
    if devices is not None:
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(FAKE_TORCH.format(devices=devices))
    exe = env / "python3"
    # -S: none of this interpreter's own packages (its real torch among them)
    exe.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def _fake_tool(tmp: Path, name: str, out: str, status: int = 0) -> str:
    bindir = tmp / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    tool = bindir / name
    tool.write_text(f"#!/bin/sh\necho '{out}'\nexit {status}\n")
    tool.chmod(0o755)
    return str(bindir)


# -- detection ---------------------------------------------------------------------------


def test_device_files_say_there_is_a_gpu(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    assert torch_env.gpu_present(dev, path="") is None
    (dev / "nvidia-uvm").touch()  # not a GPU by itself
    assert torch_env.gpu_present(dev, path="") is None
    (dev / "nvidia0").touch()
    assert torch_env.gpu_present(dev, path="") == str(dev / "nvidia0")
    (dev / "nvidia0").unlink()
    (dev / "kfd").touch()
    assert "AMD" in torch_env.gpu_present(dev, path="")


def test_vendor_tool_says_there_is_a_gpu(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    path = _fake_tool(tmp_path, "nvidia-smi", "GPU 0: NVIDIA H200 (UUID: GPU-1)")
    assert torch_env.gpu_present(dev, path=path) == "nvidia-smi: GPU 0: NVIDIA H200 (UUID: GPU-1)"
    failing = _fake_tool(tmp_path / "x", "nvidia-smi", "NVIDIA-SMI has failed", status=9)
    assert torch_env.gpu_present(dev, path=failing) is None


# -- choosing the torch ------------------------------------------------------------------


def test_torch_in_another_environment_is_found_and_linked(tmp_path):
    exe = _python_with_torch(tmp_path, "venv", devices=1)
    chosen = torch_env.choose({"KVFAULT_TORCH_PYTHON": exe}, gpu="/dev/nvidia0")
    assert (chosen.torch, chosen.cuda, chosen.devices) == ("2.11.0+cu130", "13.0", 1)
    site = tmp_path / "env-site"
    site.mkdir()
    pth = torch_env.link(chosen, site)
    assert str(tmp_path / "venv" / "site-packages") in pth.read_text().splitlines()


def test_the_first_candidate_that_sees_a_device_wins(tmp_path, monkeypatch):
    cpu_only = _python_with_torch(tmp_path, "cpu", devices=0)
    gpu = _python_with_torch(tmp_path, "gpu", devices=1)
    monkeypatch.setattr(torch_env, "candidates", lambda env: [(cpu_only, "a"), (gpu, "b")])
    assert torch_env.choose({}, gpu="/dev/nvidia0").python == gpu


@pytest.mark.parametrize(
    "devices,gpu,status,words",
    [
        (None, "/dev/nvidia0", 2, "no Python here imports torch"),
        (0, "/dev/nvidia0", 2, "sees no device"),
        (None, None, 0, "skipped: no GPU on this machine"),
        (0, None, 0, "skipped: no GPU on this machine"),
    ],
)
def test_each_refusal_is_one_line_with_its_status(
    tmp_path, monkeypatch, devices, gpu, status, words
):
    exe = _python_with_torch(tmp_path, "env", devices=devices)
    monkeypatch.setattr(torch_env, "candidates", lambda env: [(exe, "only")])
    with pytest.raises(torch_env.Refused) as refused:
        torch_env.choose({}, gpu=gpu)
    assert refused.value.status == status
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_hidden_device_names_the_variable_that_hides_it(tmp_path):
    exe = _python_with_torch(tmp_path, "env", devices=0)
    with pytest.raises(torch_env.Refused, match="CUDA_VISIBLE_DEVICES='' here"):
        torch_env.choose(
            {"KVFAULT_TORCH_PYTHON": exe, "CUDA_VISIBLE_DEVICES": ""}, gpu="/dev/nvidia0"
        )


def test_a_named_python_without_torch_is_refused_even_without_a_gpu(tmp_path):
    exe = _python_with_torch(tmp_path, "env", devices=None)
    with pytest.raises(torch_env.Refused, match="does not import torch") as refused:
        torch_env.choose({"KVFAULT_TORCH_PYTHON": exe}, gpu=None)
    assert refused.value.status == 2
    with pytest.raises(torch_env.Refused, match="does not run") as refused:
        torch_env.choose({"KVFAULT_TORCH_PYTHON": str(tmp_path / "nope")}, gpu=None)
    assert refused.value.status == 2


def test_another_python_version_says_how_to_run(tmp_path, monkeypatch):
    other = torch_env.TorchEnv("/opt/x/bin/python3", "3.99", torch="2.11.0", cuda="13.0", devices=1)
    monkeypatch.setattr(torch_env, "probe", lambda exe: other)
    with pytest.raises(torch_env.Refused) as refused:
        torch_env.choose({"KVFAULT_TORCH_PYTHON": "/opt/x/bin/python3"}, gpu="/dev/nvidia0")
    assert refused.value.status == 2
    assert "KVFAULT_TORCH_PYTHON=/opt/x/bin/python3 tox -e gpu" in str(refused.value)


def test_python_and_python3_of_one_environment_are_probed_once(tmp_path):
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    for name in ("python3", "python"):
        (bindir / name).symlink_to(sys.executable)
    found = torch_env.candidates({"KVFAULT_HOST_PATH": str(bindir)})
    assert len([exe for exe, _ in found if exe.startswith(str(bindir))]) == 1


# -- the launcher end to end --------------------------------------------------------------


def test_launcher_links_then_runs_pytest_in_a_fresh_interpreter(tmp_path, monkeypatch):
    exe = _python_with_torch(tmp_path, "venv", devices=1)
    monkeypatch.setenv("KVFAULT_TORCH_PYTHON", exe)
    monkeypatch.setattr(torch_env, "gpu_present", lambda: "/dev/nvidia0")
    ran = []
    monkeypatch.setattr(torch_env.os, "execv", lambda path, argv: ran.append(argv))
    site = tmp_path / "site"
    site.mkdir()
    (site / torch_env.LINK_NAME).write_text("/stale\n")
    assert torch_env.main(["-q", "-x"], site=site) == 0
    assert ran == [[sys.executable, "-m", "pytest", "gpu_tests", "-q", "-x"]]
    assert "/stale" not in (site / torch_env.LINK_NAME).read_text()


def test_launcher_removes_a_stale_link_when_it_refuses(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KVFAULT_TORCH_PYTHON", _python_with_torch(tmp_path, "v", devices=None))
    monkeypatch.setattr(torch_env, "gpu_present", lambda: "/dev/nvidia0")
    site = tmp_path / "site"
    site.mkdir()
    (site / torch_env.LINK_NAME).write_text("/old/torch/site\n")
    assert torch_env.main([], site=site) == 2
    assert not (site / torch_env.LINK_NAME).exists()
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "does not import torch" in err


# -- gpu_tests run by pytest directly ---------------------------------------------------


def _run_gpu_tests(path: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES",)}
    env["PATH"] = path
    env["CUDA_VISIBLE_DEVICES"] = ""  # whatever torch is here, it sees no device
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "gpu_tests", "-q", "-rs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(torch_env.gpu_present() is not None, reason="this machine has a GPU")
def test_gpu_tests_fail_in_one_line_where_a_gpu_is_but_torch_cannot_see_it(tmp_path):
    fake_smi = _fake_tool(tmp_path, "nvidia-smi", "GPU 0: NVIDIA H200 (UUID: GPU-1)")
    done = _run_gpu_tests(f"{fake_smi}:{os.environ['PATH']}")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    errors = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("ERROR")]
    assert (
        len(errors) == 1 and "this machine has a GPU (nvidia-smi: GPU 0: NVIDIA H200" in errors[0]
    )
    # and with no GPU at all: one skip line, exit 0
    done = _run_gpu_tests(os.environ["PATH"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert len([ln for ln in done.stdout.splitlines() if ln.startswith("SKIPPED")]) == 1
