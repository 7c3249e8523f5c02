"""Matrix products on CUDA through cuBLAS, called directly.

CuPy's ``matmul`` refuses to run while a stream is captured into a CUDA graph ("calling
cuBLAS API during stream capture is currently unsupported"), so a captured training step
could not contain a single linear layer. This module calls cuBLAS itself, as torch does:
one handle per (thread, device) with a workspace of its own (so cuBLAS never allocates
during a capture), the stream set to the current one on each call, ``cublasGemmEx`` /
``cublasGemmStridedBatchedEx`` with float32 accumulation (no TF32, torch's default).

The library is the one CuPy already loaded (found in the process's mappings), so no
second copy of cuBLAS is loaded. ``matmul`` returns None for what it does not handle
(other dtypes, layouts it cannot express without a copy, 1-D operands): the caller falls
back to CuPy.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

import numpy as np

from tensorplay import _device

__all__ = ["matmul", "prepare", "unavailable_reason"]

_WORKSPACE = 32 << 20  # bytes; torch's default for Hopper
_OP_N, _OP_T = 0, 1
_COMPUTE_32F, _COMPUTE_64F = 68, 70
_ALGO_DEFAULT = -1
# numpy dtype -> (cudaDataType, compute type, alpha/beta ctypes type)
_TYPES = {
    np.dtype(np.float32): (0, _COMPUTE_32F, ctypes.c_float),
    np.dtype(np.float64): (1, _COMPUTE_64F, ctypes.c_double),
    np.dtype(np.float16): (2, _COMPUTE_32F, ctypes.c_float),
}

_lib = None
_why: str | None = None
_handles: dict = {}  # (thread id, device) -> [handle, workspace, stream ptr last set]
_ONE: dict = {}
_ZERO: dict = {}


def _library_path() -> str | None:
    """The path of the libcublas CuPy loaded (after it created its first handle)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(" ", 1)[-1].strip()
                if "/libcublas.so" in path:
                    return path
    except OSError:
        return None
    return None


def _load():
    global _lib, _why
    if _lib is not None or _why is not None:
        return _lib
    cp = _device.cupy_or_raise()
    try:
        cp.cuda.device.get_cublas_handle()  # makes CuPy load cuBLAS
        path = _library_path()
        if path is None:
            path = ctypes.util.find_library("cublas")
        if path is None:
            raise OSError("libcublas was not found among the loaded libraries")
        lib = ctypes.CDLL(path)
        vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
        lib.cublasSetStream_v2.argtypes = [vp, vp]
        lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
        lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
        lib.cublasGemmStridedBatchedEx.argtypes = [
            vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i,
        ]  # fmt: skip
        for fn in (
            lib.cublasCreate_v2,
            lib.cublasSetStream_v2,
            lib.cublasSetWorkspace_v2,
            lib.cublasGemmEx,
            lib.cublasGemmStridedBatchedEx,
        ):
            fn.restype = ctypes.c_int
    except (OSError, AttributeError) as e:
        _why = f"cuBLAS could not be called directly: {e}"
        return None
    for dt, (_, _, ct) in _TYPES.items():
        _ONE[dt], _ZERO[dt] = ct(1.0), ct(0.0)
    _lib = lib
    return lib


def unavailable_reason() -> str | None:
    """None when direct cuBLAS calls work (after a first CUDA matmul), else why not."""
    return _why


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLAS {what} failed with status {status}")


def _handle(lib, cp, dev: int):
    key = (threading.get_ident(), dev)
    entry = _handles.get(key)
    if entry is None:
        h = ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        ws = cp.empty(_WORKSPACE, dtype=cp.uint8)
        _check(lib.cublasSetWorkspace_v2(h, ws.data.ptr, _WORKSPACE), "cublasSetWorkspace")
        entry = _handles[key] = [h, ws, None]
    return entry


def prepare(dev: int) -> None:
    """Create this thread's handle for ``dev`` now: creating it allocates, which a CUDA graph
    capture cannot."""
    lib = _load()
    if lib is not None:
        cp = _device.cupy_or_raise()
        with cp.cuda.Device(dev):
            _handle(lib, cp, dev)


def _layout(shape, strides, itemsize):
    """How cuBLAS reads a row-major (r, c) matrix with these byte strides: (op, ld) where
    op N means the column-major matrix in memory is its transpose; None when it needs a
    copy."""
    r, c = shape
    s0, s1 = strides[0] // itemsize, strides[1] // itemsize
    if (s1 == 1 or c == 1) and (r == 1 or s0 >= c):
        return _OP_N, max(s0 if r > 1 else c, 1)
    if (s0 == 1 or r == 1) and (c == 1 or s1 >= r):
        return _OP_T, max(s1 if c > 1 else r, 1)
    return None


