"""Loaded libraries: ``Module`` and the argument checks at the kernel boundary.

When ``tensorplay.Tensor`` carries the native DLPack exchange table
(``__dlpack_c_exchange_api__``, from ``tensorplay._C``), tvm-ffi converts TensorPlay
tensors itself, in C, and a kernel attribute is the engine's own function object: no
Python runs between the call and the kernel.

Without that table, a kernel attribute is a ``Kernel``: a thin Python wrapper that checks
TensorPlay tensor arguments (read-only and misaligned memory are refused with a
``BufferError`` naming the argument and the fix; tvm-ffi itself ignores DLPack's read-only
flag), hands CPU tensors over as the
numpy arrays that hold their memory (numpy's C ``__dlpack__`` is ~20x cheaper than our
pure-Python one), runs CUDA kernels on TensorPlay's current stream, and returns engine
tensors as ``tp.Tensor``.
"""

from __future__ import annotations

from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.utils.cpp_jit import _engine

# numpy dtype kinds numpy's __dlpack__ can export (ml_dtypes' bfloat16/float8 are kind "V")
_NUMPY_EXPORTABLE = frozenset("biufc")


def native_exchange() -> bool:
    """Whether tp.Tensor carries the native DLPack exchange table tvm-ffi uses directly."""
    return hasattr(Tensor, "__dlpack_c_exchange_api__")


def _tensor_arg(t: Tensor, i: int, kernel: str) -> Any:
    """What to hand tvm-ffi for TensorPlay tensor ``t``, argument ``i`` of ``kernel``."""
    kind = t.device.type
    if kind == "cpu":
        arr = t.numpy(force=True)  # the array viewing the tensor's memory, no copy
        flags = arr.flags  # (building the flags object is the costly part: once)
        if flags.writeable and flags.aligned:
            return arr if arr.dtype.kind in _NUMPY_EXPORTABLE else t
        if not flags.writeable:
            raise BufferError(
                f"{kernel}: argument {i} is a read-only tensor, and a kernel can write "
                "through any TensorView; pass a writable copy (x.clone())"
            )
    elif kind == "meta":
        raise BufferError(
            f"{kernel}: argument {i} is a meta tensor, which holds no data; "
            "kernels take cpu or cuda tensors"
        )
    elif t.data_ptr() % t.dtype.itemsize == 0:
        return t  # CUDA: tvm-ffi takes it through __dlpack__
    raise BufferError(
        f"{kernel}: argument {i}'s data address {t.data_ptr():#x} is not a multiple of its "
        f"element size ({t.dtype.itemsize} bytes for {t.dtype}), which C++ kernels cannot "
        "read safely; pass an aligned copy (x.clone())"
    )


class Kernel:
    """A compiled function, called with TensorPlay tensors, scalars and strings."""

    def __init__(self, fn: Any, qualname: str, doc: str | None = None) -> None:
        self._fn = fn
        self._engine_tensor = _engine.engine().Tensor
        self.__name__ = qualname.rsplit(".", 1)[-1]
        self.__qualname__ = qualname
        self.__doc__ = doc

    def __call__(self, *args: Any) -> Any:
        converted = list(args)
        cuda_device = None
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                if cuda_device is None and a.device.type == "cuda":
                    cuda_device = a.device
                converted[i] = _tensor_arg(a, i, self.__qualname__)
        if cuda_device is None:
            out = self._fn(*converted)
        else:
            out = _call_on_tensorplay_stream(self._fn, converted, cuda_device)
        return tp.from_dlpack(out) if isinstance(out, self._engine_tensor) else out

    def __repr__(self) -> str:
        return f"<cpp_jit kernel {self.__qualname__}>"


def _call_on_tensorplay_stream(fn: Any, args: list, device: Any) -> Any:
    # tvm-ffi's __dlpack__ path does not pick up a stream: set TensorPlay's current one
    # as the environment stream kernels read with TVMFFIEnvGetStream.
    tvm_ffi = _engine.engine()
    index = device.index if device.index is not None else tp.cuda.current_device()
    stream = tp.cuda.current_stream(device).cuda_stream
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", index), stream):
        return fn(*args)


class Module:
    """A loaded cpp_jit library; its exported functions are attributes (``mod.scale_cpu``)."""

    def __init__(self, ffi_module: Any, name: str, path: str | None) -> None:
        self.__dict__.update(_ffi=ffi_module, _name=name, path=path)

    @property
    def ffi_module(self) -> Any:
        """The underlying ``tvm_ffi.Module`` (raw functions, no TensorPlay checks)."""
        return self._ffi

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        try:
            fn = self._ffi.get_function(attr)
        except AttributeError:
            raise AttributeError(
                f"cpp_jit module {self._name!r} has no function {attr!r}; a function is "
                "exported when it is listed in functions= (load_inline) or exported with "
                "TVM_FFI_DLL_EXPORT_TYPED_FUNC (source files)"
            ) from None
        if native_exchange():
            kernel = fn
        else:
            doc = getattr(self._ffi, "get_function_doc", lambda name: None)(attr)
            kernel = Kernel(fn, f"{self._name}.{attr}", doc)
        self.__dict__[attr] = kernel  # later lookups skip __getattr__
        return kernel

    __getitem__ = __getattr__

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        return f"<cpp_jit module {self._name!r}{where}>"
