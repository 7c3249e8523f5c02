"""Sums, means, (log-)softmax and their backward over contiguous CUDA arrays, one kernel each.

A training step reduces small tensors many times: the loss's ``mean``, the bias gradients
(``sum`` over the batch dimension), ``log_softmax`` and its backward's ``sum`` over the
classes. CuPy's reduction machinery spends far more host time per call than the kernel
takes on such sizes, and ``log_softmax`` written with CuPy is six of those calls. These
kernels cover the layouts those calls have, for float32 and float64:

    rows     the trailing axes reduced   (x.sum(-1), log_softmax(x, -1): a block per row)
    columns  the leading axes reduced    (grad.sum(0): a block per 32 columns)
    whole    every axis: one block up to ``_WHOLE_MAX`` elements (loss.mean()), then
             partial sums and their sum (two launches) up to ``_TWO_PASS_MAX``

and return None for anything else (strided views, other dtypes, middle axes, large whole
reductions, empty arrays), which keeps CuPy's kernel. Accumulation is in the array's dtype
as CuPy's is; the summation order differs from CuPy's and numpy's (as theirs differ from
each other), so sums agree to rounding, not bit for bit. A NaN anywhere in a slice makes
its maximum NaN, as in torch.

Compiled once per dtype and device (NVRTC, cached on disk by CuPy); launched through
``_cuda_launch`` (one C call with ``tensorplay._C``).
"""

from __future__ import annotations

import math

from tensorplay import _device
from tensorplay._cuda_launch import launch

__all__ = ["sum", "softmax", "softmax_backward"]

_C_TYPES = {"f": "float", "d": "double"}
_WHOLE_MAX = 1 << 16  # one block reads this many elements in about a microsecond
_TWO_PASS_MAX = 1 << 22  # beyond, CuPy's CUB reduction (device time dominates there)
_PARTIALS = 1024
_COLS_MAX_ROWS = 1 << 14
_MAX_GRID = 1 << 16

_SRC = r"""
template <typename T> __device__ __forceinline__ T tp_max(T a, T b) {
  return (b > a || b != b) ? b : a;  // a NaN wins and stays
}

// The block's total of v (every thread gets it); sh holds 32 values. Called by all threads.
template <typename T, bool MAX>
__device__ __forceinline__ T tp_block(T v, T *sh) {
  for (int o = 16; o > 0; o >>= 1) {
    T w = __shfl_down_sync(0xffffffffu, v, o);
    v = MAX ? tp_max(v, w) : v + w;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sh[lane] : (MAX ? sh[0] : (T)0);
    for (int o = 16; o > 0; o >>= 1) {
      T w = __shfl_down_sync(0xffffffffu, v, o);
      v = MAX ? tp_max(v, w) : v + w;
    }
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

// y[r] = sum of row r of x (rows of `cols` contiguous elements), divided by `count`
// unless it is 0 (a mean)
template <typename T>
__global__ void tp_rows_sum(const T *__restrict__ x, T *__restrict__ y, long long rows,
                            long long cols, long long count) {
  __shared__ T sh[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    T s = 0;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    s = tp_block<T, false>(s, sh);
    if (threadIdx.x == 0) y[r] = count ? s / (T)count : s;
  }
}

// y[c] = sum (or mean) over the rows of column c; a block covers 32 columns, its 8 warps
// take every 8th row, then add up through shared memory
template <typename T>
__global__ void tp_cols_sum(const T *__restrict__ x, T *__restrict__ y, long long rows,
                            long long cols, long long count) {
  __shared__ T sh[8][33];
  int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  for (long long c0 = blockIdx.x * 32LL; c0 < cols; c0 += 32LL * gridDim.x) {
    long long c = c0 + tx;
    T s = 0;
    if (c < cols)
      for (long long r = ty; r < rows; r += 8) s += x[r * cols + c];
    __syncthreads();
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < cols) {
      T t = 0;
      for (int k = 0; k < 8; ++k) t += sh[k][tx];
      y[c] = count ? t / (T)count : t;
    }
  }
}

// partial[b] = the sum of the elements block b visits (every gridDim.x-th chunk of the
// block's width): the first of a whole reduction's two launches, tp_rows_sum the second
template <typename T>
__global__ void tp_partial_sum(const T *__restrict__ x, T *__restrict__ partial, long long n) {
  __shared__ T sh[32];
  T s = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    s += x[i];
  s = tp_block<T, false>(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// row r of y = log_softmax (LOG) or softmax of row r of x: torch's formula,
// shifted = x - max; shifted - log(sum(exp(shifted))) or exp(shifted) / sum(exp(shifted))
template <typename T, bool LOG>
__global__ void tp_softmax_rows(const T *__restrict__ x, T *__restrict__ y, long long rows,
                                long long cols) {
  __shared__ T sh[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    T m = xr[0];
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) m = tp_max(m, xr[c]);
    m = tp_block<T, true>(m, sh);
    T s = 0;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += exp(xr[c] - m);
    s = tp_block<T, false>(s, sh);
    if (LOG) {
      T l = log(s);
      for (long long c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - m) - l;
    } else {
      for (long long c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = exp(xr[c] - m) / s;
    }
  }
}

// the backward of row r: y = g - exp(out) * sum(g) for log_softmax (LOG),
// y = out * (g - sum(g * out)) for softmax
template <typename T, bool LOG>
__global__ void tp_softmax_backward_rows(const T *__restrict__ g, const T *__restrict__ out,
                                         T *__restrict__ y, long long rows, long long cols) {
  __shared__ T sh[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *gr = g + r * cols, *orow = out + r * cols;
    T *yr = y + r * cols;
    T s = 0;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += LOG ? gr[c] : gr[c] * orow[c];
    s = tp_block<T, false>(s, sh);
    for (long long c = threadIdx.x; c < cols; c += blockDim.x)
      yr[c] = LOG ? gr[c] - exp(orow[c]) * s : orow[c] * (gr[c] - s);
  }
}
"""

