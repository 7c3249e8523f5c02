"""One-kernel ``gather``, ``index_select`` and ``scatter`` (plain and ``reduce="add"``) on
CUDA, each checking its indices inside the same kernel.

The generic route of these rows on a GPU is a bounds-check kernel (``_device_checks``) and
then CuPy's ``take_along_axis``/``take``/``add.at``, which cost several launches and a lot
of host time per call. Here each is one launch of a kernel that reads the index, records
the first bad one in the device's check record (reported at the next synchronisation,
exactly as ``checked_index`` does) and then copies (or atomically adds) the element.

They cover the layout every training step meets: contiguous arrays, the index shaped as
the input (gather, scatter) or 1-D (index_select) apart from ``dim``. Anything else returns
None and the row runs its generic route. Element copies go by item size (1, 2, 4, 8 bytes:
any dtype); atomic adds by dtype (int32, int64, float32, float64).
"""

from __future__ import annotations

from tensorplay import _device, _device_checks, _meta
from tensorplay._cuda_launch import launch

__all__ = ["gather", "index_select", "scatter"]

_SRC = r"""
// no long long overload in CUDA: two's complement adds the same as unsigned
__device__ __forceinline__ long long atomicAdd(long long* at, long long v) {
  return (long long)atomicAdd((unsigned long long*)at, (unsigned long long)v);
}

__device__ __forceinline__ void tp_bad(unsigned long long* rec, long long code, long long j,
                                       long long dim, long long n) {
  if (atomicCAS(rec, 0ULL, (unsigned long long)code) == 0ULL) {
    rec[1] = (unsigned long long)j;
    rec[2] = (unsigned long long)dim;
    rec[3] = (unsigned long long)n;
  }
}

#define GRID_LOOP(p, total) \
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < total; \
       p += (long long)blockDim.x * gridDim.x)

// out (O, K, I) = a (O, Ka, I) at [o, idx[o, k, i], i]
template <typename T, typename J>
__global__ void tp_gather(const T* a, const J* idx, T* out, long long total, long long K,
                          long long inner, long long ka, unsigned long long* rec,
                          long long code, long long dim) {
  GRID_LOOP(p, total) {
    long long i = p % inner, o = p / inner / K;
    long long j = (long long)idx[p];
    if (j < 0 || j >= ka) { tp_bad(rec, code, j, dim, ka); j = 0; }
    out[p] = a[(o * ka + j) * inner + i];
  }
}

// out (O, N, I) = a (O, Ka, I) at [o, idx[n], i]
template <typename T, typename J>
__global__ void tp_index_select(const T* a, const J* idx, T* out, long long total,
                                long long n, long long inner, long long ka,
                                unsigned long long* rec, long long code, long long dim) {
  GRID_LOOP(p, total) {
    long long i = p % inner, t = p / inner;
    long long j = (long long)idx[t % n], o = t / n;
    if (j < 0 || j >= ka) { tp_bad(rec, code, j, dim, ka); j = 0; }
    out[p] = a[(o * ka + j) * inner + i];
  }
}

// out (O, Ka, I) at [o, idx[o, k, i], i] = src[o, k, i] (tp_scatter_add: +=, atomically)
#define SCATTER(NAME, STORE)                                                                  \
  template <typename T, typename J>                                                           \
  __global__ void NAME(T* out, const J* idx, const T* src, long long total, long long K,      \
                       long long inner, long long ka, unsigned long long* rec,                \
                       long long code, long long dim) {                                       \
    GRID_LOOP(p, total) {                                                                     \
      long long i = p % inner, o = p / inner / K;                                             \
      long long j = (long long)idx[p];                                                        \
      if (j < 0 || j >= ka) { tp_bad(rec, code, j, dim, ka); continue; }                      \
      T* at = out + (o * ka + j) * inner + i;                                                 \
      STORE;                                                                                  \
    }                                                                                         \
  }
SCATTER(tp_scatter, *at = src[p])
SCATTER(tp_scatter_add, atomicAdd(at, src[p]))
"""

_COPY_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_ADD_TYPES = {"f": "float", "d": "double", "i": "int", "l": "long long", "q": "long long"}
_INDEX_TYPES = {"i": "int", "l": "long long", "q": "long long"}
_THREADS = 256
_MAX_BLOCKS = 8192

