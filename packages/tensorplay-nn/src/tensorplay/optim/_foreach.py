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
    """One Adam(W) update of every parameter (all at the same step count)."""
    hyper = (
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled,
        maximize,
        step_size,
        bias_correction2_sqrt,
    )
    if params[0].device.type == "cpu":
        _adam_cpu(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, *hyper)
    else:
        _adam_cuda(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, *hyper)
    _bump(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs or ())


def _adam_cpu(
    params,
    grads,
    ms,
    vs,
    vmaxs,
    lr,
    beta1,
    beta2,
    eps,
    wd,
    decoupled,
    maximize,
    step_size,
    bc2_sqrt,
):
    # the reference loop's ops, in its order: decay, then
    # m += (1 - beta1) * (g - m); v = v * beta2 + (1 - beta2) * g * g;
    # p += -step_size * (m / (sqrt(v) / bc2_sqrt + eps))
    get = _scratch(params)
    coupled = 0 if decoupled else wd
    for i, p in enumerate(params):
        pa = p._data.reshape(-1)
        t, gg = get(pa.dtype, pa.size)
        g = _prepared_grad(grads[i]._data.reshape(-1), pa, coupled, maximize, t, gg)
        m = ms[i]._data.reshape(-1)
        v = vs[i]._data.reshape(-1)
        if wd != 0 and decoupled:
            pa *= 1 - lr * wd
        np.subtract(g, m, out=t)
        t *= 1 - beta1
        m += t
        v *= beta2
        np.multiply(g, g, out=t)
        t *= 1 - beta2
        v += t
        if vmaxs is not None:
            vm = vmaxs[i]._data.reshape(-1)
            np.maximum(vm, v, out=vm)
            v = vm
        np.sqrt(v, out=t)
        t /= bc2_sqrt
        t += eps
        np.divide(m, t, out=t)
        t *= -step_size
        pa += t


_CHUNK = 16384  # elements per block: small tensors take one block, large ones many
_THREADS = 256

_ADAM_SRC = r"""
template <typename T>
__device__ void adam_update(const long long* row, long long start, double lr, double beta1,
                            double beta2, double eps, double wd, int decoupled, int maximize,
                            double step_size, double bc2_sqrt) {
  T* p = (T*)row[0];
  const T* g = (const T*)row[1];
  T* m = (T*)row[2];
  T* v = (T*)row[3];
  T* vmax = (T*)row[4];
  long long n = row[5];
  long long end = start + CHUNK < n ? start + CHUNK : n;
  const T decay = (T)(1.0 - lr * wd), c1 = (T)(1.0 - beta1), b2 = (T)beta2,
          c2 = (T)(1.0 - beta2), bc2 = (T)bc2_sqrt, e = (T)eps, ss = (T)(-step_size),
          w = (T)wd;
  for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
    T gi = maximize ? -g[i] : g[i];
    T pi = p[i];
    if (wd != 0.0) {
      if (decoupled) pi = pi * decay; else gi = gi + pi * w;
    }
    T mi = m[i] + (gi - m[i]) * c1;
    T vi = v[i] * b2 + (gi * gi) * c2;
    m[i] = mi;
    v[i] = vi;
    if (vmax) { vi = vi > vmax[i] ? vi : vmax[i]; vmax[i] = vi; }
    T denom = sqrt(vi) / bc2 + e;
    p[i] = pi + (mi / denom) * ss;
  }
}

#define ADAM_KERNEL(NAME, T)                                                                \
extern "C" __global__ void NAME(const long long* table, const long long* blocks,           \
                                double lr, double beta1, double beta2, double eps,         \
                                double wd, int decoupled, int maximize, double step_size,  \
                                double bc2_sqrt) {                                         \
  const long long* b = blocks + 2 * blockIdx.x;                                            \
  adam_update<T>(table + 6 * b[0], b[1], lr, beta1, beta2, eps, wd, decoupled, maximize,   \
                 step_size, bc2_sqrt);                                                     \
}
ADAM_KERNEL(adam_f32, float)
ADAM_KERNEL(adam_f64, double)
"""

