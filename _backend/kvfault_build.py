"""kvfault's build backend: setuptools' own, without the litter.

setuptools builds in the source tree and leaves ``build/`` and ``kvfault.egg-info/``
in the checkout after ``pip install .``. This runs each PEP 517/660 hook of setuptools
in a child interpreter and then removes what the hook created there (never what was
there before). The child matters: a frontend such as tox keeps one backend process for
many hooks, and setuptools remembers in-process which directories it made, so a tree
removed under it fails the next build ("could not create 'build/lib/...'")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_LITTER = ("build", "kvfault.egg-info")

_CHILD = (
    "import json, sys\n"
    "from setuptools import build_meta\n"
    "hook, args, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]\n"
    "result = getattr(build_meta, hook)(*args)\n"
    "open(out, 'w').write(json.dumps(result))\n"
)


def _run(hook: str, *args: Any) -> Any:
    before = {name for name in _LITTER if Path(name).exists()}
    try:
        with tempfile.TemporaryDirectory(prefix="kvfault-build-") as tmp:
            out = Path(tmp, "result.json")
            # The child's own output goes to stderr: a frontend may read stdout.
            subprocess.run(
                [sys.executable, "-c", _CHILD, hook, json.dumps(args), str(out)],
                check=True,
                stdout=sys.stderr,
            )
            return json.loads(out.read_text())
    finally:
        for name in _LITTER:
            if name not in before:
                shutil.rmtree(name, ignore_errors=True)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    return _run("build_wheel", wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):  # type: ignore[no-untyped-def]
    return _run("build_sdist", sdist_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    return _run("build_editable", wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):  # type: ignore[no-untyped-def]
    return _run("prepare_metadata_for_build_wheel", metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):  # type: ignore[no-untyped-def]
    return _run("prepare_metadata_for_build_editable", metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):  # type: ignore[no-untyped-def]
    return _run("get_requires_for_build_wheel", config_settings)


def get_requires_for_build_sdist(config_settings=None):  # type: ignore[no-untyped-def]
    return _run("get_requires_for_build_sdist", config_settings)


def get_requires_for_build_editable(config_settings=None):  # type: ignore[no-untyped-def]
    return _run("get_requires_for_build_editable", config_settings)
