"""The boundaries of ATOM's hybrid (DeepSeek-V4) offload that a CPU cannot run, faked.

Installed in a hybrid server's processes only, on top of ``boundary``'s fakes, before
ATOM's DSV4 modules are imported. Each stands where ATOM meets the GPU:

- the PAGE/SLOT region kernels (``hybrid/dsv4/triton_page_slot``): ``dsv4_staging``'s
  CPU twin, under the kernel module's name;
- the device query ``torch.cuda.current_device``: answers 0. ATOM's DSV4 worker builds
  its codec's device as ``cuda:<current device>`` (``connector.py:317``), which a CPU
  torch cannot answer;
- the device of ATOM's DSV4 codec (``DSV4PageSlotCodec``, the name ATOM's DSV4
  connector module builds it by): right after ATOM's own constructor (which takes the
  Triton staging, the twin, because the device it was given is ``cuda``) the codec is
  told its device is ``HostGpu``: ATOM allocates its SLOT staging there and checks
  buffers against it, and the buffers live in host memory;
- the paged state-checkpoint copy kernel (``launch_copy_descriptor``, which ATOM's DSV4
  attention module calls to store a request's SLOT into PAGE units and restore it):
  ``dsv4_state_copy``'s CPU twin, under the name that module calls;
- the chip aiter reports (``get_gfx``, as ATOM's DSV4 attention module calls it):
  ``gfx950``, one of the two on which ATOM runs an fp8 DSV4 KV cache (its "2buff"
  layout; elsewhere it falls back to bf16, ``deepseek_v4_attn.py:464-476``). Only an
  fp8 server asks; the kernels of that path (aiter's op4/op5) are never run here;
- pinned host memory: ATOM's ``CpuGpuBuffer`` pins by default, and a CPU torch has no
  pinned allocator; the tier's buffers are host memory on both sides;
- aiter's and Triton's GPU ops, as names only: ATOM's DSV4 attention module (whose
  metadata builder allocates the KV pools and describes them as transfer regions)
  imports dozens of them at load. While it loads, every missing ``aiter.*`` or
  ``triton.*`` name is a placeholder; afterwards any call of one raises, so nothing
  the tier runs can silently use a kernel it does not have.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from contextlib import contextmanager
from typing import Any, Iterator

KERNEL_MODULE = "atom.kv_transfer.offload.hybrid.dsv4.triton_page_slot"
CONNECTOR_MODULE = "atom.kv_transfer.offload.hybrid.dsv4.connector"
ATTENTION_MODULE = "atom.model_ops.attentions.deepseek_v4_attn"
_NAME_ROOTS = ("aiter", "triton")
GFX = "gfx950"  # the chip ``get_gfx`` answers: ATOM's fp8 DSV4 KV runs on it


class _GpuOrHostType(str):
    """A device type that is ``cuda`` to ATOM's is-it-a-GPU checks and ``cpu`` to its
    same-device checks against host tensors (the memory is host memory)."""

    def __eq__(self, other: object) -> bool:
        return other in ("cuda", "cpu")

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


class HostGpu(str):
    """The device ATOM's DSV4 codec is told it runs on: a GPU (``.type`` reads
    ``cuda``) with no index, whose tensors torch allocates on the host (``"cpu"``)."""

    type = _GpuOrHostType("cuda")
    index = None  # type: ignore[assignment]  # torch.device's index: shadows str.index on purpose

    def __new__(cls) -> HostGpu:
        return super().__new__(cls, "cpu")


class GpuName:
    """An aiter or Triton name ATOM imports and the tier never runs. Until ``sealed``
    a call is a decorator (``@triton.jit``, ``@torch_compile_guard()``) at import;
    after, any call raises."""

    sealed = False

    def __init__(self, name: str) -> None:
        self._name = name
        self.__name__ = self.__qualname__ = name.rsplit(".", 1)[-1]
        self.__module__ = name.rsplit(".", 1)[0]

    def __getattr__(self, attr: str) -> GpuName:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return GpuName(f"{self._name}.{attr}")

    def __getitem__(self, key: Any) -> GpuName:
        return self

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if GpuName.sealed:
            raise RuntimeError(f"{self._name} is aiter/Triton GPU code: the atom tier runs none")
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # a decorator: the function itself
        return GpuName(f"{self._name}()")


class _NamesModule(types.ModuleType):
    def __getattr__(self, attr: str) -> GpuName:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return GpuName(f"{self.__name__}.{attr}")


class _NamesFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in _NAME_ROOTS and name not in sys.modules:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        mod = _NamesModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        pass


@contextmanager
def gpu_names() -> Iterator[None]:
    """While inside: every missing ``aiter.*``/``triton.*`` module and name imports as
    a placeholder. On leaving, the placeholders are sealed (a call raises), the finder
    is removed and the fabricated ``triton`` modules leave ``sys.modules`` (other code
    asks whether Triton is installed; it is not)."""
    before = set(sys.modules)
    finder = _NamesFinder()
    sys.meta_path.insert(0, finder)
    patched = []
    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] == "aiter" and "__getattr__" not in vars(mod):
            mod.__getattr__ = _NamesModule.__getattr__.__get__(mod)  # type: ignore[method-assign]
            patched.append(mod)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for mod in patched:
            del mod.__getattr__
        for name in set(sys.modules) - before:
            if name.split(".")[0] == "triton":
                del sys.modules[name]
        GpuName.sealed = True


def install() -> None:
    """The hybrid connector's boundary fakes (see the module's docstring); ``boundary``'s
    must be installed first. Imports ATOM's DSV4 connector and attention modules."""
    import torch

    from kvfault.faults.atom import dsv4_staging

    sys.modules[KERNEL_MODULE] = dsv4_staging
    torch.cuda.current_device = lambda: 0
    import atom.utils

    kwdefaults = atom.utils.CpuGpuBuffer.__init__.__kwdefaults__
    assert kwdefaults is not None and "pin_memory" in kwdefaults
    kwdefaults["pin_memory"] = False
    connector = importlib.import_module(CONNECTOR_MODULE)
    codec_class = connector.DSV4PageSlotCodec

    class HostGpuCodec(codec_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.device = HostGpu()

    HostGpuCodec.__name__ = HostGpuCodec.__qualname__ = codec_class.__name__
    setattr(connector, "DSV4PageSlotCodec", HostGpuCodec)  # noqa: B010  ATOM builds it by this name
    with gpu_names():
        attention = importlib.import_module(ATTENTION_MODULE)
    from kvfault.faults.atom import dsv4_state_copy

    setattr(attention, "launch_copy_descriptor", dsv4_state_copy.copy_descriptor)  # noqa: B010
    setattr(attention, "get_gfx", lambda: GFX)  # noqa: B010


def place_on_host(worker_connector: Any) -> None:
    """Tell the GPU connector ATOM's DSV4 worker built for lmcache (after
    ``register_kv_caches``; it took its device from the codec's as a ``torch.device``,
    ``cpu``) that its device is ``HostGpu``: its staging buffers are host memory and
    its check for the Triton staging (``_block_gpu_connector.py:262-270``) sees a GPU."""
    impl = getattr(worker_connector, "_impl", worker_connector)
    impl._engine.gpu_connector.device = HostGpu()
