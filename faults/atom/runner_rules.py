"""ATOM's model runner's (and its multimodal model's) own decisions, for the tier's fake
runner to call instead of re-deciding them.

ATOM's ``atom.model_engine.model_runner`` and its model modules import aiter (AMD's GPU
library) at import time, so they cannot be imported on a CPU. Their small methods are
taken from the checkout's source instead: the one method's AST is compiled under the
module's own file name (a tracer attributes its lines to it) and run as ATOM wrote it.
Nothing of its body is written here.

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
    return _compiled(Path(spec.origin), "ModelRunner", name, static=True)


def _compiled(
    path: Path, cls_name: str, name: str, static: bool, namespace: dict[str, Any] | None = None
) -> Callable[..., Any] | None:
    """``cls_name.name`` from the source file ``path``, compiled alone under the file's
    own name (``namespace``: the module globals it reads); a static method only when
    ``static``. ``None`` when the file or the method is not there."""
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(), filename=str(path))
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == cls_name):
            continue
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == name):
                continue
            is_static = any(
                isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list
            )
            if is_static != static:
                return None
            fn.decorator_list = []
            scope: dict[str, Any] = dict(namespace or {})
            code = compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec")
            exec(code, scope)  # ATOM's function, as written in its checkout
            return scope[name]
    return None


def pure_middle_chunk_rule() -> Callable[[Any], bool] | None:
    """Whether ATOM's ``ModelRunner.forward`` returns early for a batch, before it
    samples (``_is_pure_middle_chunk``: a batch of prefill middle chunks produces no
    token, and the runner's deferred sample is left as it was). ``None`` for an ATOM
    whose runner has no such rule (it samples every forward)."""
    return runner_static("_is_pure_middle_chunk")


# The multimodal model whose merge the tier runs (its placeholder mask and count check).
MERGE_MODEL = ("atom/models/kimi_k3.py", "KimiK3ForConditionalGeneration")


def model_merge(placeholder: int) -> Callable[..., Any] | None:
    """ATOM's Kimi-K3 ``merge_multimodal_embeddings(input_ids, inputs_embeds,
    vision_embeds)``, compiled from the checkout's source and bound to a model whose
    placeholder id is ``placeholder``: it writes the vision embeddings over the
    placeholder positions of ``input_ids`` and raises ``ValueError`` when their numbers
    differ. ``None`` for an ATOM without it. The model module itself imports aiter, so
    only the method is taken."""
    import types

    import torch

    spec = importlib.util.find_spec("atom")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent.parent / MERGE_MODEL[0]
    fn = _compiled(path, MERGE_MODEL[1], "merge_multimodal_embeddings", False, {"torch": torch})
    if fn is None:
        return None
    model = types.SimpleNamespace(media_placeholder_token_id=placeholder)
    return types.MethodType(fn, model)
