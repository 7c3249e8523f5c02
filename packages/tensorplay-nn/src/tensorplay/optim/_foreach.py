"""Multi-tensor optimizer updates (the ``foreach`` path of ``Adam``/``AdamW``, ``SGD``,
``RMSprop`` and ``Adagrad``).

The single-tensor loops in the optimizers' modules are the reference: one tensorplay op per
arithmetic step and parameter, so each costs a dispatch (CPU) or a kernel launch (CUDA).
This module computes the same arithmetic, in the same order and precision, on the arrays
under the tensors:

- on the CPU, numpy ufuncs with ``out=`` into one scratch buffer per step (no temporaries,
  no dispatch), parameter by parameter;
- on CUDA, one kernel launch per (dtype, step count) for all parameters: a table of the
  tensors' device pointers (uploaded once and reused while the tensors keep their memory)
  tells each block which tensor and which chunk it updates, as torch's
  ``multi_tensor_apply`` does.

It applies when every tensor is a plain, contiguous, real floating-point tensor on one
device and nothing observes ops (no override or dispatch mode, no profiler), outside CUDA
graph captures; otherwise the optimizer runs its reference loop. Writes go through the
arrays, so each updated tensor's version counter is bumped here as an in-place op would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorplay import Tensor
from tensorplay._extension import cuda_capturing, cupy_or_raise, dispatch_state

__all__ = ["usable", "adam", "sgd_momentum", "rmsprop", "adagrad"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def usable(foreach: bool | None, *lists: list[Tensor]) -> bool:
    """Whether the multi-tensor path may update these tensors (``foreach=False`` never)."""
    if foreach is False or not dispatch_state.plain:
        return False
    first = lists[0]
    if not first:
        return False
    dev = first[0].device
    # under a CUDA graph capture the reference loop runs: its launches are all capturable,
    # where the pointer table's upload is not
    if dev.type != "cpu" and (dev.type != "cuda" or cuda_capturing()):
        return False
    for ts in lists:
        for t in ts:
            if type(t) is not Tensor or t.device != dev:
                return False
            a = t._data
            if a is None or a.dtype not in _FLOATS or not a.flags.c_contiguous:
                return False
    return True


def _bump(*lists: list[Tensor]) -> None:
    for ts in lists:
        for t in ts:
            t._storage._version += 1


# ---- the CPU: numpy in place, parameter by parameter ------------------------------------------


def _cpu_rows(params, grads, weight_decay, maximize, *columns):
    """Per parameter: ``(p, g, t, gg, *cols)`` as flat arrays. ``g`` is the gradient as the
    update reads it (negated with ``maximize``, plus ``weight_decay * p``), ``t`` and ``gg``
    are scratch (one pair per dtype, as long as the largest parameter; ``g`` may be ``gg``),
    ``cols`` the parameter's row of each of ``columns`` (None for a None column)."""
    size = max(p._data.size for p in params)
    scratch: dict = {}
    for i, p in enumerate(params):
        pa = p._data.reshape(-1)
        n = pa.size
        if pa.dtype not in scratch:
            scratch[pa.dtype] = (np.empty(size, pa.dtype), np.empty(size, pa.dtype))
        t, gg = scratch[pa.dtype][0][:n], scratch[pa.dtype][1][:n]
        g = grads[i]._data.reshape(-1)
        if maximize:
            np.negative(g, out=gg)
            g = gg
        if weight_decay != 0:
            np.multiply(pa, weight_decay, out=t)
            np.add(g, t, out=gg)
            g = gg
        cols = (None if c is None else c[i]._data.reshape(-1) for c in columns)
        yield (pa, g, t, gg, *cols)


def _on_cpu(params) -> bool:
    return params[0].device.type == "cpu"


# ---- CUDA: one launch per dtype over a table of pointers -----------------------------------------

_CHUNK = 16384  # elements per block: small tensors take one block, large ones many
_THREADS = 256

