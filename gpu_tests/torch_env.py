"""Run gpu_tests against the machine's own torch build: the ``gpu`` tox env's command.

``python -m gpu_tests.torch_env [pytest args]``:

1. Finds the Python whose environment holds torch, first of:
   ``$KVFAULT_TORCH_PYTHON``; this env's own Python; ``python3`` and ``python`` on the
   PATH tox was started from (an activated virtual or conda environment); the Python
   that runs tox.
2. Decides, in one line on stderr:
   - no GPU on this machine (no NVIDIA or AMD device files, no ``nvidia-smi`` or
     ``rocm-smi`` answering) and no torch that sees one: the GPU tier is skipped, exit 0;
   - a GPU here, but no torch, or a torch that sees no device: exit 2, saying what to do;
   - ``$KVFAULT_TORCH_PYTHON`` set but wrong (missing, no torch, another Python
     version than this env): exit 2.
3. Otherwise links that environment's packages into this env, after this env's own
   (one ``.pth`` file, rewritten every run), and runs ``pytest gpu_tests`` in a fresh
   interpreter, which reads the link.

Why: tox builds its env with virtualenv, and a virtualenv made from a venv's Python
sees only the base interpreter's packages, so ``sitepackages = true`` alone never finds
a torch that lives in a virtual environment (how most GPU machines install it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

LINK_NAME = "_kvfault_torch_env.pth"
PROBE_TIMEOUT_S = 180.0  # importing torch and initialising CUDA can take a while

# Run by each candidate Python: what it holds, as one JSON line.
_PROBE = r"""
import json, os, sys
out = {"python": "%d.%d" % sys.version_info[:2], "executable": sys.executable,
       "paths": [p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)]}
try:
    import torch
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
else:
    out["torch"] = torch.__version__
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["hip"] = getattr(torch.version, "hip", None)
    out["torch_dir"] = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
    try:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:
        n, out["device_error"] = 0, "%s: %s" % (type(exc).__name__, exc)
    out["devices"] = n
    out["device_name"] = torch.cuda.get_device_name(0) if n else None
print(json.dumps(out))
"""


@dataclass(frozen=True)
class TorchEnv:
    """What one Python holds: its version, its package paths and its torch, if any."""

    python: str  # the interpreter asked, as given
    version: str  # "3.12"
    paths: tuple[str, ...] = ()
    torch: str | None = None
    cuda: str | None = None
    hip: str | None = None
    devices: int = 0
    device_name: str | None = None
    error: str | None = None  # why torch did not import, or why the probe failed

    @property
    def backend(self) -> str:
        if self.hip:
            return f"hip {self.hip}"
        return f"cuda {self.cuda}" if self.cuda else "cpu build"


def probe(python: str) -> TorchEnv:
    """Ask ``python`` what it holds; a Python that cannot run gives ``error``."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return TorchEnv(python, "", error=f"{type(exc).__name__}: {exc}")
    lines = done.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return TorchEnv(python, "", error=f"exit {done.returncode}: {tail}")
    paths = list(out.get("paths", []))
    if out.get("torch_dir") and out["torch_dir"] not in paths:
        paths.append(out["torch_dir"])
    return TorchEnv(
        python=python,
        version=out["python"],
        paths=tuple(paths),
        torch=out.get("torch"),
        cuda=out.get("cuda"),
        hip=out.get("hip"),
        devices=int(out.get("devices", 0)),
        device_name=out.get("device_name"),
        error=out.get("error") or out.get("device_error"),
    )


def gpu_present(dev: Path = Path("/dev"), path: str | None = None) -> str | None:
    """What says this machine has a GPU (a device file or the vendor's tool), or None."""
    nvidia = sorted(
        p.name for p in _glob(dev, "nvidia*") if re.fullmatch(r"nvidia(\d+|ctl)", p.name)
    )
    if nvidia:
        return f"{dev / nvidia[0]}"
    if (dev / "kfd").exists():
        return f"{dev / 'kfd'} (AMD ROCm)"
    for tool, args in (("nvidia-smi", ["-L"]), ("rocm-smi", ["--showproductname"])):
        exe = shutil.which(tool, path=path)
        if exe is None:
            continue
        try:
            done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        first = next((ln.strip() for ln in done.stdout.splitlines() if "GPU" in ln), None)
        if done.returncode == 0 and first:
            return f"{tool}: {first}"
    return None


def _glob(dev: Path, pattern: str) -> list[Path]:
    try:
        return list(dev.glob(pattern))
    except OSError:
        return []


