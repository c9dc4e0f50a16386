"""The lines of ATOM's own source a server process executes (``ServerSpec.record_path``),
recorded with ``sys.settrace`` over ATOM's files only: the path a finding's run took
through ATOM, to set against a passing twin's (``kvfault.faults.atom.fix_proof``).

Runs only inside server processes. Every thread started after ``start`` is traced too
(ATOM's save and load threads); frames outside the checkout are not traced at all.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from types import FrameType
from typing import Any


class LineRecorder:
    """Counts each ATOM line executed, by ``(file under root, function, line)``."""

    def __init__(self, root: str):
        self.root = os.path.join(os.path.realpath(root), "")
        self.hits: Counter[tuple[str, str, int]] = Counter()
        self._mine: dict[str, bool] = {}

    def _ours(self, filename: str) -> bool:
        mine = self._mine.get(filename)
        if mine is None:
            mine = self._mine[filename] = os.path.realpath(filename).startswith(self.root)
        return mine

    def _call(self, frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if not self._ours(code.co_filename):
            return None
        self.hits[(code.co_filename, _name(code), frame.f_lineno)] += 1
        return self._line

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            code = frame.f_code
            self.hits[(code.co_filename, _name(code), frame.f_lineno)] += 1
        return self._line

    def start(self) -> None:
        threading.settrace(self._call)
        sys.settrace(self._call)

    def stop(self) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type,unused-ignore]  # None: off

    def take(self) -> list[tuple[str, str, int, int]]:
        """What was recorded, ``(path relative to the checkout, function, line, times)``."""
        n = len(self.root)
        hits = dict(self.hits)  # one copy under the GIL: ATOM's threads may still be tracing
        return sorted((os.path.realpath(f)[n:], fn, line, k) for (f, fn, line), k in hits.items())


def _name(code: Any) -> str:
    """The function's qualified name (Python 3.11 on), else its name."""
    return str(getattr(code, "co_qualname", code.co_name))


def atom_root() -> str:
    """The checkout ATOM is imported from (the directory above the ``atom`` package)."""
    import atom

    return os.path.dirname(os.path.dirname(os.path.abspath(atom.__file__)))
