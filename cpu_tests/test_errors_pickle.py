"""Every exception type kvfault defines survives a pickle round trip.

A campaign worker sends each case's outcome, with the runs it judged and the error an
engine stopped with, back to its parent as a pickle (faults/campaign/pool.py); a type
that does not come back crashes the parent. The list of types is not written down
here: a fresh interpreter imports every module of reference, fakes and faults and
collects every subclass of BaseException they define, so a new one cannot slip past;
one whose ``__init__`` takes a type the test cannot make up fails until it gets an
entry in ``EXAMPLES``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import pickle
import pkgutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from kvfault.reference.errors import LoadNotTerminal
from kvfault.reference.types import OperationId

# Optional dependencies a module may import at its top (reference/device: torch): its
# import may fail only where the dependency is not installed.
OPTIONAL = ("torch", "numpy", "matplotlib")

PACKAGES = ("kvfault.reference", "kvfault.fakes", "kvfault.faults")

# Exception types in faults/ that are not errors of kvfault's own, so do not derive from
# faults.errors.KvfaultError, with why.
NOT_KVFAULT_ERRORS = {
    "kvfault.faults.injectors.engine.EngineCrash": "the simulated engine's crash, inside a run",
    "kvfault.faults.processes.Interrupted": "a signal (KeyboardInterrupt): exit 128 + its number",
    "kvfault.faults.campaign.pool._Unwind": "a pool worker's SIGTERM (SystemExit): never leaves it",
    "kvfault.faults.pytest_plugin.NotExercised": "a warning (UserWarning) in a user's pytest run",
    "kvfault.faults.vllm.engine.EngineDied": "vLLM's scheduler raised: the run's story records it",
    "kvfault.faults.atom.pictures.MergeRaised": (
        "ATOM's multimodal merge raised in a server's forward: the server records its death"
    ),
}


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, prefix=f"{pkg}.")]
    return sorted(names)


def _import_all() -> list[str]:
    """Import every module (lmcache blocked: none may need it to import); the names of
    those that failed, with why (one that needs an optional dependency that is not
    installed is left out)."""
    failed = []
    blocked = "lmcache" not in sys.modules
    if blocked:
        sys.modules["lmcache"] = None  # type: ignore[assignment]  # import lmcache raises
    try:
        for name in _modules():
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as exc:
                root = (exc.name or "").split(".")[0]
                if root not in OPTIONAL or importlib.util.find_spec(root) is not None:
                    failed.append(f"{name}: {type(exc).__name__}: {exc}")
            except Exception as exc:  # noqa: BLE001 - reported by the test
                failed.append(f"{name}: {type(exc).__name__}: {exc}")
    finally:
        if blocked:
            del sys.modules["lmcache"]
    return failed


def _ours(cls: type) -> bool:
    return cls.__module__ in PACKAGES or cls.__module__.startswith(tuple(f"{p}." for p in PACKAGES))


def _error_types() -> list[type[BaseException]]:
    """Every subclass of BaseException defined in reference, fakes or faults: those a
    module names, and those reachable as subclasses (a class defined inside a function
    that has run)."""
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        mod = sys.modules.get(name)
        for obj in vars(mod).values() if mod is not None else ():
            if isinstance(obj, type) and issubclass(obj, BaseException) and _ours(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    stack: list[type] = [BaseException]
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        if _ours(cls):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[k] for k in sorted(found)]


class _Server:
    """What ``LMCacheServerWedged`` reads off a server."""

    pid = 4242
    url = "tcp://127.0.0.1:65000"

    def process_state(self) -> str:
        return "S (sleeping)"

    def log_tail(self, n: int) -> str:
        return "last line"


# Arguments of a type the test cannot make up from its annotation, by class.
EXAMPLES: dict[str, tuple[Any, ...]] = {
    "kvfault.faults.lmcache.server.LMCacheServerWedged": (_Server(), "a lookup"),
    "kvfault.faults.atom.host.ServerHung": (
        "atom-A",
        {"hung": "get_finished not answered within 11s", "hung_stack": "worker.py:1"},
    ),
    "kvfault.faults.atom.host.ServerDied": (
        "atom-A",
        {"died": "the model runner's forward raised ValueError", "error": "ValueError"},
    ),
    "kvfault.faults.atom.pictures.MergeRaised": (
        "ValueError",
        "Kimi-K3 got 32 image embeddings for 0 placeholder tokens",
    ),
    "kvfault.faults.atom.scheduler.WorkerHung": ("get_finished", 11.0, ["worker.py:1 in run"]),
}
# Made-up values by annotation: every one differs from the others, so an error that
# came back with its attributes swapped or dropped does not compare equal.
BY_TYPE: dict[Any, Any] = {
    str: "some text",
    int: 7,
    float: 12.5,
    OperationId: OperationId("req-1", 3),
}


def _construct(cls: type[BaseException]) -> BaseException:
    key = f"{cls.__module__}.{cls.__qualname__}"
    if key in EXAMPLES:
        return cls(*EXAMPLES[key])
    owner = next(k for k in cls.__mro__ if "__init__" in k.__dict__)
    if owner.__module__ == "builtins":
        return cls("a message")  # BaseException's own __init__: takes the message
    init = owner.__dict__["__init__"]
    hints = typing.get_type_hints(init, vars(sys.modules[init.__module__]))
    args = []
    for p in list(inspect.signature(init).parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        hint = hints.get(p.name)
        assert hint in BY_TYPE, (
            f"{key}.__init__ takes {p.name}: {hint}; add an example of {key} to EXAMPLES"
        )
        value = BY_TYPE[hint]
        args.append(value + len(args) if isinstance(value, (int, float)) else value)
    return cls(*args)


def _state(exc: BaseException) -> tuple[Any, ...]:
    return (type(exc), exc.args, str(exc), dict(vars(exc)))


def round_trip_problem(cls: type[BaseException]) -> str | None:
    """Why an instance of ``cls`` does not come back from a pickle as it went (None: it
    does), under the oldest protocol a worker might use and the newest."""
    try:
        exc = _construct(cls)
        for protocol in (2, pickle.HIGHEST_PROTOCOL):
            back = pickle.loads(pickle.dumps(exc, protocol=protocol))
            if _state(back) != _state(exc):
                return f"came back as {_state(back)!r}, not {_state(exc)!r}"
    except Exception as exc:  # noqa: BLE001 - the problem is the answer
        return f"{type(exc).__name__}: {exc}"
    return None


def survey() -> dict[str, list[str]]:
    """Import every module, find every error type, round-trip each: what the test
    asserts, computed in a fresh interpreter (``python THIS_FILE``)."""
    from kvfault.faults.errors import KvfaultError

    failed = _import_all()
    types = _error_types()
    outside = [
        f"{c.__module__}.{c.__qualname__}"
        for c in types
        if c.__module__.startswith("kvfault.faults.") and not issubclass(c, KvfaultError)
    ]
    problems = []
    for cls in types:
        why = round_trip_problem(cls)
        if why is not None:
            problems.append(f"{cls.__module__}.{cls.__qualname__}: {why}")
    return {
        "import_failures": failed,
        "types": [f"{c.__module__}.{c.__qualname__}" for c in types],
        "problems": problems,
        "outside_the_base": outside,
    }


@pytest.fixture(scope="module")
def surveyed() -> dict[str, list[str]]:
    # A fresh interpreter: the walk imports every module (torch's where it is
    # installed), with lmcache blocked, and nothing this test process imported before
    # can hide a module that fails to import alone.
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(
        [sys.executable, __file__], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_module_imports_without_lmcache(surveyed):
    assert surveyed["import_failures"] == []


def test_the_walk_finds_the_errors_that_cross_a_process_boundary(surveyed):
    assert {
        "kvfault.reference.errors.EngineStopped",
        "kvfault.reference.errors.LoadNotTerminal",
        "kvfault.reference.errors.TransferUnprovable",
        "kvfault.reference.errors.EngineIdentityConflict",
        "kvfault.reference.stack.hbm.OutOfBlocks",
        "kvfault.reference.tiers.lmcache.LMCacheTierError",
        "kvfault.faults.injectors.engine.EngineCrash",
        "kvfault.faults.lmcache.server.LMCacheServerWedged",
        "kvfault.faults.processes.Interrupted",
    } <= set(surveyed["types"])


def test_every_error_of_faults_derives_from_the_one_base(surveyed):
    # The CLI maps errors to exit codes in one `except KvfaultError`: one outside the
    # base would end the command with a traceback instead of one line.
    assert sorted(surveyed["outside_the_base"]) == sorted(NOT_KVFAULT_ERRORS)


def test_every_error_type_comes_back_from_a_pickle_as_it_went(surveyed):
    assert surveyed["problems"] == []


class _MessageOnly(RuntimeError):
    """What the named errors were before they had a ``__reduce__``."""

    def __init__(self, op: OperationId, elapsed: float, bound: float):
        super().__init__(f"{op} is still not terminal after {elapsed}s (bound {bound}s)")


class _LaterStop(LoadNotTerminal):
    """A subclass someone adds later, with an ``__init__`` of its own."""

    def __init__(self, op: OperationId, elapsed: float):
        super().__init__(op, elapsed, 40.0)
        self.late = True


def test_the_check_fails_an_error_that_would_crash_the_pool():
    why = round_trip_problem(_MessageOnly)
    assert why is not None and "missing 2 required positional arguments" in why
    assert round_trip_problem(_LaterStop) is None  # subclasses inherit the round trip
    back = pickle.loads(pickle.dumps(_LaterStop(OperationId("r", 2), 41.0)))
    assert (back.bound, back.late, back.op) == (40.0, True, OperationId("r", 2))


if __name__ == "__main__":
    print(json.dumps(survey()))