def candidates(environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(python, where it came from), in the order they are tried, without repeats."""
    env = os.environ if environ is None else environ
    found: list[tuple[str, str]] = [(sys.executable, "this env")]
    host_path = env.get("KVFAULT_HOST_PATH") or env.get("PATH", "")
    for name in ("python3", "python"):
        exe = shutil.which(name, path=host_path)
        if exe:
            found.append((exe, f"{name} on PATH"))
    runner = _parent_python()
    if runner:
        found.append((runner, "the Python running tox"))
    # python and python3 of one environment are one candidate (each probe imports torch)
    seen: set[tuple[str, str]] = set()
    unique = []
    for exe, why in found:
        key = (os.path.dirname(os.path.abspath(exe)), os.path.realpath(exe))
        if key not in seen:
            seen.add(key)
            unique.append((exe, why))
    return unique


def _parent_python() -> str | None:
    """The interpreter path the parent process (tox) was started with, on Linux."""
    try:
        argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    first = os.fsdecode(argv[0]) if argv and argv[0] else ""
    if os.path.isabs(first) and "python" in os.path.basename(first) and os.access(first, os.X_OK):
        return first
    return None


class Refused(Exception):
    """One line for stderr, and the exit status."""

    def __init__(self, line: str, status: int):
        super().__init__(line)
        self.status = status


def choose(environ: dict[str, str] | None = None, gpu: str | None = None) -> TorchEnv:
    """The torch environment to run against; raises ``Refused`` with the one line to
    print (status 0: skip, no GPU here; status 2: a GPU here, or a bad setting)."""
    env = os.environ if environ is None else environ
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    named = env.get("KVFAULT_TORCH_PYTHON")
    if named:
        found = probe(named)
        if not found.version:
            raise Refused(f"KVFAULT_TORCH_PYTHON={named} does not run: {found.error}", 2)
        if found.torch is None:
            raise Refused(f"KVFAULT_TORCH_PYTHON={named} does not import torch ({found.error})", 2)
        tried = [found]
    else:
        tried = []
        for exe, _ in candidates(
            env
        ):  # each probe imports torch: stop at the first that sees a device
            tried.append(probe(exe))
            if tried[-1].devices > 0:
                break
    with_torch = [t for t in tried if t.torch is not None]
    seeing = [t for t in with_torch if t.devices > 0]
    if not seeing:
        if gpu is None:
            what = f"torch {with_torch[0].torch} sees no device" if with_torch else "no torch"
            raise Refused(
                "gpu: skipped: no GPU on this machine (no /dev/nvidia*, /dev/kfd, nvidia-smi "
                f"or rocm-smi; {what})",
                0,
            )
        if not with_torch:
            asked = ", ".join(t.python for t in tried)
            raise Refused(
                f"gpu: this machine has a GPU ({gpu}) but no Python here imports torch "
                f"(asked {asked}); set KVFAULT_TORCH_PYTHON to the python of the "
                "environment that holds your CUDA or ROCm build of torch",
                2,
            )
        t = with_torch[0]
        hint = (
            "install a CUDA or ROCm build of torch there"
            if not (t.cuda or t.hip)
            else "check the driver and " + _visibility(env)
        )
        why = f": {t.error}" if t.error else ""
        raise Refused(
            f"gpu: this machine has a GPU ({gpu}) but torch {t.torch} ({t.backend}) in "
            f"{t.python} sees no device{why}; {hint}",
            2,
        )
    chosen = seeing[0]
    if chosen.version != here:
        raise Refused(
            f"gpu: torch is in {chosen.python} (Python {chosen.version}) but this env runs "
            f"Python {here}; run: KVFAULT_TORCH_PYTHON={chosen.python} tox -e gpu",
            2,
        )
    return chosen


def _visibility(env) -> str:
    """The device-visibility variables, with their values where they are set."""
    names = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
    set_here = [f"{n}={env[n]!r}" for n in names if n in env]
    return (
        ", ".join(set_here) + " here" if set_here else "CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES"
    )


def site_dir() -> Path:
    """This env's site-packages, where the link goes."""
    return Path(sysconfig.get_paths()["purelib"])


def link(chosen: TorchEnv, site: Path) -> Path:
    """Write the ``.pth`` in ``site`` that puts ``chosen``'s package paths after this
    env's own."""
    target = site / LINK_NAME
    own = {os.path.realpath(p) for p in sys.path if p}
    lines = [p for p in chosen.paths if os.path.realpath(p) not in own and os.path.isdir(p)]
    target.write_text("".join(f"{p}\n" for p in lines))
    return target


def main(argv: list[str] | None = None, site: Path | None = None) -> int:
    """Choose, link and run pytest (never returns then); or print one line and return
    its status."""
    args = list(sys.argv[1:] if argv is None else argv)
    site = site_dir() if site is None else site
    (site / LINK_NAME).unlink(missing_ok=True)  # a stale link must not pick the torch
    try:
        chosen = choose(gpu=gpu_present())
    except Refused as refused:
        print(refused, file=sys.stderr)
        return refused.status
    link(chosen, site)
    print(
        f"gpu: torch {chosen.torch} ({chosen.backend}) from {chosen.python}, "
        f"{chosen.devices} device(s): {chosen.device_name}",
        file=sys.stderr,
        flush=True,
    )
    cmd = [sys.executable, "-m", "pytest", "gpu_tests", *args]
    os.execv(sys.executable, cmd)
    return 0  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("gpu: interrupted", file=sys.stderr)
        sys.exit(130)
