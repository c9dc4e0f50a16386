"""kvfault's build backend: setuptools' own, without the litter.

setuptools builds in the source tree and leaves ``build/`` and ``kvfault.egg-info/``
in the checkout after ``pip install .``. This wraps each PEP 517/660 hook and removes
what the hook created there (never what was there before)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every hook this module does not wrap

_LITTER = ("build", "kvfault.egg-info")


@contextlib.contextmanager
def _tidy() -> Iterator[None]:
    before = {name for name in _LITTER if Path(name).exists()}
    try:
        yield
    finally:
        for name in _LITTER:
            if name not in before:
                shutil.rmtree(name, ignore_errors=True)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    with _tidy():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):  # type: ignore[no-untyped-def]
    with _tidy():
        return _setuptools.build_sdist(sdist_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    with _tidy():
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):  # type: ignore[no-untyped-def]
    with _tidy():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):  # type: ignore[no-untyped-def]
    with _tidy():
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):  # type: ignore[no-untyped-def]
    with _tidy():  # setuptools runs egg_info here too
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):  # type: ignore[no-untyped-def]
    with _tidy():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def get_requires_for_build_editable(config_settings=None):  # type: ignore[no-untyped-def]
    with _tidy():
        return _setuptools.get_requires_for_build_editable(config_settings)
