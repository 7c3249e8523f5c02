"""Pointwise rows on CUDA as one vectorised kernel: the op table's ``cuda`` column.

A row whose ``cuda`` column holds a C expression of its elements (``"a + b"``, ``"exp(a)"``)
runs here when its inputs are contiguous CUDA arrays of the result's dtype laid out in
one of the shapes a training step meets:

    mode 0  a and b of one shape          (x + y)
    mode 1  b repeats along a             (x + bias: b's shape is a trailing part of a's)
    mode 2  a repeats along b             (bias - x)
    mode 3  b is a number                 (x * 2.0)
    mode 4  a is a number                 (2.0 - x, through ``__rsub__``)

and unary rows over one contiguous array. Anything else (other broadcasts, strided views,
mixed dtypes, float16/bfloat16, complex) returns None and the row runs its CuPy kernel.

Why: CuPy's elementwise kernels index every operand through a generic strided indexer
(64-bit division per element and operand), which keeps ``x * 2.0`` on 64M float32 well
below copy bandwidth on an H200. These kernels move 16 bytes per load and store
(``Pack``), index with one add, and fall back to one element per step only for the tail
or for pointers that are not 16-byte aligned. They compute the same C expression in the
same dtype as CuPy's kernels (no fast-math), so results are the same bits.

Each row's kernels are compiled once per dtype (NVRTC, cached on disk by CuPy).
"""

from __future__ import annotations

import numpy as np

from tensorplay import _device
from tensorplay._cuda_launch import CODES, launch
from tensorplay._native import NATIVE

__all__ = ["run"]

# compute dtype (numpy char) -> C type; float16/bfloat16 stay on CuPy (their arithmetic
# goes through float32 there, which a plain C expression would not reproduce)
_C_TYPES = {
    "f": "float",
    "d": "double",
    "b": "signed char",
    "B": "unsigned char",
    "h": "short",
    "i": "int",
    "l": "long long",
    "q": "long long",
    "?": "bool",
}

_SRC = r"""
template <typename T, int V> struct alignas(sizeof(T) * V) Pack { T v[V]; };

#define GRID_LOOP(p, n) \
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < (n); \
       p += (long long)blockDim.x * gridDim.x)

// i % m for the repeating operand of modes 1 and 2. Below 2^31 packs, by a multiply and a
// shift with the magic number of m (``_magic``): a division per load would cost more than
// the load.
__device__ __forceinline__ long long tp_wrap(long long i, long long m, unsigned magic,
                                             unsigned shift, bool narrow) {
  if (!narrow) return i % m;
  const unsigned u = (unsigned)i, q = (__umulhi(u, magic) + u) >> shift;
  return (long long)(u - q * (unsigned)m);
}

template <typename T>
__device__ __forceinline__ T tp_f2(T a, T b) { return (T)(EXPR2); }

template <typename T>
__device__ __forceinline__ T tp_f1(T a) { return (T)(EXPR1); }

// z[i] = f(x[i], y[i]) with x or y repeating every m elements (mode 1, 2) or a number s
// (mode 3, 4); V elements per step where every pointer is 16-byte aligned (and m % V == 0)
template <typename T, int V, int MODE>
__global__ void tp_binary(const T* x, const T* y, T s, T* z, long long n, long long m,
                          unsigned magic, unsigned shift) {
  const long long nv = n / V, mv = m / V;
  const bool narrow = nv < 2147483648LL;
  GRID_LOOP(p, nv) {
    typedef Pack<T, V> P;
    P a, b, c;
    if (MODE == 4) { for (int k = 0; k < V; ++k) a.v[k] = s; }
    else a = reinterpret_cast<const P*>(x)[MODE == 2 ? tp_wrap(p, mv, magic, shift, narrow) : p];
    if (MODE == 3) { for (int k = 0; k < V; ++k) b.v[k] = s; }
    else b = reinterpret_cast<const P*>(y)[MODE == 1 ? tp_wrap(p, mv, magic, shift, narrow) : p];
#pragma unroll
    for (int k = 0; k < V; ++k) c.v[k] = tp_f2<T>(a.v[k], b.v[k]);
    reinterpret_cast<P*>(z)[p] = c;
  }
  GRID_LOOP(t, n - nv * V) {
    const long long i = nv * V + t;
    const T a = MODE == 4 ? s : x[MODE == 2 ? i % m : i];  // the tail: fewer than V
    const T b = MODE == 3 ? s : y[MODE == 1 ? i % m : i];
    z[i] = tp_f2<T>(a, b);
  }
}

template <typename T, int V>
__global__ void tp_unary(const T* x, T* z, long long n) {
  const long long nv = n / V;
  GRID_LOOP(p, nv) {
    typedef Pack<T, V> P;
    P a = reinterpret_cast<const P*>(x)[p], c;
#pragma unroll
    for (int k = 0; k < V; ++k) c.v[k] = tp_f1<T>(a.v[k]);
    reinterpret_cast<P*>(z)[p] = c;
  }
  GRID_LOOP(t, n - nv * V) { z[nv * V + t] = tp_f1<T>(x[nv * V + t]); }
}
"""

