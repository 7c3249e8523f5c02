"""``wrap_triton`` / ``wrap_tilelang``: mark a GPU kernel as launchable from an op body.

Eager launches pass straight through (Triton and TileLang read TensorPlay tensors
through their torch-compatible surface: ``data_ptr()``, ``stride()``, ``dtype``...).
A launch with symbolic (captured) arguments cannot be traced into: it raises
``GraphCaptureError`` telling the user to launch inside a ``triton_op`` /
``tile_lang_op``, which the capture records as one opaque node instead.
Neither Triton nor TileLang is imported here; kernels are recognised by their type.
"""

from __future__ import annotations

from typing import Any

from tensorplay._extension import dispatch_state
from tensorplay.capture import GraphCaptureError, contains_proxy

__all__ = ["TritonKernelWrapper", "TileLangKernelWrapper", "wrap_triton", "wrap_tilelang"]


def _from_package(obj: Any, package: str) -> bool:
    return type(obj).__module__.split(".")[0] == package


class TritonKernelWrapper:
    """A Triton kernel (``@triton.jit`` or any grid-indexable launcher): ``w[grid](*args)``.

    A launcher may also offer ``launch_grid(grid, args, kwargs)``, the same launch without
    the intermediate ``launcher[grid]`` object (``tensorplay.kernels.TritonKernel`` does):
    it is used when present, since op bodies launch on every call.
    """

    __slots__ = ("kernel", "launch_grid")

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.launch_grid = getattr(kernel, "launch_grid", None)

    def __getitem__(self, grid: Any) -> _TritonLaunch:
        return _TritonLaunch(self, grid)

    def __repr__(self) -> str:
        return f"<TritonKernelWrapper {getattr(self.kernel, '__name__', self.kernel)!r}>"


class _TritonLaunch:
    __slots__ = ("wrapper", "grid")

    def __init__(self, wrapper: TritonKernelWrapper, grid: Any):
        self.wrapper, self.grid = wrapper, grid

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # proxies exist only while a capture is live, and a live capture turns the
        # dispatcher's gate off: the common launch skips the argument scan
        w = self.wrapper
        if not dispatch_state.plain and contains_proxy((self.grid, *args), kwargs):
            name = getattr(w.kernel, "__name__", repr(w.kernel))
            raise GraphCaptureError(
                f"wrap_triton({name})[grid](...) was called with symbolic (captured) "
                "arguments or grid: a Triton launch cannot be traced into. Launch it inside "
                "an operator defined with @tensorplay.library.triton_op, which the capture "
                "records as one node"
            )
        if w.launch_grid is not None:
            return w.launch_grid(self.grid, args, kwargs)
        return w.kernel[self.grid](*args, **kwargs)


def wrap_triton(kernel: Any) -> TritonKernelWrapper:
    """Mark a Triton kernel as launchable from within a ``triton_op``.

    Accepts a ``triton.runtime.jit.JITFunction`` (the ``@triton.jit`` result) or any
    object with ``__getitem__`` (a grid-indexable launcher); idempotent on wrappers.
    ``TypeError`` for anything else.
    """
    if isinstance(kernel, TritonKernelWrapper):
        return kernel
    if _from_package(kernel, "triton") or hasattr(type(kernel), "__getitem__"):
        return TritonKernelWrapper(kernel)
    raise TypeError(
        f"wrap_triton: expected a @triton.jit kernel (triton.runtime.jit.JITFunction) or a "
        f"grid-indexable launcher, got {type(kernel).__name__}"
    )


class TileLangKernelWrapper:
    """A TileLang kernel (``JITKernel``, the lazy ``@tilelang.jit`` factory, or a
    duck-typed kernel): call it like the kernel; ``.compile(*args)`` binds a factory."""

    __slots__ = ("kernel",)

    def __init__(self, kernel: Any):
        self.kernel = kernel

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if contains_proxy(args, kwargs):
            name = getattr(self.kernel, "__name__", type(self.kernel).__name__)
            raise GraphCaptureError(
                f"wrap_tilelang({name})(...) was called with symbolic (captured) arguments: "
                "a TileLang launch cannot be traced into. Call it inside an operator defined "
                "with @tensorplay.library.tile_lang_op, which the capture records as one node"
            )
        return self.kernel(*args, **kwargs)

    def compile(self, *args: Any, **kwargs: Any) -> TileLangKernelWrapper:
        """Bind a lazy ``@tilelang.jit`` factory to concrete arguments: a new wrapper."""
        if contains_proxy(args, kwargs):
            raise GraphCaptureError(
                "wrap_tilelang(...).compile(...) got symbolic (captured) arguments; compile "
                "with concrete values inside a tile_lang_op"
            )
        compile_fn = getattr(self.kernel, "compile", None)
        bound = (
            compile_fn(*args, **kwargs) if callable(compile_fn) else self.kernel(*args, **kwargs)
        )
        return TileLangKernelWrapper(bound)

    def __repr__(self) -> str:
        return f"<TileLangKernelWrapper {type(self.kernel).__name__}>"


def _is_tilelang_kernel(kernel: Any) -> bool:
    if getattr(kernel, "_tilelang_kernel", False) is True:
        return True
    if any(hasattr(kernel, attr) for attr in ("adapter", "get_tir")):
        return True
    return _from_package(kernel, "tilelang") and callable(kernel)


def wrap_tilelang(kernel: Any) -> TileLangKernelWrapper:
    """Mark a TileLang kernel as launchable from within a ``tile_lang_op``.

    Accepts a TileLang ``JITKernel``, the lazy ``@tilelang.jit`` factory, or a duck-typed
    kernel (``_tilelang_kernel = True``, or an ``adapter`` / ``get_tir`` attribute);
    idempotent on wrappers. ``TypeError`` for a plain callable or a non-callable.
    """
    if isinstance(kernel, TileLangKernelWrapper):
        return kernel
    if _is_tilelang_kernel(kernel):
        return TileLangKernelWrapper(kernel)
    raise TypeError(
        f"wrap_tilelang: expected a TileLang kernel (tilelang.jit result, JITKernel, or an "
        f"object with _tilelang_kernel = True / adapter / get_tir), got "
        f"{type(kernel).__name__}; plain callables need no wrapper"
    )
