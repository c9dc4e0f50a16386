"""Lazy public surfaces: a curated package names its exports, and each is imported
from its module on first use, so importing the package itself stays cheap (no torch,
no zmq, no faker, and not the rest of the stack)."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` for ``package``: ``__getattr__``
    resolves ``name`` from the module ``exports[name]`` names (a full module path) on
    first use and keeps it in the package's namespace, so later lookups skip the call;
    ``__dir__`` lists the exports beside what the package holds already."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