_SGD_SRC = r"""
template <typename T>
__device__ void sgd_update(const long long* row, long long start, double lr, double momentum,
                           double dampening, double wd, int nesterov, int maximize) {
  T* p = (T*)row[0];
  const T* g = (const T*)row[1];
  T* buf = (T*)row[2];
  long long n = row[3];
  long long end = start + CHUNK < n ? start + CHUNK : n;
  const T mom = (T)momentum, damp = (T)(1.0 - dampening), w = (T)wd, step = (T)(-lr);
  for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
    T gi = maximize ? -g[i] : g[i];
    T pi = p[i];
    if (wd != 0.0) gi = gi + pi * w;
    T bi = buf[i] * mom + gi * damp;
    buf[i] = bi;
    T d = nesterov ? gi + bi * mom : bi;
    p[i] = pi + d * step;
  }
}

#define SGD_KERNEL(NAME, T)                                                                 \
extern "C" __global__ void NAME(const long long* table, const long long* blocks, double lr, \
                                double momentum, double dampening, double wd, int nesterov, \
                                int maximize) {                                             \
  const long long* b = blocks + 2 * blockIdx.x;                                             \
  sgd_update<T>(table + 4 * b[0], b[1], lr, momentum, dampening, wd, nesterov, maximize);   \
}
SGD_KERNEL(sgd_f32, float)
SGD_KERNEL(sgd_f64, double)
"""

_modules: dict[str, Any] = {}
# pointer tables by the tensors' addresses: (device array of rows, device array of blocks)
_tables: dict[tuple, tuple] = {}
_MAX_TABLES = 64


def _kernel(src: str, name: str):
    mod = _modules.get(src)
    if mod is None:
        cp = cupy_or_raise()
        code = f"#define CHUNK {_CHUNK}\n" + src
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


def _cuda_launch(src: str, name: str, columns: list, args: tuple) -> None:
    """One launch of ``src``'s kernel ``name`` per dtype over tensors given column by column
    (the parameters first); ``args`` are its scalar arguments after the tables."""
    for dt, idx in _by_dtype(columns[0]).items():
        cols = [None if c is None else [c[i] for i in idx] for c in columns]
        rows, blocks, nblocks = _launch_table(cols)
        fn = _kernel(src, f"{name}_{'f32' if dt == np.float32 else 'f64'}")
        fn((nblocks,), (_THREADS,), (rows, blocks, *args))


def _adam_cuda(
    params,
    grads,
    ms,
    vs,
    vmaxs,
    lr,
    beta1,
    beta2,
    eps,
    wd,
    decoupled,
    maximize,
    step_size,
    bc2_sqrt,
):
    f, i = np.float64, np.int32
    args = (
        f(lr),
        f(beta1),
        f(beta2),
        f(eps),
        f(wd),
        i(decoupled),
        i(maximize),
        f(step_size),
        f(bc2_sqrt),
    )
    _cuda_launch(_ADAM_SRC, "adam", [params, grads, ms, vs, vmaxs], args)


def _by_dtype(params: list[Tensor]) -> dict[Any, list[int]]:
    out: dict[Any, list[int]] = {}
    for i, p in enumerate(params):
        out.setdefault(p._data.dtype, []).append(i)
    return out


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
    if params[0].device.type == "cpu":
        _sgd_cpu(params, grads, bufs, lr, momentum, dampening, weight_decay, nesterov, maximize)
    else:
        f, i = np.float64, np.int32
        args = (f(lr), f(momentum), f(dampening), f(weight_decay), i(nesterov), i(maximize))
        _cuda_launch(_SGD_SRC, "sgd", [params, grads, bufs], args)
    _bump(params, bufs)


def _sgd_cpu(params, grads, bufs, lr, momentum, dampening, wd, nesterov, maximize):
    get = _scratch(params)
    for i, p in enumerate(params):
        pa = p._data.reshape(-1)
        t, gg = get(pa.dtype, pa.size)
        g = _prepared_grad(grads[i]._data.reshape(-1), pa, wd, maximize, t, gg)
        b = bufs[i]._data.reshape(-1)
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


# ---- RMSprop and Adagrad ---------------------------------------------------------------------


def _prepared_grad(g, pa, wd, maximize, t, gg):
    """The gradient as the update reads it: negated (``maximize``), plus ``wd * p``."""
    if maximize:
        np.negative(g, out=gg)
        g = gg
    if wd != 0:
        np.multiply(pa, wd, out=t)
        np.add(g, t, out=gg)
        g = gg
    return g


def _scratch(params):
    """Two scratch buffers per dtype, as long as the largest parameter."""
    size = max(p._data.size for p in params)
    out: dict = {}

    def get(dt, n):
        if dt not in out:
            out[dt] = (np.empty(size, dt), np.empty(size, dt))
        return out[dt][0][:n], out[dt][1][:n]

    return get