# Shared by every kernel source. A kernel reads row ``b[0]`` of the table (the tensors'
# pointers, then the element count) and updates elements ``[b[1], b[1] + CHUNK)`` of it;
# ``KERNELS`` declares its float and double entry points (``SIG``, ``ARGS``: parenthesised
# scalar parameters and the update's arguments).
_PRELUDE = r"""
#define CHUNK_LOOP(i, start, n)                                                               \
  for (long long i = start + threadIdx.x, end_ = start + CHUNK < n ? start + CHUNK : n;       \
       i < end_; i += blockDim.x)

// the gradient as the update reads it: negated with maximize, plus wd * p
template <typename T>
__device__ __forceinline__ T tp_grad(T g, T p, int maximize, double wd) {
  if (maximize) g = -g;
  return wd != 0.0 ? g + p * (T)wd : g;
}

#define UNPAREN(...) __VA_ARGS__
#define ENTRY(NAME, T, UPDATE, COLS, SIG, ARGS)                                               \
  extern "C" __global__ void NAME(const long long* table, const long long* blocks,            \
                                  UNPAREN SIG) {                                              \
    const long long* b = blocks + 2 * blockIdx.x;                                             \
    UPDATE<T>(table + (COLS + 1) * b[0], b[1], UNPAREN ARGS);                                 \
  }
#define KERNELS(NAME, UPDATE, COLS, SIG, ARGS)                                                \
  ENTRY(NAME##_f32, float, UPDATE, COLS, SIG, ARGS)                                           \
  ENTRY(NAME##_f64, double, UPDATE, COLS, SIG, ARGS)
"""

_modules: dict[str, Any] = {}
# pointer tables by the tensors' addresses: (device array of rows, device array of blocks)
_tables: dict[tuple, tuple] = {}
_MAX_TABLES = 64


def _kernel(src: str, name: str):
    mod = _modules.get(src)
    if mod is None:
        cp = cupy_or_raise()
        code = f"#define CHUNK {_CHUNK}\n" + _PRELUDE + src
        mod = _modules[src] = cp.RawModule(code=code, options=("-std=c++14",))
    return mod.get_function(name)


def _launch_table(columns: list[list[Tensor] | None]):
    """The (rows, blocks, number of blocks) of a launch over tensors given column by column
    (a ``None`` column is a null pointer in every row); the device arrays are cached by the
    tensors' addresses, so a step whose tensors kept their memory uploads nothing."""
    cols = [[0] * len(columns[0]) if c is None else [t._data.data.ptr for t in c] for c in columns]
    numels = [t._data.size for t in columns[0]]
    key = (*map(tuple, cols), tuple(numels))
    hit = _tables.get(key)
    if hit is not None:
        return hit
    cp = cupy_or_raise()
    rows = np.array([list(r) + [n] for r, n in zip(zip(*cols), numels)], dtype=np.int64)
    blocks = np.array(
        [(i, s) for i, n in enumerate(numels) for s in range(0, n, _CHUNK)], dtype=np.int64
    ).reshape(-1, 2)
    hit = (cp.asarray(rows), cp.asarray(blocks), len(blocks))
    if len(_tables) >= _MAX_TABLES:
        _tables.pop(next(iter(_tables)))
    _tables[key] = hit
    return hit


def _cuda_launch(src: str, name: str, columns: list, *args) -> None:
    """One launch of ``src``'s kernel ``name`` per dtype over tensors given column by column
    (the parameters first). ``args`` are its scalar arguments after the tables: floats are
    passed as doubles, bools as ints."""
    scalars = tuple(np.int32(a) if isinstance(a, bool) else np.float64(a) for a in args)
    by_dtype: dict[Any, list[int]] = {}
    for i, p in enumerate(columns[0]):
        by_dtype.setdefault(p._data.dtype, []).append(i)
    for dt, idx in by_dtype.items():
        cols = [None if c is None else [c[i] for i in idx] for c in columns]
        rows, blocks, nblocks = _launch_table(cols)
        fn = _kernel(src, f"{name}_{'f32' if dt == np.float32 else 'f64'}")
        fn((nblocks,), (_THREADS,), (rows, blocks, *scalars))


# ---- Adam / AdamW ------------------------------------------------------------------------------


def adam(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor] | None,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    maximize: bool,
    step_size: float,
    bias_correction2_sqrt: float,
) -> None:
    """One Adam(W) update of every parameter (all at the same step count): the reference
    loop's ops in its order: the decay, ``m += (1 - beta1) * (g - m)``, ``v = v * beta2 +
    (1 - beta2) * g * g``, ``p += -step_size * (m / (sqrt(v) / bias_correction2_sqrt + eps))``."""
    if _on_cpu(params):
        coupled = 0 if decoupled else weight_decay
        rows = _cpu_rows(params, grads, coupled, maximize, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)
        for pa, g, t, _, m, v, vmax in rows:
            if weight_decay != 0 and decoupled:
                pa *= 1 - lr * weight_decay
            np.subtract(g, m, out=t)
            t *= 1 - beta1
            m += t
            v *= beta2
            np.multiply(g, g, out=t)
            t *= 1 - beta2
            v += t
            if vmax is not None:
                np.maximum(vmax, v, out=vmax)
                v = vmax
            np.sqrt(v, out=t)
            t /= bias_correction2_sqrt
            t += eps
            np.divide(m, t, out=t)
            t *= -step_size
            pa += t
    else:
        columns = [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs]
        _cuda_launch(
            _ADAM_SRC,
            "adam",
            columns,
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            bool(decoupled),
            bool(maximize),
            step_size,
            bias_correction2_sqrt,
        )
    _bump(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs or ())


