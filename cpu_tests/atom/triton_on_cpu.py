"""A CPU interpreter of the few Triton language calls ATOM's DSV4 region kernels and its
paged state-checkpoint copy kernel make,
so a test can run ATOM's own kernel source (from the checkout) on host memory and
compare its bytes with the tier's CPU twin.

A kernel's tensor arguments become pointers (an address and an element type); every
other value is a torch tensor wrapped in ``Value``. ``tl.load`` and ``tl.store`` read
and write host memory at the lanes' addresses with ctypes, masked lanes only. The
launcher ``kernel[grid](...)`` runs the kernel body once per program id, in order.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import types
from pathlib import Path
from typing import Any

import torch


class PointerType:
    def __init__(self, element: torch.dtype) -> None:
        self.element = element


def _raw(x: Any) -> Any:
    return x.t if isinstance(x, Value) else x


class Pointer:
    def __init__(self, address: Any, element: torch.dtype) -> None:
        self.address = torch.as_tensor(address, dtype=torch.int64)
        self.element = element

    def __add__(self, other: Any) -> Pointer:
        step = torch.tensor([], dtype=self.element).element_size()
        return Pointer(
            self.address + torch.as_tensor(_raw(other)).to(torch.int64) * step, self.element
        )

    __radd__ = __add__


class Value:
    def __init__(self, t: Any) -> None:
        self.t = torch.as_tensor(t)

    def to(self, dtype: Any) -> Any:
        if isinstance(dtype, PointerType):
            return Pointer(self.t.to(torch.int64), dtype.element)
        return Value(self.t.to(dtype))

    def _op(name: str, swap: bool = False):  # type: ignore[misc]
        def op(self: Value, other: Any) -> Any:
            if isinstance(other, Pointer):
                return other + self
            a, b = (_raw(other), self.t) if swap else (self.t, _raw(other))
            a, b = torch.as_tensor(a), torch.as_tensor(b)
            if a.dtype != b.dtype and not (a.is_floating_point() or b.is_floating_point()):
                # Triton widens mixed integers to the wider type; torch would keep a
                # 0-dim operand's wider type out of it (int64 + int32 lanes -> int32).
                a, b = a.to(torch.int64), b.to(torch.int64)
            return Value(getattr(a, name)(b))

        return op

    __add__ = _op("__add__")
    __radd__ = _op("__add__", swap=True)
    __sub__ = _op("__sub__")
    __rsub__ = _op("__sub__", swap=True)
    __mul__ = _op("__mul__")
    __rmul__ = _op("__mul__", swap=True)
    __lt__ = _op("__lt__")
    __floordiv__ = _op("__floordiv__")
    __mod__ = _op("__mod__")


class Language(types.ModuleType):
    """``triton.language`` as the kernels use it."""

    int32 = torch.int32
    int64 = torch.int64
    uint8 = torch.uint8
    constexpr = object

    def __init__(self) -> None:
        super().__init__("triton.language")
        self.pid: tuple[int, ...] = ()

    def program_id(self, axis: int) -> Value:
        return Value(torch.tensor(self.pid[axis], dtype=torch.int32))

    @staticmethod
    def arange(start: int, end: int) -> Value:
        return Value(torch.arange(start, end, dtype=torch.int32))

    @staticmethod
    def pointer_type(element: torch.dtype) -> PointerType:
        return PointerType(element)

    @staticmethod
    def _lanes(ptr: Pointer, mask: Any) -> tuple[list[int], list[bool]]:
        addresses = ptr.address.reshape(-1).tolist()
        keep = [True] * len(addresses) if mask is None else _raw(mask).reshape(-1).tolist()
        return addresses, keep

    def load(self, ptr: Pointer, mask: Any = None) -> Value:
        size = torch.tensor([], dtype=ptr.element).element_size()
        addresses, keep = self._lanes(ptr, mask)
        raw = b"".join(
            ctypes.string_at(a, size) if k else bytes(size)
            for a, k in zip(addresses, keep, strict=True)
        )
        values = torch.frombuffer(bytearray(raw), dtype=ptr.element).clone()
        return Value(values.reshape(ptr.address.shape))

    def store(self, ptr: Pointer, value: Value, mask: Any = None) -> None:
        size = torch.tensor([], dtype=ptr.element).element_size()
        data = value.t.to(ptr.element).reshape(-1).contiguous().numpy().tobytes()
        addresses, keep = self._lanes(ptr, mask)
        for i, (a, k) in enumerate(zip(addresses, keep, strict=True)):
            if k:
                ctypes.memmove(a, data[i * size : (i + 1) * size], size)


class Kernel:
    def __init__(self, fn: Any, tl: Language) -> None:
        self.fn, self.tl = fn, tl

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            kwargs.pop("num_warps", None)
            args = tuple(
                Pointer(a.data_ptr(), a.dtype) if isinstance(a, torch.Tensor) else a for a in args
            )
            for pid in itertools.product(*(range(n) for n in grid)):
                self.tl.pid = pid
                self.fn(*args, **kwargs)

        return launch


def load_kernel_module(path: Path, monkeypatch: Any) -> types.ModuleType:
    """ATOM's kernel module at ``path``, executed with this interpreter as ``triton``;
    its host-to-device copies of plan metadata stay on the host."""
    tl = Language()
    triton = types.ModuleType("triton")
    triton.jit = lambda fn: Kernel(fn, tl)  # type: ignore[attr-defined]
    triton.language = tl  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.language", tl)
    mod = types.ModuleType("atom_dsv4_kernels_on_cpu")
    mod.__file__ = str(path)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)  # noqa: S102
    host = lambda dtype: lambda values, device: torch.tensor(tuple(values), dtype=dtype)  # noqa: E731
    mod._static_device_i64 = host(torch.int64)  # type: ignore[attr-defined]
    mod._static_device_i32 = host(torch.int32)  # type: ignore[attr-defined]
    return mod
