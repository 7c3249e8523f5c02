"""Loaded libraries: ``Module``, and ``Kernel``, the checks every kernel call goes through.

A kernel sees its tensors as raw views and may write through any of them, so every tensor
argument is treated as written unless the kernel was declared to only read it
(``read_only={"name": [positions]}`` when loading). A written tensor is held to what any
in-place operation in TensorPlay is held to, before the kernel runs:

* its elements must not share memory (an expanded, stride-0 tensor or an overlapping
  ``as_strided`` view): a kernel writing ``numel()`` elements from ``data_ptr()`` would
  write past the tensor's memory. Refused with ``BufferError``.
* while grad mode is on it must not require grad: autograd cannot see a kernel's writes
  (a leaf is refused exactly as ``leaf.add_(1)`` is). Refused with ``RuntimeError``.

and after the kernel returns (or raises) its version counter is bumped, so a tensor that
autograd saved for backward and the kernel then overwrote fails in ``backward()`` instead
of giving a wrong gradient. Read-only arguments are checked for none of this and keep their
version: the kernel must honour their strides when it reads them.

When ``tensorplay.Tensor`` carries the native DLPack exchange table
(``__dlpack_c_exchange_api__``, from ``tensorplay._C``), tvm-ffi converts the tensors
itself, in C. Without it, ``Kernel`` also converts them: read-only memory and misaligned
tensors are refused with a ``BufferError`` naming the argument and the fix (tvm-ffi itself
ignores DLPack's read-only flag), CPU tensors go over as the numpy arrays holding their
memory (numpy's C ``__dlpack__`` is ~20x cheaper than our pure-Python one), CUDA kernels run
on TensorPlay's current stream, and engine tensors come back as ``tp.Tensor``.

Every engine function is first wrapped by the C++ guard (``_support.guard``): whatever a
kernel throws arrives as a Python exception naming it, never as ``std::terminate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.utils.cpp_jit import _engine, _support

# numpy dtype kinds numpy's __dlpack__ can export (ml_dtypes' bfloat16/float8 are kind "V")
_NUMPY_EXPORTABLE = frozenset("biufc")

ReadOnly = Mapping[str, int | Iterable[int]]


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


def read_only_spec(read_only: object) -> dict[str, frozenset[int]]:
    """``read_only`` as given to a loader, checked: function name -> argument positions."""
    if read_only is None:
        return {}
    if not isinstance(read_only, Mapping):
        raise TypeError(
            "cpp_jit: read_only must map function names to the positions of the tensor "
            f"arguments they only read, e.g. read_only={{'scale': [0]}}; got {read_only!r}"
        )
    spec = {}
    for name, positions in read_only.items():
        if not isinstance(name, str):
            raise TypeError(f"cpp_jit: read_only: keys are function names, got {name!r}")
        items = [positions] if isinstance(positions, int) else positions
        if not isinstance(items, Iterable) or isinstance(items, str):
            raise TypeError(
                f"cpp_jit: read_only[{name!r}] must be an argument position or a list of "
                f"them, got {positions!r}"
            )
        items = list(items)
        for i in items:
            if type(i) is not int or i < 0:
                raise ValueError(
                    f"cpp_jit: read_only[{name!r}]: {i!r} is not an argument position "
                    "(0 for the first argument)"
                )
        spec[name] = frozenset(items)
    return spec


def _shares_memory_within(t: Tensor) -> bool:
    """Whether the layout may map two indices to one element (or runs backwards).

    Sufficient test: with the dimensions sorted by stride, each stride must step past
    everything the smaller ones reach. Then the elements are distinct and span at least
    ``numel()`` elements upward from ``data_ptr()``, which is what a kernel writing
    linearly assumes.
    """
    if t._stride is None or 0 in t._shape:  # C-contiguous, or nothing to write
        return False
    dims = sorted((s, n) for n, s in zip(t._shape, t._stride) if n > 1)
    reach = 0  # the largest offset the dimensions seen so far address
    for s, n in dims:
        if s <= reach:
            return True
        reach += s * (n - 1)
    return False


def _check_written(t: Tensor, where: str, fn: str, i: int, kernel: str) -> None:
    declare = f"read_only={{{fn!r}: [{i}]}}"
    if _shares_memory_within(t):
        raise BufferError(
            f"{kernel}: {where} (shape {list(t.shape)}, strides {list(t.stride())}) is expanded "
            "or overlaps itself: several of its elements share memory, so a kernel writing "
            "numel() elements would write past it. If the kernel writes it, pass x.clone(); "
            f"if it only reads it (honouring its strides), declare that when loading: {declare}"
        )
    if t.requires_grad and tp.is_grad_enabled():
        if t.grad_fn is None:
            what = "is a leaf tensor that requires grad; writing it is an in-place operation"
            fix = "to update it on purpose (an optimizer step), call under `with tp.no_grad():`"
        else:
            what = "requires grad, and autograd cannot see what a kernel writes"
            fix = (
                "to write it anyway, call under `with tp.no_grad():`, or give the kernel a "
                "gradient through tensorplay.library.custom_op"
            )
        raise RuntimeError(
            f"{kernel}: {where} {what}, which is refused while grad mode is on. If the kernel "
            f"only reads it, declare that when loading: {declare}; {fix}"
        )


class Kernel:
    """A compiled function, called with TensorPlay tensors, scalars and strings.

    Tensor arguments at positions outside ``read_only`` are treated as written: checked
    before the call, their version bumped after it (see this module's docstring).
    """

    def __init__(
        self,
        fn: Any,
        qualname: str,
        doc: str | None = None,
        read_only: frozenset[int] = frozenset(),
    ) -> None:
        self._fn = fn
        self._read_only = read_only
        self._convert = not native_exchange()
        self._engine_tensor = _engine.engine().Tensor
        self.__name__ = qualname.rsplit(".", 1)[-1]
        self.__qualname__ = qualname
        self.__doc__ = doc

    def __call__(self, *args: Any) -> Any:
        storages = []  # of the written tensors
        read_only = self._read_only
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                if i not in read_only:
                    # contiguous and not requiring grad (the usual case) needs no check
                    if a._stride is not None or a.requires_grad:
                        _check_written(a, f"argument {i}", self.__name__, i, self.__qualname__)
                    storages.append(a._storage)
            elif (type(a) is list or type(a) is tuple) and i not in read_only:
                for k, t in enumerate(a):  # a tvm::ffi::Array<Tensor>
                    if isinstance(t, Tensor):
                        _check_written(t, f"argument {i}[{k}]", self.__name__, i, self.__qualname__)
                        storages.append(t._storage)
        try:
            if not self._convert:
                return self._fn(*args)
            return self._converted_call(args)
        finally:
            for st in storages:  # the kernel may have written before it raised
                st._version += 1

    def _converted_call(self, args: tuple) -> Any:
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
    """A loaded cpp_jit library; its exported functions are attributes (``mod.scale_cpu``)
    returning ``Kernel`` objects (``mod["name"]`` reaches one whose name is shadowed)."""

    def __init__(
        self,
        ffi_module: Any,
        name: str,
        path: str | None,
        read_only: dict[str, frozenset[int]] | None = None,
    ) -> None:
        read_only = read_only or {}
        for fname in read_only:
            if not ffi_module.implements_function(fname):
                raise ValueError(
                    f"cpp_jit: read_only names {fname!r}, which module {name!r} does not export"
                )
        self.__dict__.update(
            _ffi=ffi_module, _name=name, path=path, _read_only=read_only, _kernels={}
        )

    @property
    def ffi_module(self) -> Any:
        """The underlying ``tvm_ffi.Module`` (raw functions: no TensorPlay checks, no guard)."""
        return self._ffi

    def implements_function(self, name: str, query_imports: bool = False) -> bool:
        """Whether the library exports a function ``name`` (``mod.name`` then works)."""
        return bool(self._ffi.implements_function(name, query_imports))

    def __getitem__(self, name: str) -> Kernel:
        kernel = self._kernels.get(name)
        if kernel is not None:
            return kernel
        try:
            fn = self._ffi.get_function(name)
        except AttributeError:
            raise AttributeError(
                f"cpp_jit module {self._name!r} has no function {name!r}; a function is "
                "exported when it is listed in functions= (load_inline) or exported with "
                "TVM_FFI_DLL_EXPORT_TYPED_FUNC (source files)"
            ) from None
        qualname = f"{self._name}.{name}"
        doc = getattr(self._ffi, "get_function_doc", lambda name: None)(name)
        read_only = self._read_only.get(name, frozenset())
        kernel = Kernel(_support.guard(fn, qualname), qualname, doc, read_only)
        self._kernels[name] = kernel
        return kernel

    def __getattr__(self, attr: str) -> Kernel:
        # reached only for names the class and instance do not define
        if attr.startswith("__"):
            raise AttributeError(attr)
        kernel = self[attr]
        self.__dict__[attr] = kernel  # later lookups skip __getattr__
        return kernel

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        return f"<cpp_jit module {self._name!r}{where}>"
