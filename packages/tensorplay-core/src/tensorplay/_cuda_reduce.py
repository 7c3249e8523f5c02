"""Sums, means, variances, (log-)softmax and their backward over contiguous CUDA arrays, one
kernel each.

A training step reduces small tensors many times: the loss's ``mean``, the bias gradients
(``sum`` over the batch dimension), ``log_softmax`` and its backward's ``sum`` over the
classes. CuPy's reduction machinery spends far more host time per call than the kernel
takes on such sizes, and ``log_softmax`` written with CuPy is six of those calls. These
kernels cover the layouts those calls have, for float32 and float64:

    rows     the trailing axes reduced   (x.sum(-1), x.var(-1), log_softmax(x, -1): a block
             per row; (log_)softmax rows of up to 64 elements a warp each; a variance
             accumulates in double, as the CPU kernel does)
    columns  the leading axes reduced    (grad.sum(0): a block per group of up to 32
             columns and run of rows; when the rows are many, each block sums a run
             of them into a partial row, and a second launch sums those per column)
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
from tensorplay._meta import reduced_shape

__all__ = ["sum", "var", "softmax", "softmax_backward"]

_C_TYPES = {"f": "float", "d": "double"}
_WHOLE_MAX = 1 << 16  # one block reads this many elements in about a microsecond
_TWO_PASS_MAX = 1 << 22  # beyond, CuPy's CUB reduction (device time dominates there)
_PARTIALS = 1024
# columns: one launch while a thread adds up at most _COLS_STEPS rows (a second launch costs
# more than it saves there); past it, runs of at least _COLS_MIN_RUN steps over about
# _COLS_BLOCKS blocks, enough to keep every SM of a large GPU reading
_COLS_STEPS = 64
_COLS_MIN_RUN = 16
_COLS_BLOCKS = 1024
_MAX_GRID = 1 << 16
_WARP_ROW_MAX = 64  # (log_)softmax rows up to this long get a warp each, not a block
_WARPS = 8  # warps (rows at a time) per block of those kernels

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

// y[r] = the variance of row r of x: its mean, then the sum of squared deviations from it,
// both accumulated in double (as _rows/reductions._var does everywhere), divided by `denom`
// (max(cols - correction, 0) as a double: too large a correction gives inf, or nan for
// constant rows, as in torch)
template <typename T>
__global__ void tp_rows_var(const T *__restrict__ x, T *__restrict__ y, long long rows,
                            long long cols, double denom) {
  __shared__ double sh[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    double s = 0;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += (double)xr[c];
    const double mean = tp_block<double, false>(s, sh) / (double)cols;
    double q = 0;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
      const double d = (double)xr[c] - mean;
      q += d * d;
    }
    q = tp_block<double, false>(q, sh);
    if (threadIdx.x == 0) y[r] = (T)(q / denom);
  }
}

// Column sums of x (rows, cols) over runs of `run` rows: y[j * cols + c] = the sum of
// x[r, c] over rows j * run <= r < (j + 1) * run, divided by `count` unless it is 0 (a
// mean). One run (run >= rows) is the whole answer; several leave a (runs, cols) array of
// partial sums for a second launch over it. A tile is one run of `cpw` columns (32, or
// the power of two >= cols for fewer): a warp reads 32 / cpw consecutive rows at once
// (every load a contiguous span of the array), 8 warps (256 threads) take turns down the
// run, then the lanes of one column add up by shuffles and the 8 warps through shared
// memory.
template <typename T>
__global__ void tp_cols_sum(const T *__restrict__ x, T *__restrict__ y, long long rows,
                            long long cols, long long run, int cpw, long long count) {
  __shared__ T sh[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rpw = 32 / cpw;  // rows a warp reads at once
  const long long groups = (cols + cpw - 1) / cpw, runs = (rows + run - 1) / run;
  for (long long t = blockIdx.x; t < groups * runs; t += gridDim.x) {
    const long long j = t / groups, c = (t % groups) * cpw + (lane & (cpw - 1));
    const long long r1 = (j + 1) * run < rows ? (j + 1) * run : rows;
    T s = 0;
    if (c < cols) {
#pragma unroll 4
      for (long long r = j * run + warp * rpw + lane / cpw; r < r1; r += 8 * rpw)
        s += x[r * cols + c];
    }
    for (int o = 16; o >= cpw; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    __syncthreads();  // sh may still be read for the previous tile
    if (lane < cpw) sh[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && lane < cpw && c < cols) {
      T total = 0;
      for (int k = 0; k < 8; ++k) total += sh[k][lane];
      y[j * cols + c] = count ? total / (T)count : total;
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

// v reduced over the warp, every lane gets it (the whole warp calls it)
template <typename T, bool MAX>
__device__ __forceinline__ T tp_warp_all(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? tp_max(v, w) : v + w;
  }
  return v;
}

// tp_softmax_rows for short rows: a warp per row, 8 rows per block (a block per row of a
// classifier's logits would leave most of its threads idle, and launch a block per row)
template <typename T, bool LOG>
__global__ void tp_softmax_warp_rows(const T *__restrict__ x, T *__restrict__ y,
                                     long long rows, long long cols) {
  const int lane = threadIdx.x & 31;
  const long long step = (long long)gridDim.x * (blockDim.x >> 5);
  for (long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
       r += step) {  // r is the same for the whole warp: the shuffles see every lane
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    T m = xr[0];
    for (long long c = lane; c < cols; c += 32) m = tp_max(m, xr[c]);
    m = tp_warp_all<T, true>(m);
    T s = 0;
    for (long long c = lane; c < cols; c += 32) s += exp(xr[c] - m);
    s = tp_warp_all<T, false>(s);
    if (LOG) {
      T l = log(s);
      for (long long c = lane; c < cols; c += 32) yr[c] = (xr[c] - m) - l;
    } else {
      for (long long c = lane; c < cols; c += 32) yr[c] = exp(xr[c] - m) / s;
    }
  }
}

// tp_softmax_backward_rows for short rows, a warp per row
template <typename T, bool LOG>
__global__ void tp_softmax_backward_warp_rows(const T *__restrict__ g, const T *__restrict__ out,
                                              T *__restrict__ y, long long rows, long long cols) {
  const int lane = threadIdx.x & 31;
  const long long step = (long long)gridDim.x * (blockDim.x >> 5);
  for (long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
       r += step) {
    const T *gr = g + r * cols, *orow = out + r * cols;
    T *yr = y + r * cols;
    T s = 0;
    for (long long c = lane; c < cols; c += 32) s += LOG ? gr[c] : gr[c] * orow[c];
    s = tp_warp_all<T, false>(s);
    for (long long c = lane; c < cols; c += 32)
      yr[c] = LOG ? gr[c] - exp(orow[c]) * s : orow[c] * (gr[c] - s);
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
            "var": f"tp_rows_var<{t}>",
            "cols": f"tp_cols_sum<{t}>",
            "partial": f"tp_partial_sum<{t}>",
            "log_softmax": f"tp_softmax_rows<{t}, true>",
            "softmax": f"tp_softmax_rows<{t}, false>",
            "log_softmax_backward": f"tp_softmax_backward_rows<{t}, true>",
            "softmax_backward": f"tp_softmax_backward_rows<{t}, false>",
            "log_softmax_warp": f"tp_softmax_warp_rows<{t}, true>",
            "softmax_warp": f"tp_softmax_warp_rows<{t}, false>",
            "log_softmax_backward_warp": f"tp_softmax_backward_warp_rows<{t}, true>",
            "softmax_backward_warp": f"tp_softmax_backward_warp_rows<{t}, false>",
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


def _axes(a, axes) -> tuple | None:
    """``axes`` (None: all) sorted, for a covered array with at least one axis reduced;
    None where no kernel here takes the call."""
    if not _covered(a) or a.ndim == 0:
        return None
    axes = tuple(range(a.ndim)) if axes is None else tuple(sorted(axes))
    return axes or None


def sum(a, axes, keepdims: bool, mean: bool = False):  # noqa: A001 - the op's name
    """``a.sum(axis=axes, keepdims=keepdims)`` (divided by the count when ``mean``) for a
    C-contiguous float32/float64 CUDA array; None where the layout is not covered.
    ``axes``: None (all) or a tuple of distinct non-negative axes."""
    axes = _axes(a, axes)
    if axes is None:
        return None
    nd, k = a.ndim, len(axes)
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
    else:
        return None
    cols = a.size // rows
    cp = _device.cupy_or_raise()
    out = cp.ndarray(reduced_shape(a.shape, axes, keepdims), a.dtype)
    fns = _functions(a.dtype.char, out.data.device_id)
    count = (a.size // rows if kind != "cols" else rows) if mean else 0
    if kind == "whole":
        grid = min(-(-a.size // (256 * 8)), _PARTIALS)
        partial = cp.ndarray((grid,), a.dtype)
        launch(fns["partial"], grid, 256, "ppq", (a.data.ptr, partial.data.ptr, a.size))
        launch(
            fns["rows"],
            1,
            _threads(grid),
            "ppqqq",
            (partial.data.ptr, out.data.ptr, 1, grid, count),
        )
        return out
    if kind == "cols":
        _cols_sum(fns["cols"], a, out, rows, cols, count)
        return out
    grid, threads = min(rows, _MAX_GRID), _threads(cols)
    launch(fns[kind], grid, threads, "ppqqq", (a.data.ptr, out.data.ptr, rows, cols, count))
    return out


def var(a, axes, keepdims: bool, correction) -> object:
    """The variance of ``a`` over its trailing ``axes`` (a tuple of distinct non-negative
    axes, or None for all) with ``correction``, for a C-contiguous float32/float64 CUDA
    array: one block per row, accumulating in double; None for other layouts."""
    axes = _axes(a, axes)
    if axes is None:
        return None
    nd, k = a.ndim, len(axes)
    if axes != tuple(range(nd - k, nd)):
        return None
    rows = math.prod(a.shape[: nd - k])
    cols = a.size // rows
    if rows == 1 and cols > _WHOLE_MAX:
        return None  # one block would read it all: CuPy's reduction spreads it
    cp = _device.cupy_or_raise()
    out = cp.ndarray(reduced_shape(a.shape, axes, keepdims), a.dtype)
    fn = _functions(a.dtype.char, out.data.device_id)["var"]
    denom = float(max(cols - correction, 0))
    launch(
        fn,
        min(rows, _MAX_GRID),
        _threads(cols),
        "ppqqd",
        (a.data.ptr, out.data.ptr, rows, cols, denom),
    )
    return out


def _cols_sum(fn, a, out, rows: int, cols: int, count: int) -> None:
    """``out`` = the column sums of ``a`` read as (rows, cols), divided by ``count`` unless
    it is 0: one launch of ``tp_cols_sum`` when each thread has few rows to add or the
    column groups alone fill the GPU, else partial sums over runs of rows, then the same
    kernel over those partial rows."""
    cpw = 32 if cols >= 32 else 1 << (cols - 1).bit_length()  # columns a warp reads at once
    groups = -(-cols // cpw)
    step = 8 * (32 // cpw)  # rows a block reads at once
    steps = -(-rows // step)
    runs = 1
    if steps > _COLS_STEPS:
        run_steps = max(_COLS_MIN_RUN, -(-steps // max(1, _COLS_BLOCKS // groups)))
        runs = -(-steps // run_steps)
    if runs == 1:
        args = (a.data.ptr, out.data.ptr, rows, cols, rows, cpw, count)
        launch(fn, min(groups, _MAX_GRID), 256, "ppqqqiq", args)
        return
    partial = _device.cupy_or_raise().empty((runs, cols), a.dtype)
    args = (a.data.ptr, partial.data.ptr, rows, cols, run_steps * step, cpw, 0)
    launch(fn, min(groups * runs, _MAX_GRID), 256, "ppqqqiq", args)
    args = (partial.data.ptr, out.data.ptr, runs, cols, runs, cpw, count)
    launch(fn, min(groups, _MAX_GRID), 256, "ppqqqiq", args)


def softmax(a, dim: int, log: bool):
    """``log_softmax`` (``log``) or ``softmax`` of ``a`` over its last axis ``dim``, for a
    C-contiguous float32/float64 CUDA array with at least one dimension; else None."""
    if not _covered(a) or a.ndim == 0 or dim != a.ndim - 1:
        return None
    cols = a.shape[-1]
    rows = a.size // cols
    cp = _device.cupy_or_raise()
    out = cp.ndarray(a.shape, a.dtype)
    name = "log_softmax" if log else "softmax"
    fns = _functions(a.dtype.char, out.data.device_id)
    args = (a.data.ptr, out.data.ptr, rows, cols)
    launch(*_rows_launch(fns, name, rows, cols), "ppqq", args)
    return out


def _rows_launch(fns: dict, name: str, rows: int, cols: int) -> tuple:
    """(function, grid, threads) of a row-wise kernel: a warp per row for short rows, else a
    block per row."""
    if cols <= _WARP_ROW_MAX:
        return fns[name + "_warp"], min(-(-rows // _WARPS), _MAX_GRID), 32 * _WARPS
    return fns[name], min(rows, _MAX_GRID), _threads(cols)


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
    y = cp.ndarray(g.shape, g.dtype)
    name = "log_softmax_backward" if log else "softmax_backward"
    args = (g.data.ptr, out.data.ptr, y.data.ptr, rows, cols)
    launch(
        *_rows_launch(_functions(g.dtype.char, y.data.device_id), name, rows, cols), "pppqq", args
    )
    return y