def rmsprop(
    params, grads, square_avgs, grad_avgs, bufs, *, lr, alpha, eps, weight_decay, momentum, maximize
):
    """``v = alpha * v + (1 - alpha) * g * g``; centered (``grad_avgs``): ``m += (1 - alpha)
    * (g - m)`` and ``v - m * m`` under the root; ``p -= lr * b`` with ``b = momentum * b +
    g / (sqrt(.) + eps)`` (``bufs``), or ``p -= lr * g / (sqrt(.) + eps)``."""
    if params[0].device.type == "cpu":
        get = _scratch(params)
        for i, p in enumerate(params):
            pa = p._data.reshape(-1)
            t, gg = get(pa.dtype, pa.size)
            g = _prepared_grad(grads[i]._data.reshape(-1), pa, weight_decay, maximize, t, gg)
            v = square_avgs[i]._data.reshape(-1)
            v *= alpha
            np.multiply(g, g, out=t)
            t *= 1 - alpha
            v += t
            if grad_avgs is not None:
                m = grad_avgs[i]._data.reshape(-1)
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
            if bufs is not None:
                b = bufs[i]._data.reshape(-1)
                b *= momentum
                b += t
                np.multiply(b, -lr, out=t)
            else:
                t *= -lr
            pa += t
    else:
        f, i32 = np.float64, np.int32
        args = (f(lr), f(alpha), f(eps), f(weight_decay), f(momentum), i32(maximize))
        _cuda_launch(_RMSPROP_SRC, "rmsprop", [params, grads, square_avgs, grad_avgs, bufs], args)
    _bump(params, square_avgs, grad_avgs or (), bufs or ())


def adagrad(params, grads, sums, *, clr, eps, weight_decay, maximize):
    """``s += g * g; p -= clr * g / (sqrt(s) + eps)`` (``clr``: the decayed rate)."""
    if params[0].device.type == "cpu":
        get = _scratch(params)
        for i, p in enumerate(params):
            pa = p._data.reshape(-1)
            t, gg = get(pa.dtype, pa.size)
            g = _prepared_grad(grads[i]._data.reshape(-1), pa, weight_decay, maximize, t, gg)
            s = sums[i]._data.reshape(-1)
            np.multiply(g, g, out=t)
            s += t
            np.sqrt(s, out=t)
            t += eps
            np.divide(g, t, out=t)
            t *= -clr
            pa += t
    else:
        f = np.float64
        args = (f(clr), f(eps), f(weight_decay), np.int32(maximize))
        _cuda_launch(_ADAGRAD_SRC, "adagrad", [params, grads, sums], args)
    _bump(params, sums)


_RMSPROP_SRC = r"""
template <typename T>
__device__ void rmsprop_update(const long long* row, long long start, double lr, double alpha,
                               double eps, double wd, double momentum, int maximize) {
  T* p = (T*)row[0];
  const T* g = (const T*)row[1];
  T* v = (T*)row[2];
  T* m = (T*)row[3];
  T* buf = (T*)row[4];
  long long n = row[5];
  long long end = start + CHUNK < n ? start + CHUNK : n;
  const T a = (T)alpha, c = (T)(1.0 - alpha), e = (T)eps, w = (T)wd, mom = (T)momentum,
          step = (T)(-lr);
  for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
    T gi = maximize ? -g[i] : g[i];
    T pi = p[i];
    if (wd != 0.0) gi = gi + pi * w;
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

#define RMSPROP_KERNEL(NAME, T)                                                              \
extern "C" __global__ void NAME(const long long* table, const long long* blocks, double lr,  \
                                double alpha, double eps, double wd, double momentum,        \
                                int maximize) {                                              \
  const long long* b = blocks + 2 * blockIdx.x;                                              \
  rmsprop_update<T>(table + 6 * b[0], b[1], lr, alpha, eps, wd, momentum, maximize);         \
}
RMSPROP_KERNEL(rmsprop_f32, float)
RMSPROP_KERNEL(rmsprop_f64, double)
"""

_ADAGRAD_SRC = r"""
template <typename T>
__device__ void adagrad_update(const long long* row, long long start, double clr, double eps,
                               double wd, int maximize) {
  T* p = (T*)row[0];
  const T* g = (const T*)row[1];
  T* s = (T*)row[2];
  long long n = row[3];
  long long end = start + CHUNK < n ? start + CHUNK : n;
  const T e = (T)eps, w = (T)wd, step = (T)(-clr);
  for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
    T gi = maximize ? -g[i] : g[i];
    T pi = p[i];
    if (wd != 0.0) gi = gi + pi * w;
    T si = s[i] + gi * gi;
    s[i] = si;
    p[i] = pi + (gi / (sqrt(si) + e)) * step;
  }
}

#define ADAGRAD_KERNEL(NAME, T)                                                              \
extern "C" __global__ void NAME(const long long* table, const long long* blocks, double clr, \
                                double eps, double wd, int maximize) {                       \
  const long long* b = blocks + 2 * blockIdx.x;                                              \
  adagrad_update<T>(table + 4 * b[0], b[1], clr, eps, wd, maximize);                         \
}
ADAGRAD_KERNEL(adagrad_f32, float)
ADAGRAD_KERNEL(adagrad_f64, double)
"""
