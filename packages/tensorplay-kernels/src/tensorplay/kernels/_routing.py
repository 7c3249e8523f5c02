"""``enable()`` / ``disable()``: route built-in CUDA ops to the Triton kernels.

Core calls an installed kernel as ``kernel(xp, *arrays, **params)`` with CuPy arrays
already promoted to the compute dtype (``tensorplay._dispatch.set_device_kernel``); it
returns the result array or ``NotImplemented`` to hand the call back to CuPy. Autograd,
dtype rules, out= and in-place handling stay core's. A routed kernel therefore only
takes the calls it computes exactly like the op table: floating dtypes, default
parameters, the layouts its kernel reads (at most 4-d for broadcasting binaries, the
last dimension for row ops); everything else is declined.

Routed: elementwise ops (one Triton pass reads each input once: ~90% of copy bandwidth
where CuPy's elementwise kernels reach ~60%), ``softmax`` (one pass instead of CuPy's
four kernels) and last-dimension ``sum``/``mean``/``amax``. ``matmul`` stays with cuBLAS.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import tensorplay as tp
from tensorplay._extension import get_device_kernel, set_device_kernel
from tensorplay.kernels._capability import triton_unavailable_reason
from tensorplay.kernels._common import acc_type, triton_src
from tensorplay.kernels._launch import Pointer
from tensorplay.kernels._ops_rows import row_launch

__all__ = ["ROUTED_OPS", "enable", "disable", "is_enabled"]

_lock = threading.Lock()
_installed: dict[str, Callable[..., Any]] = {}


_DTYPES: dict[Any, tp.dtype] = {
    np.dtype(d.np): d for d in (tp.float16, tp.bfloat16, tp.float32, tp.float64)
}


def _ptr(array: Any, dtype: tp.dtype) -> Pointer:
    return Pointer(array.data.ptr, dtype)


def _float_dtype(*arrays: Any) -> tp.dtype | None:
    """The TensorPlay dtype shared by all ``arrays``, if it is a floating one we handle."""
    dt = _DTYPES.get(arrays[0].dtype)
    if dt is None or any(a.dtype != arrays[0].dtype for a in arrays[1:]):
        return None
    return dt


def _unary_route(act: str) -> Callable[..., Any]:
    def run(xp, a, **params):
        dt = _float_dtype(a)
        if dt is None or params or a.size == 0 or not a.flags.c_contiguous:
            return NotImplemented
        out = xp.empty(a.shape, dtype=a.dtype)
        k = triton_src()
        grid, meta = k.elementwise_launch(a.size)
        k.unary[grid](
            _ptr(a, dt),
            _ptr(out, dt),
            a.size,
            ACT=act,
            ACC=k.ACC_TYPES[dt],
            HALF=k.is_half(dt),
            **meta,
        )
        return out

    return run


def _gelu_route(xp, a, approximate="none"):
    if approximate not in ("none", "tanh"):
        return NotImplemented
    return _unary_route("gelu" if approximate == "none" else "gelu_tanh")(xp, a)


def _elem_strides(a: Any, shape4: tuple[int, ...]) -> list[int]:
    strides = [0] * (4 - a.ndim) + [s // a.itemsize for s in a.strides]
    sizes = [1] * (4 - a.ndim) + list(a.shape)
    return [0 if sz == 1 and full != 1 else st for st, sz, full in zip(strides, sizes, shape4)]


def _binary_route(op: str, defaults: dict[str, Any]) -> Callable[..., Any]:
    def run(xp, a, b, **params):
        if any(params.get(k, v) != v for k, v in defaults.items()):
            return NotImplemented  # alpha= / rounding_mode=: the op table's kernel
        dt = _float_dtype(a, b)
        if dt is None:
            return NotImplemented
        shape = tuple(xp.broadcast_shapes(a.shape, b.shape))
        n = 1
        for s in shape:
            n *= s
        if n == 0 or len(shape) > 4:
            return NotImplemented
        out = xp.empty(shape, dtype=a.dtype)
        k = triton_src()
        if a.shape == b.shape == shape and a.flags.c_contiguous and b.flags.c_contiguous:
            grid, meta = k.elementwise_launch(n)
            k.binary_contig[grid](
                _ptr(a, dt), _ptr(b, dt), _ptr(out, dt), n, OP=op, ACC=k.ACC_TYPES[dt], **meta
            )
            return out
        shape4 = (1,) * (4 - len(shape)) + shape
        sa, sb = _elem_strides(a, shape4), _elem_strides(b, shape4)
        args = (_ptr(a, dt), _ptr(b, dt), _ptr(out, dt))
        k.launch_broadcast(*args, shape4, sa, sb, op, k.ACC_TYPES[dt])
        return out

    return run


def _last_dim(a: Any, dim: Any) -> bool:
    """``dim`` names exactly the last dimension of ``a``."""
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            return False
        dim = dim[0]
    return isinstance(dim, int) and a.ndim >= 1 and dim % a.ndim == a.ndim - 1


def _rows_ok(a: Any) -> bool:
    return a.ndim >= 1 and a.size > 0 and a.shape[-1] > 0 and a.flags.c_contiguous


def _softmax_route(xp, a, dim, dtype=None):
    dt = _float_dtype(a)
    if dt is None or not _last_dim(a, dim) or not _rows_ok(a):
        return NotImplemented
    n = a.shape[-1]
    out = xp.empty(a.shape, dtype=a.dtype)
    triton_src().softmax[(a.size // n,)](
        _ptr(a, dt), _ptr(out, dt), n, ACC=acc_type(dt), **row_launch(n)
    )
    return out


def _reduce_route(kind: str) -> Callable[..., Any]:
    def run(xp, a, dim=None, keepdim=False, dtype=None):
        dt = _float_dtype(a)
        if dt is None or not _last_dim(a, dim) or not _rows_ok(a):
            return NotImplemented
        n = a.shape[-1]
        out = xp.empty(a.shape[:-1], dtype=a.dtype)
        block = min(1 << max(n - 1, 0).bit_length(), 4096)
        triton_src().row_reduce[(a.size // n,)](
            _ptr(a, dt), _ptr(out, dt), n, OP=kind, ACC=acc_type(dt), BLOCK=block
        )
        return out[..., None] if keepdim else out

    return run


ROUTED_OPS: dict[str, Callable[..., Any]] = {
    **{
        name: _unary_route(name)
        for name in ("neg", "abs", "exp", "sqrt", "sigmoid", "tanh", "relu", "silu")
    },
    "gelu": _gelu_route,
    "add": _binary_route("add", {"alpha": 1}),
    "sub": _binary_route("sub", {"alpha": 1}),
    "mul": _binary_route("mul", {}),
    "div": _binary_route("div", {"rounding_mode": None}),
    "maximum": _binary_route("maximum", {}),
    "minimum": _binary_route("minimum", {}),
    "softmax": _softmax_route,
    "sum": _reduce_route("sum"),
    "mean": _reduce_route("mean"),
    "amax": _reduce_route("max"),
}


def enable() -> None:
    """Run the built-in CUDA ops in ``ROUTED_OPS`` through the Triton kernels.

    Raises ``RuntimeError`` (with the reason) when Triton cannot run CUDA kernels here.
    """
    why = triton_unavailable_reason("cuda")
    if why is not None:
        raise RuntimeError(f"tp.kernels.enable(): the Triton CUDA kernels cannot run: {why}")
    triton_src()  # compile-ready before the first routed call
    with _lock:
        for name, fn in ROUTED_OPS.items():
            set_device_kernel(name, "cuda", fn)
            _installed[name] = fn


def disable() -> None:
    """Give the ops ``enable()`` routed back to their op-table (CuPy) kernels.

    Only kernels this module installed are removed; another component's are left alone.
    """
    with _lock:
        for name, fn in list(_installed.items()):
            if get_device_kernel(name, "cuda") is fn:
                set_device_kernel(name, "cuda", None)
            del _installed[name]


def is_enabled() -> bool:
    """True while ``enable()``'s kernels are installed."""
    return any(get_device_kernel(n, "cuda") is fn for n, fn in _installed.items())
