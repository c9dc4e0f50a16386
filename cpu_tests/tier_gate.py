"""The gate of a real tier's test folder (``cpu_tests/lmcache``, ``atom``, ``vllm``), the
same for each: when what the tier needs is missing, no module of the folder is imported
(each is collected as one skip that names what is missing, so ``-rs`` prints that one
line) and a run of the folder alone exits 0, not "no tests collected"; every test of
the folder carries the tier's marker. A folder's ``conftest.py`` binds its hooks:
``pytest_pycollect_makemodule = GATE.pytest_pycollect_makemodule`` and so on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


class TierGate:
    """The hooks of one folder's gate: ``folder`` (its conftest's ``__file__`` or the
    folder), ``marker`` (the pytest mark its tests carry), ``missing`` (one line saying
    what is missing; None: nothing, the folder runs)."""

    def __init__(self, folder: str | Path, marker: str, missing: str | None):
        here = Path(folder)
        self.folder = str(here.parent if here.suffix == ".py" else here)
        self.marker = getattr(pytest.mark, marker)
        self.missing = missing
        reason = missing or ""

        class _Skipped(pytest.Module):
            """A test module that is not imported: what it needs is missing."""

            def collect(self) -> Any:
                pytest.skip(reason)

        self._skipped = _Skipped

    def pytest_pycollect_makemodule(self, module_path: Path, parent: Any) -> Any:
        if self.missing:
            return self._skipped.from_parent(parent, path=module_path)
        return None

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        for item in items:
            if str(item.fspath).startswith(self.folder + "/"):
                item.add_marker(self.marker)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.missing and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK
