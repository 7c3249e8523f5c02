"""Matrix products on CUDA through cuBLAS, called directly.

CuPy's ``matmul`` refuses to run while a stream is captured into a CUDA graph ("calling
cuBLAS API during stream capture is currently unsupported"), so a captured training step
could not contain a single linear layer. This module calls cuBLAS itself, as torch does:
one handle per (thread, device) with a workspace of its own (so cuBLAS never allocates
during a capture), the stream set to the current one when it changed, ``cublasGemmEx`` /
``cublasGemmStridedBatchedEx`` with float32 accumulation (no TF32, torch's default).

The library is the one CuPy already loaded (found in the process's mappings), so no
second copy of cuBLAS is loaded. Handles are created through ctypes (once per thread and
device); each product is one call into ``tensorplay._C.cublas_gemm`` where the native module
is loaded, else ``_gemm_ctypes``, its twin (the same calls through ctypes, which converts
each of the ~20 arguments through a ctypes object). ``matmul`` returns None for what it
does not handle (other dtypes, layouts it cannot express without a copy, 1-D operands):
the caller falls back to CuPy.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

import numpy as np

from tensorplay import _device
from tensorplay._native import NATIVE

__all__ = ["matmul", "prepare", "unavailable_reason"]

_WORKSPACE = 32 << 20  # bytes; torch's default for Hopper
_OP_N, _OP_T = 0, 1
_COMPUTE_32F, _COMPUTE_64F = 68, 70
_ALGO_DEFAULT = -1
# numpy dtype -> (cudaDataType of A, B and C, compute type)
_TYPES = {
    np.dtype(np.float32): (0, _COMPUTE_32F),
    np.dtype(np.float64): (1, _COMPUTE_64F),
    np.dtype(np.float16): (2, _COMPUTE_32F),
}

_lib = None
_why: str | None = None
_cp = None  # CuPy, once loaded
_current_stream = None  # cupy.cuda.get_current_stream
_gemm = None  # tensorplay._C.cublas_gemm when it bound the library, else _gemm_ctypes
_register = None  # tensorplay._C.cublas_register with _C's gemm: it accepts only these handles
_handles: dict = {}  # (thread id, device) -> [handle, workspace, stream ptr last set]
# compute type -> (alpha 1, beta 0) of the ctypes route, in the compute type's C type
_SCALARS = {
    _COMPUTE_32F: (ctypes.byref(ctypes.c_float(1.0)), ctypes.byref(ctypes.c_float(0.0))),
    _COMPUTE_64F: (ctypes.byref(ctypes.c_double(1.0)), ctypes.byref(ctypes.c_double(0.0))),
}
_get_ident = threading.get_ident


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


def _declare(lib):
    """``lib`` (a ``ctypes.CDLL`` of libcublas) with the signatures of the calls made here;
    AttributeError when one is missing."""
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
    if hasattr(lib, "cublasGetStatusName"):  # cuBLAS 11.4.2 and later
        lib.cublasGetStatusName.argtypes = [i]
        lib.cublasGetStatusName.restype = ctypes.c_char_p
    return lib


def _load():
    global _lib, _why, _cp, _current_stream, _gemm, _register
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
        lib = _declare(ctypes.CDLL(path))
    except (OSError, AttributeError) as e:
        _why = f"cuBLAS could not be called directly: {e}"
        return None
    if NATIVE is not None and NATIVE.cublas_bind(path):
        _gemm, _register = NATIVE.cublas_gemm, NATIVE.cublas_register
    else:
        _gemm = _gemm_ctypes
    _cp, _current_stream = cp, cp.cuda.get_current_stream
    _lib = lib
    return lib


def unavailable_reason() -> str | None:
    """None when direct cuBLAS calls work (after a first CUDA matmul), else why not."""
    return _why


def _check(status: int, what: str) -> None:
    if status != 0:
        get_name = getattr(_lib, "cublasGetStatusName", None)
        name = get_name(status) if get_name is not None else None
        name = name.decode() if name else "no name"
        raise RuntimeError(f"cuBLAS {what} failed with status {status} ({name})")


def _gemm_ctypes(
    handle, stream, set_stream, transa, transb, m, n, k, a, lda, stride_a, b, ldb, stride_b,
    c, ldc, stride_c, batch, dtype, compute,
):  # fmt: skip
    """The twin of ``tensorplay._C.cublas_gemm`` (which also checks its arguments): C =
    op(A) @ op(B) in cuBLAS's column-major terms, alpha 1 and beta 0, after setting the
    handle's stream when ``set_stream``; ``cublasGemmEx`` when ``batch`` is 0, else
    ``cublasGemmStridedBatchedEx`` over ``batch`` products."""
    lib = _lib
    if set_stream:
        _check(lib.cublasSetStream_v2(handle, stream), "cublasSetStream")
    one, zero = _SCALARS[compute]
    if batch == 0:
        status = lib.cublasGemmEx(
            handle, transa, transb, m, n, k, one, a, dtype, lda, b, dtype, ldb, zero, c, dtype,
            ldc, compute, _ALGO_DEFAULT,
        )  # fmt: skip
        _check(status, "cublasGemmEx")
    else:
        status = lib.cublasGemmStridedBatchedEx(
            handle, transa, transb, m, n, k, one, a, dtype, lda, stride_a, b, dtype, ldb,
            stride_b, zero, c, dtype, ldc, stride_c, batch, compute, _ALGO_DEFAULT,
        )  # fmt: skip
        _check(status, "cublasGemmStridedBatchedEx")


def _handle(lib, cp, dev: int):
    key = (_get_ident(), dev)
    entry = _handles.get(key)
    if entry is None:
        h = ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        ws = cp.empty(_WORKSPACE, dtype=cp.uint8)
        _check(lib.cublasSetWorkspace_v2(h, ws.data.ptr, _WORKSPACE), "cublasSetWorkspace")
        if _register is not None:
            _register(h.value)
        entry = _handles[key] = [h.value, ws, None]
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
    ashape, bshape = a.shape, b.shape  # CuPy builds a new tuple on each read
    nda, ndb = len(ashape), len(bshape)
    if types is None or nda < 2 or ndb < 2:
        return None
    lib = _lib if _lib is not None else _load()
    if lib is None:
        return None
    cp = _cp
    if ndb == 2 and nda > 2 and a.flags.c_contiguous:
        out = matmul(a.reshape(-1, ashape[-1]), b)
        return None if out is None else out.reshape(*ashape[:-1], bshape[1])
    if nda > 3 and ashape[:-2] == bshape[:-2]:
        # one batch dimension: a view where the batch dims collapse (attention's (B, H, S, D)
        # and its transposes do), else a copy, which is a capturable kernel too
        m, k, n = ashape[-2], ashape[-1], bshape[-1]
        out = matmul(a.reshape(-1, m, k), b.reshape(-1, k, n))
        return None if out is None else out.reshape(*ashape[:-2], m, n)
    batched = nda == 3
    item = a.itemsize
    astrides, bstrides = a.strides, b.strides
    if nda == 2 and ndb == 2:
        batch, sa, sb = 0, 0, 0  # batch 0: cublasGemmEx
    elif nda == 3 and ndb == 3:
        ba, bb = ashape[0], bshape[0]
        if ba != bb and ba != 1 and bb != 1:
            return None
        batch = max(ba, bb)
        sa = 0 if ba == 1 else astrides[0] // item
        sb = 0 if bb == 1 else bstrides[0] // item
    else:
        return None
    m, k = ashape[-2:]
    k2, n = bshape[-2:]
    if k != k2:
        return None  # the shape rule raised torch's error before any kernel
    shape = (batch, m, n) if batched else (m, n)
    if m == 0 or n == 0 or k == 0 or (batched and batch == 0):
        return cp.zeros(shape, dtype=dt)
    la = _layout(ashape[-2:], astrides[-2:], item)
    if la is None:
        # an expanded gradient (stride 0, from sum's backward) or another layout cuBLAS
        # cannot read: one copy kernel, then cuBLAS, costs less than CuPy's matmul, which
        # makes the same copy
        a = cp.ascontiguousarray(a)
        la = _layout(a.shape[-2:], a.strides[-2:], item)
        if batched:  # a copy has batch strides of its own
            sa = 0 if a.shape[0] == 1 else a.strides[0] // item
    lb = _layout(bshape[-2:], bstrides[-2:], item)
    if lb is None:
        b = cp.ascontiguousarray(b)
        lb = _layout(b.shape[-2:], b.strides[-2:], item)
        if batched:
            sb = 0 if b.shape[0] == 1 else b.strides[0] // item
    if la is None or lb is None:
        return None
    out = cp.ndarray(shape, dtype=dt)
    dev = out.data.device_id
    entry = _handles.get((_get_ident(), dev))
    if entry is None:
        entry = _handle(lib, cp, dev)
    stream = _current_stream().ptr
    dtype_id, compute = types
    # row-major C = A @ B is column-major C^T = B^T @ A^T
    _gemm(
        entry[0], stream, entry[2] != stream, lb[0], la[0], n, m, k, b.data.ptr, lb[1], sb,
        a.data.ptr, la[1], sa, out.data.ptr, n, m * n, batch, dtype_id, compute,
    )  # fmt: skip
    entry[2] = stream
    return out
