"""Lazy public surfaces for packages whose members pull heavy imports (faker, zmq,
matplotlib, lmcache): a name is imported from its module on first use."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that resolves ``name`` from ``exports[name]`` (a module
    path) on first use, so importing the package itself stays cheap."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