_kernels: dict = {}  # (dtype char, device) -> {name: CuPy Function}


def _functions(char: str, device: int) -> dict:
    key = (char, device)
    fns = _kernels.get(key)
    if fns is None:
        cp = _device.cupy_or_raise()
        t = _C_TYPES[char]
        names = {
            "rows": f"tp_rows_sum<{t}>",
            "cols": f"tp_cols_sum<{t}>",
            "partial": f"tp_partial_sum<{t}>",
            "log_softmax": f"tp_softmax_rows<{t}, true>",
            "softmax": f"tp_softmax_rows<{t}, false>",
            "log_softmax_backward": f"tp_softmax_backward_rows<{t}, true>",
            "softmax_backward": f"tp_softmax_backward_rows<{t}, false>",
        }
        module = cp.RawModule(
            code=_SRC, options=("-std=c++14",), name_expressions=list(names.values())
        )
        fns = _kernels[key] = {k: module.get_function(n).kernel for k, n in names.items()}
    return fns


def _threads(cols: int) -> int:
    """Threads of a block working on one row: a warp for short rows, up to 256."""
    return 32 if cols <= 32 else 128 if cols <= 1024 else 256


def _covered(a) -> bool:
    return a.dtype.char in _C_TYPES and a.size > 0 and a.flags.c_contiguous


def sum(a, axes, keepdims: bool, mean: bool = False):  # noqa: A001 - the op's name
    """``a.sum(axis=axes, keepdims=keepdims)`` (divided by the count when ``mean``) for a
    C-contiguous float32/float64 CUDA array; None where the layout is not covered.
    ``axes``: None (all) or a tuple of distinct non-negative axes."""
    if not _covered(a):
        return None
    nd = a.ndim
    axes = tuple(range(nd)) if axes is None else tuple(sorted(axes))
    if not axes or nd == 0:
        return None
    k = len(axes)
    if axes == tuple(range(nd - k, nd)):  # trailing axes: rows
        rows = math.prod(a.shape[: nd - k])
        kind = "rows"
        if rows == 1 and a.size > _WHOLE_MAX:
            if a.size > _TWO_PASS_MAX:
                return None
            kind = "whole"  # one block would read it all: partial sums first
    elif axes == tuple(range(k)):  # leading axes: columns
        rows = math.prod(a.shape[:k])
        kind = "cols"
        if rows > _COLS_MAX_ROWS:
            return None  # each thread would add up too many rows one after another
    else:
        return None
    cols = a.size // rows
    if keepdims:
        shape = tuple(1 if i in axes else n for i, n in enumerate(a.shape))
    else:
        shape = tuple(n for i, n in enumerate(a.shape) if i not in axes)
    cp = _device.cupy_or_raise()
    out = cp.empty(shape, a.dtype)
    fns = _functions(a.dtype.char, out.device.id)
    count = (a.size // rows if kind != "cols" else rows) if mean else 0
    if kind == "whole":
        grid = min(-(-a.size // (256 * 8)), _PARTIALS)
        partial = cp.empty(grid, a.dtype)
        launch(fns["partial"], grid, 256, "ppq", (a.data.ptr, partial.data.ptr, a.size))
        launch(
            fns["rows"],
            1,
            _threads(grid),
            "ppqqq",
            (partial.data.ptr, out.data.ptr, 1, grid, count),
        )
        return out
    if kind == "rows":
        grid, threads = min(rows, _MAX_GRID), _threads(cols)
    else:
        grid, threads = min(-(-cols // 32), _MAX_GRID), 256
    launch(fns[kind], grid, threads, "ppqqq", (a.data.ptr, out.data.ptr, rows, cols, count))
    return out


def softmax(a, dim: int, log: bool):
    """``log_softmax`` (``log``) or ``softmax`` of ``a`` over its last axis ``dim``, for a
    C-contiguous float32/float64 CUDA array with at least one dimension; else None."""
    if not _covered(a) or a.ndim == 0 or dim != a.ndim - 1:
        return None
    cols = a.shape[-1]
    rows = a.size // cols
    cp = _device.cupy_or_raise()
    out = cp.empty(a.shape, a.dtype)
    fn = _functions(a.dtype.char, out.device.id)["log_softmax" if log else "softmax"]
    args = (a.data.ptr, out.data.ptr, rows, cols)
    launch(fn, min(rows, _MAX_GRID), _threads(cols), "ppqq", args)
    return out


def softmax_backward(g, out, dim: int, log: bool):
    """The backward of ``log_softmax`` (``log``) or ``softmax`` over the last axis ``dim``
    from the gradient ``g`` and the forward's result ``out`` (C-contiguous float32/float64
    CUDA arrays of one shape and dtype); else None."""
    if not (_covered(g) and _covered(out)) or g.ndim == 0 or dim != g.ndim - 1:
        return None
    if g.dtype != out.dtype or g.shape != out.shape:
        return None
    cols = g.shape[-1]
    rows = g.size // cols
    cp = _device.cupy_or_raise()
    y = cp.empty(g.shape, g.dtype)
    fn = _functions(g.dtype.char, y.device.id)[
        "log_softmax_backward" if log else "softmax_backward"
    ]
    args = (g.data.ptr, out.data.ptr, y.data.ptr, rows, cols)
    launch(fn, min(rows, _MAX_GRID), _threads(cols), "pppqq", args)
    return y