# Below this many elements CuPy's kernel runs: its launch costs less host time than this
# module's, and small tensors are bound by host time, not bandwidth (measured on the H200 in
# tools/bench/gpu_eager.py; the crossover is between 1M and 4M elements).
MIN_ELEMENTS = 1 << 21
_THREADS = 256
_MAX_BLOCKS = 1 << 20
_ALIGN = 16

_kernels: dict = {}  # (expr, dtype char, arity, device) -> {(V, mode): CuPy Function}


def _functions(expr: str, char: str, arity: int, device: int) -> dict:
    key = (expr, char, arity, device)
    fns = _kernels.get(key)
    if fns is None:
        cp = _device.cupy_or_raise()
        t = _C_TYPES[char]
        vec = max(1, _ALIGN // np.dtype(char).itemsize)
        if arity == 2:
            names = {(v, m): f"tp_binary<{t}, {v}, {m}>" for v in {1, vec} for m in range(5)}
            defs = f"#define EXPR2 {expr}\n#define EXPR1 a\n"
        else:
            names = {(v, 0): f"tp_unary<{t}, {v}>" for v in {1, vec}}
            defs = f"#define EXPR1 {expr}\n#define EXPR2 a\n"
        # no fused multiply-add: an expression of several operations (gelu's) then rounds
        # each as CuPy's kernels, one per operation, do
        module = cp.RawModule(
            code=defs + _SRC,
            options=("-std=c++14", "--fmad=false"),
            name_expressions=list(names.values()),
        )
        # the Functions themselves (``RawKernel.kernel``): their handles are what a launch needs
        fns = _kernels[key] = {k: module.get_function(n).kernel for k, n in names.items()}
        fns["vec"] = vec
    return fns


def _repeats(small, big) -> bool:
    """``small`` broadcasts to ``big`` by repeating whole: its shape is big's trailing part
    (leading 1s allowed)."""
    s, b = small.shape, big.shape
    while s and s[0] == 1:
        s = s[1:]
    return len(s) <= len(b) and s == b[len(b) - len(s) :]


def _layout(arrays: tuple):
    """(mode, shape of the result, the tensor operands, the number) of ``arrays``, or None
    where no kernel here takes them."""
    array = _device.cupy_or_raise().ndarray
    a = arrays[0]
    if len(arrays) == 1:
        return (0, a.shape, (a,), None) if a.flags.c_contiguous else None
    b = arrays[1]
    if not isinstance(a, array) or not isinstance(b, array):
        # a number arrives as a numpy scalar of the tensor's dtype (the dispatcher converted
        # it, as torch does); a Python number or another dtype is left to CuPy
        t, s, mode = (b, a, 4) if isinstance(b, array) else (a, b, 3)
        if not (isinstance(t, array) and t.flags.c_contiguous and isinstance(s, np.generic)):
            return None
        if s.dtype != t.dtype:
            return None
        return mode, t.shape, (t,), s
    if a.dtype != b.dtype or not (a.flags.c_contiguous and b.flags.c_contiguous):
        return None
    if a.shape == b.shape:
        return 0, a.shape, (a, b), None
    if _repeats(b, a):
        return 1, a.shape, (a, b), None
    if _repeats(a, b):
        return 2, b.shape, (a, b), None
    return None


_native_run = None  # tensorplay._C.cuda_pointwise once CuPy is loaded (see _native_route)
_native_checked = False


def _native_route():
    """``_C.cuda_pointwise``, initialised with CuPy's array class and stream getter, or None
    (no ``_C``, ``TENSORPLAY_PURE_PYTHON=1``)."""
    global _native_run, _native_checked
    if not _native_checked:
        _native_checked = True
        if NATIVE is not None and hasattr(NATIVE, "cuda_pointwise"):
            cp = _device.cupy_or_raise()
            NATIVE.init_cuda_pointwise(cp.ndarray, _functions, cp.cuda.get_current_stream)
            _native_run = NATIVE.cuda_pointwise
    return _native_run


def run(expr: str, arrays: tuple, out=None, min_elements: int | None = None):
    """``expr`` over ``arrays`` (one or two CuPy arrays, or an array and a number already of
    its dtype), into ``out`` when given; None where this layout, dtype or size (below
    ``min_elements``, default ``MIN_ELEMENTS``) is not covered.

    Without ``out``, ``tensorplay._C.cuda_pointwise`` decides and launches (the layouts and
    kernels of the code below, its twin) at every size: its host time is below CuPy's
    own elementwise call, so ``MIN_ELEMENTS`` (this Python route's crossover) does not apply."""
    native = _native_run if _native_checked else _native_route()
    if native is not None and out is None:
        r = native(expr, arrays, min_elements or 0)
        if r is not None:
            return r
    n = getattr(arrays[0], "size", 0)
    if len(arrays) == 2:
        n = max(n, getattr(arrays[1], "size", 0))
    if n < (MIN_ELEMENTS if min_elements is None else min_elements) or n == 0:
        return None
    layout = _layout(arrays)
    if layout is None:
        return None
    mode, shape, tensors, scalar = layout
    dtype = tensors[0].dtype
    if dtype.char not in _C_TYPES:
        return None
    if out is None:
        out = _device.cupy_or_raise().empty(shape, dtype)
    elif out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        return None
    n = out.size
    if n == 0:
        return out
    fns = _functions(expr, dtype.char, len(arrays), out.data.device_id)
    vec = fns["vec"]
    m = n if mode in (0, 3, 4) else min(t.size for t in tensors)  # the repeating block
    ptrs = [t.data.ptr for t in tensors]
    z = out.data.ptr
    v = vec if m % vec == 0 and not any(p % _ALIGN for p in (*ptrs, z)) else 1
    grid = max(1, min(-(-n // (v * _THREADS)), _MAX_BLOCKS))
    if len(arrays) == 1:
        launch(fns[(v, 0)], grid, _THREADS, "ppq", (ptrs[0], z, n))
    else:  # with a number, the one tensor fills both pointers
        sig = "pp" + CODES[dtype.char] + "pqqII"
        args = (ptrs[0], ptrs[-1], 0 if scalar is None else scalar, z, n, m, *_magic(m // v))
        launch(fns[(v, mode)], grid, _THREADS, sig, args)
    return out


def _magic(d: int) -> tuple:
    """(magic, shift) with ``(umulhi(u, magic) + u) >> shift == u // d`` for every 32-bit
    ``u < 2**31`` and ``1 <= d < 2**31`` (round-up division by an invariant integer, as
    Granlund and Montgomery give it); (0, 0) for a larger d, which the kernel divides."""
    if not 1 <= d < 1 << 31:
        return 0, 0
    shift = (d - 1).bit_length()
    return ((1 << 32) * ((1 << shift) - d)) // d + 1, shift