_ADAM_SRC = r"""
template <typename T>
__device__ void adam_update(const long long* row, long long start, double lr, double beta1,
                            double beta2, double eps, double wd, int decoupled, int maximize,
                            double step_size, double bc2_sqrt) {
  T *p = (T*)row[0], *m = (T*)row[2], *v = (T*)row[3], *vmax = (T*)row[4];
  const T* g = (const T*)row[1];
  const T decay = (T)(1.0 - lr * wd), c1 = (T)(1.0 - beta1), b2 = (T)beta2,
          c2 = (T)(1.0 - beta2), bc2 = (T)bc2_sqrt, e = (T)eps, ss = (T)(-step_size);
  CHUNK_LOOP(i, start, row[5]) {
    T pi = p[i];
    T gi = tp_grad(g[i], pi, maximize, decoupled ? 0.0 : wd);
    if (decoupled && wd != 0.0) pi = pi * decay;
    T mi = m[i] + (gi - m[i]) * c1;
    T vi = v[i] * b2 + (gi * gi) * c2;
    m[i] = mi;
    v[i] = vi;
    if (vmax) { vi = vi > vmax[i] ? vi : vmax[i]; vmax[i] = vi; }
    T denom = sqrt(vi) / bc2 + e;
    p[i] = pi + (mi / denom) * ss;
  }
}
KERNELS(adam, adam_update, 5,
        (double lr, double beta1, double beta2, double eps, double wd, int decoupled,
         int maximize, double step_size, double bc2_sqrt),
        (lr, beta1, beta2, eps, wd, decoupled, maximize, step_size, bc2_sqrt))
"""


# ---- SGD with momentum (steps after the first, which creates the buffers) ----------------------


def sgd_momentum(
    params: list[Tensor],
    grads: list[Tensor],
    bufs: list[Tensor],
    *,
    lr: float,
    momentum: float,
    dampening: float,
    weight_decay: float,
    nesterov: bool,
    maximize: bool,
) -> None:
    """``buf = momentum * buf + (1 - dampening) * g; p -= lr * (g + momentum * buf if
    nesterov else buf)`` for every parameter, ``g`` the (decayed, signed) gradient."""
    if _on_cpu(params):
        for pa, g, t, gg, b in _cpu_rows(params, grads, weight_decay, maximize, bufs):
            b *= momentum
            np.multiply(g, 1 - dampening, out=t)
            b += t
            if nesterov:
                np.multiply(b, momentum, out=t)
                np.add(g, t, out=gg)
                d = gg
            else:
                d = b
            np.multiply(d, -lr, out=t)
            pa += t
    else:
        _cuda_launch(
            _SGD_SRC,
            "sgd",
            [params, grads, bufs],
            lr,
            momentum,
            dampening,
            weight_decay,
            bool(nesterov),
            bool(maximize),
        )
    _bump(params, bufs)


_SGD_SRC = r"""
template <typename T>
__device__ void sgd_update(const long long* row, long long start, double lr, double momentum,
                           double dampening, double wd, int nesterov, int maximize) {
  T *p = (T*)row[0], *buf = (T*)row[2];
  const T* g = (const T*)row[1];
  const T mom = (T)momentum, damp = (T)(1.0 - dampening), step = (T)(-lr);
  CHUNK_LOOP(i, start, row[3]) {
    T pi = p[i];
    T gi = tp_grad(g[i], pi, maximize, wd);
    T bi = buf[i] * mom + gi * damp;
    buf[i] = bi;
    T d = nesterov ? gi + bi * mom : bi;
    p[i] = pi + d * step;
  }
}
KERNELS(sgd, sgd_update, 3,
        (double lr, double momentum, double dampening, double wd, int nesterov, int maximize),
        (lr, momentum, dampening, wd, nesterov, maximize))
"""


