"""ATOM's model runner's own decisions, for the tier's fake runner to call instead of
re-deciding them.

ATOM's ``atom.model_engine.model_runner`` imports aiter (AMD's GPU library) at import
time, so the module cannot be imported on a CPU. Its small pure static methods are
taken from the checkout's source instead: the one method's AST is compiled under the
module's own file name (a tracer attributes its lines to ``model_runner.py``) and run
as ATOM wrote it. Nothing of its body is written here.

Runs only inside server processes (``kvfault.faults.atom.zygote`` forks them).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any, Callable

RUNNER_MODULE = "atom.model_engine.model_runner"


def runner_static(name: str, module: str = RUNNER_MODULE) -> Callable[..., Any] | None:
    """ATOM's ``ModelRunner.<name>`` static method, compiled from the checkout's source
    with no decorator (``None`` when this ATOM's runner has no such static method)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    tree = ast.parse(Path(spec.origin).read_text(), filename=spec.origin)
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "ModelRunner"):
            continue
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == name):
                continue
            if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
                fn.decorator_list = []
                namespace: dict[str, Any] = {}
                code = compile(ast.Module(body=[fn], type_ignores=[]), spec.origin, "exec")
                exec(code, namespace)  # ATOM's function, as written in its checkout
                return namespace[name]
    return None


def pure_middle_chunk_rule() -> Callable[[Any], bool] | None:
    """Whether ATOM's ``ModelRunner.forward`` returns early for a batch, before it
    samples (``_is_pure_middle_chunk``: a batch of prefill middle chunks produces no
    token, and the runner's deferred sample is left as it was). ``None`` for an ATOM
    whose runner has no such rule (it samples every forward)."""
    return runner_static("_is_pure_middle_chunk")