def matmul(a, b):
    """``a @ b`` for CuPy arrays of one float dtype, 2-D @ 2-D, N-D (C-contiguous) @ 2-D,
    3-D @ 3-D (batch sizes equal or 1) or N-D @ N-D with equal batch shapes; None for
    anything else."""
    dt = a.dtype
    if dt is not b.dtype and dt != b.dtype:
        return None
    types = _TYPES.get(dt)
    if types is None or a.ndim < 2 or b.ndim < 2:
        return None
    lib = _lib if _lib is not None else _load()
    if lib is None:
        return None
    cp = _device.cupy_or_raise()
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:
        out = matmul(a.reshape(-1, a.shape[-1]), b)
        return None if out is None else out.reshape(*a.shape[:-1], b.shape[1])
    if a.ndim > 3 and a.shape[:-2] == b.shape[:-2]:
        # one batch dimension: a view where the batch dims collapse (attention's (B, H, S, D)
        # and its transposes do), else a copy, which is a capturable kernel too
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        out = matmul(a.reshape(-1, m, k), b.reshape(-1, k, n))
        return None if out is None else out.reshape(*a.shape[:-2], m, n)
    batched = a.ndim == 3
    if a.ndim == 2 and b.ndim == 2:
        batch, sa, sb = 1, 0, 0
    elif a.ndim == 3 and b.ndim == 3:
        ba, bb = a.shape[0], b.shape[0]
        if ba != bb and ba != 1 and bb != 1:
            return None
        batch = max(ba, bb)
        sa = 0 if ba == 1 else a.strides[0] // a.itemsize
        sb = 0 if bb == 1 else b.strides[0] // b.itemsize
    else:
        return None
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        return None  # the shape rule raised torch's error before any kernel
    shape = (batch, m, n) if batched else (m, n)
    if m == 0 or n == 0 or k == 0 or batch == 0:
        return cp.zeros(shape, dtype=dt)
    la = _layout(a.shape[-2:], a.strides[-2:], a.itemsize)
    if la is None:
        # an expanded gradient (stride 0, from sum's backward) or another layout cuBLAS
        # cannot read: one copy kernel, then cuBLAS, costs less than CuPy's matmul, which
        # makes the same copy
        a = cp.ascontiguousarray(a)
        la = _layout(a.shape[-2:], a.strides[-2:], a.itemsize)
    lb = _layout(b.shape[-2:], b.strides[-2:], b.itemsize)
    if lb is None:
        b = cp.ascontiguousarray(b)
        lb = _layout(b.shape[-2:], b.strides[-2:], b.itemsize)
    if la is None or lb is None:
        return None
    if batched:  # a copy has batch strides of its own
        sa = 0 if a.shape[0] == 1 else a.strides[0] // a.itemsize
        sb = 0 if b.shape[0] == 1 else b.strides[0] // b.itemsize
    out = cp.empty(shape, dtype=dt)
    dev = out.data.device_id
    entry = _handle(lib, cp, dev)
    stream = cp.cuda.get_current_stream().ptr
    if entry[2] != stream:
        _check(lib.cublasSetStream_v2(entry[0], stream), "cublasSetStream")
        entry[2] = stream
    dtype_id, compute, _ = types
    one, zero = ctypes.byref(_ONE[dt]), ctypes.byref(_ZERO[dt])
    # row-major C = A @ B is column-major C^T = B^T @ A^T
    if not batched:
        status = lib.cublasGemmEx(
            entry[0], lb[0], la[0], n, m, k, one, b.data.ptr, dtype_id, lb[1],
            a.data.ptr, dtype_id, la[1], zero, out.data.ptr, dtype_id, n, compute,
            _ALGO_DEFAULT,
        )  # fmt: skip
    else:
        status = lib.cublasGemmStridedBatchedEx(
            entry[0], lb[0], la[0], n, m, k, one, b.data.ptr, dtype_id, lb[1], sb,
            a.data.ptr, dtype_id, la[1], sa, zero, out.data.ptr, dtype_id, n, m * n, batch,
            compute, _ALGO_DEFAULT,
        )  # fmt: skip
    _check(status, "gemm")
    return out