# ---- RMSprop and Adagrad -------------------------------------------------------------------------


def rmsprop(
    params, grads, square_avgs, grad_avgs, bufs, *, lr, alpha, eps, weight_decay, momentum, maximize
):
    """``v = alpha * v + (1 - alpha) * g * g``; centered (``grad_avgs``): ``m += (1 - alpha)
    * (g - m)`` and ``v - m * m`` under the root; ``p -= lr * b`` with ``b = momentum * b +
    g / (sqrt(.) + eps)`` (``bufs``), or ``p -= lr * g / (sqrt(.) + eps)``."""
    if _on_cpu(params):
        rows = _cpu_rows(params, grads, weight_decay, maximize, square_avgs, grad_avgs, bufs)
        for pa, g, t, _, v, m, b in rows:
            v *= alpha
            np.multiply(g, g, out=t)
            t *= 1 - alpha
            v += t
            if m is not None:
                np.subtract(g, m, out=t)
                t *= 1 - alpha
                m += t
                np.multiply(m, m, out=t)
                np.subtract(v, t, out=t)
                np.sqrt(t, out=t)
            else:
                np.sqrt(v, out=t)
            t += eps
            np.divide(g, t, out=t)
            if b is not None:
                b *= momentum
                b += t
                np.multiply(b, -lr, out=t)
            else:
                t *= -lr
            pa += t
    else:
        columns = [params, grads, square_avgs, grad_avgs, bufs]
        _cuda_launch(
            _RMSPROP_SRC, "rmsprop", columns, lr, alpha, eps, weight_decay, momentum, bool(maximize)
        )
    _bump(params, square_avgs, grad_avgs or (), bufs or ())


_RMSPROP_SRC = r"""
template <typename T>
__device__ void rmsprop_update(const long long* row, long long start, double lr, double alpha,
                               double eps, double wd, double momentum, int maximize) {
  T *p = (T*)row[0], *v = (T*)row[2], *m = (T*)row[3], *buf = (T*)row[4];
  const T* g = (const T*)row[1];
  const T a = (T)alpha, c = (T)(1.0 - alpha), e = (T)eps, mom = (T)momentum, step = (T)(-lr);
  CHUNK_LOOP(i, start, row[5]) {
    T pi = p[i];
    T gi = tp_grad(g[i], pi, maximize, wd);
    T vi = v[i] * a + (gi * gi) * c;
    v[i] = vi;
    T avg;
    if (m) {
      T mi = m[i] + (gi - m[i]) * c;
      m[i] = mi;
      avg = sqrt(vi - mi * mi) + e;
    } else {
      avg = sqrt(vi) + e;
    }
    T d = gi / avg;
    if (buf) { d = buf[i] * mom + d; buf[i] = d; }
    p[i] = pi + d * step;
  }
}
KERNELS(rmsprop, rmsprop_update, 5,
        (double lr, double alpha, double eps, double wd, double momentum, int maximize),
        (lr, alpha, eps, wd, momentum, maximize))
"""


def adagrad(params, grads, sums, *, clr, eps, weight_decay, maximize):
    """``s += g * g; p -= clr * g / (sqrt(s) + eps)`` (``clr``: the decayed rate)."""
    if _on_cpu(params):
        for pa, g, t, _, s in _cpu_rows(params, grads, weight_decay, maximize, sums):
            np.multiply(g, g, out=t)
            s += t
            np.sqrt(s, out=t)
            t += eps
            np.divide(g, t, out=t)
            t *= -clr
            pa += t
    else:
        _cuda_launch(
            _ADAGRAD_SRC, "adagrad", [params, grads, sums], clr, eps, weight_decay, bool(maximize)
        )
    _bump(params, sums)


_ADAGRAD_SRC = r"""
template <typename T>
__device__ void adagrad_update(const long long* row, long long start, double clr, double eps,
                               double wd, int maximize) {
  T *p = (T*)row[0], *s = (T*)row[2];
  const T* g = (const T*)row[1];
  const T e = (T)eps, step = (T)(-clr);
  CHUNK_LOOP(i, start, row[3]) {
    T pi = p[i];
    T gi = tp_grad(g[i], pi, maximize, wd);
    T si = s[i] + gi * gi;
    s[i] = si;
    p[i] = pi + (gi / (sqrt(si) + e)) * step;
  }
}
KERNELS(adagrad, adagrad_update, 3, (double clr, double eps, double wd, int maximize),
        (clr, eps, wd, maximize))
"""