_module = None
_functions: dict = {}  # kernel name -> cupy.cuda.Function (get_function costs a lookup per call)


def _names_all() -> list[str]:
    out = []
    for j in sorted(set(_INDEX_TYPES.values())):
        for t in _COPY_TYPES.values():
            out += [f"tp_gather<{t}, {j}>", f"tp_index_select<{t}, {j}>"]
            out.append(f"tp_scatter<{t}, {j}>")
        for t in sorted(set(_ADD_TYPES.values())):
            out.append(f"tp_scatter_add<{t}, {j}>")
    return out


def _run(kernel: str, total: int, arrays: tuple, sizes: tuple, dev: int, name: str, d: int):
    """Launch ``kernel`` over ``total`` positions, with the device's check record."""
    global _module
    fn = _functions.get(kernel)
    if fn is None:
        if _module is None:
            cp = _device.cupy_or_raise()
            names = _names_all()
            _module = cp.RawModule(code=_SRC, options=("-std=c++14",), name_expressions=names)
        fn = _functions[kernel] = _module.get_function(kernel).kernel  # the cupy Function
    record, code = _device_checks.check_record(dev, name)
    args = (*(a.data.ptr for a in arrays), total, *sizes, record.data.ptr, code, d)
    launch(fn, min(-(-total // _THREADS), _MAX_BLOCKS), _THREADS, "pppqqqqpqq", args)


def _ok(*arrays) -> bool:
    return all(a.flags.c_contiguous for a in arrays)


def gather(a, d: int, idx):
    """``take_along_axis(a, idx, d)`` for ``idx`` shaped as ``a`` apart from ``d``; None
    where that does not apply."""
    j = _INDEX_TYPES.get(idx.dtype.char)
    t = _COPY_TYPES.get(a.dtype.itemsize)
    split = _meta.split_along(a.shape, idx.shape, d)
    if j is None or t is None or split is None or not _ok(a, idx):
        return None
    cp = _device.cupy_or_raise()
    out = cp.ndarray(idx.shape, a.dtype)
    if idx.size:
        _, k, inner = split
        sizes = (k, inner, a.shape[d])
        _run(f"tp_gather<{t}, {j}>", idx.size, (a, idx, out), sizes, a.data.device_id, "gather", d)
    return out


def index_select(a, d: int, idx):
    """``take(a, idx, axis=d)`` for a 1-D (or 0-d) ``idx``; None where that does not apply."""
    j = _INDEX_TYPES.get(idx.dtype.char)
    t = _COPY_TYPES.get(a.dtype.itemsize)
    if j is None or t is None or a.ndim == 0 or idx.ndim > 1 or not _ok(a, idx):
        return None
    cp = _device.cupy_or_raise()
    n = idx.size
    out = cp.ndarray(a.shape[:d] + (n,) + a.shape[d + 1 :], a.dtype)
    total = out.size
    if total:
        _, _, inner = _meta.split_along(a.shape, a.shape, d)
        kernel = f"tp_index_select<{t}, {j}>"
        _run(
            kernel,
            total,
            (a, idx, out),
            (n, inner, a.shape[d]),
            a.data.device_id,
            "index_select",
            d,
        )
    return out


def scatter(out, d: int, idx, src, add: bool) -> bool:
    """``out[..., idx, ...] = src`` (``+=`` with ``add``) in place, for ``idx`` and ``src``
    of one shape, that of ``out`` apart from ``d``; False (nothing done) where that does not
    apply."""
    j = _INDEX_TYPES.get(idx.dtype.char)
    t = _ADD_TYPES.get(out.dtype.char) if add else _COPY_TYPES.get(out.dtype.itemsize)
    if j is None or t is None or not hasattr(src, "shape") or src.dtype != out.dtype:
        return False
    split = _meta.split_along(out.shape, idx.shape, d)
    if split is None or src.shape != idx.shape or not _ok(out, idx, src):
        return False
    if idx.size:
        _, k, inner = split
        kernel = f"tp_scatter{'_add' if add else ''}<{t}, {j}>"
        sizes = (k, inner, out.shape[d])
        _run(kernel, idx.size, (out, idx, src), sizes, out.data.device_id, "scatter", d)
    return True
