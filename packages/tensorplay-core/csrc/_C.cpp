// tensorplay._C: the native hot paths of tensorplay-core.
//
// Every function here has a readable Python twin (named in its comment) that runs when
// this module is not built or TENSORPLAY_PURE_PYTHON=1 is set; tests run both ways.
// The module never owns semantics: it repeats checks and steps the Python twin makes,
// and whenever a call is not the simple case it hands the call to the Python code.
//
// Contents:
//   FastOp          the fast path of a pointwise op (tensorplay._dispatch._generate's
//                   templates _BINARY_FAST/_UNARY_FAST): exact Tensors on CPU, one dtype,
//                   no layer active, no keyword arguments -> one aligned allocation, one
//                   ufunc call, two object allocations. Anything else -> the Python function.
//   plain_call      the general path (tensorplay._dispatch.call) of a plain call: the
//                   decisions of execute() kept per key (row, input types, dtypes, devices,
//                   shapes, parameters), the kernel run and its result wrapped here
//                   (csrc/plain_call.h).
//   adopt_cuda      a CuPy result as a Tensor over a CudaStorage (twin: adopt_array's CUDA
//                   branch); plain_call adopts CUDA results with it.
//   make_view       a strided view of a CPU tensor, or a reshape/permutation of a CUDA one
//                   (twin: _tensor.make_view).
//   watch_gate      the fast path reads _dispatch.state.plain (the gate) through its slot.
//   any_requires_grad  the scan autograd runs over every general-path call's inputs.
//   input_edges     the pass every recording makes over a new backward node's inputs.
//   record_node     an op-table row's OpNode and its SavedTensors in the common case
//                   (csrc/record.h; twin: autograd._record.record).
//   topological_order, backward_loop  the backward pass's bookkeeping (engine.py).
//   im2col          a convolution's column matrix (C*KH*KW, N*OH*OW) from a contiguous
//                   (N, C, H, W) array, zero padding included (twin: _rows/convolution.py's
//                   _columns_py: a strided view, transposed, copied).
//   col2im          im2col's adjoint: columns added back into an image (a transposed
//                   convolution; twin: _rows/convolution.py's strided adds).
//   max_pool2d      2-D max pooling's values and flat argmax indices in one pass (torch's
//                   loop: the first maximum wins, a NaN replaces anything; twin:
//                   _rows/convolution.py's _max_pool_arrays); max_pool2d_backward, its
//                   input gradient: each window's gradient added at that same pick.
//   scatter_add     scatter(dim, reduce="add") along one dim of contiguous arrays (twin:
//                   numpy's add.at, _rows/indexing.py's add_at).
//   relu, threshold_backward  relu and its backward over float arrays in one pass
//                   (twins: the numpy kernels of those rows in _rows/pointwise.py).
//   cuda_launch     one CUDA kernel launch through the driver's cuLaunchKernel, the arguments
//                   converted by a signature string (twin: the CuPy Function's own call,
//                   _cuda_launch.py); CuPy's call builds an object per argument.
//   cuda_pointwise  _cuda_pointwise.run's layout checks, allocation and launch for our own
//                   pointwise kernels (csrc/cuda_pointwise.h; twin: _cuda_pointwise.run).
//   cublas_gemm     cublasGemmEx / cublasGemmStridedBatchedEx with alpha 1, beta 0, the stream
//                   set when it changed (cublas_gemm.h; twin: _cublas.py's ctypes calls).
//   exchange_api    the DLPack C exchange table (Tensor.__dlpack_c_exchange_api__): tvm-ffi
//                   converts CPU tensors in C, without a capsule or a Python call (twin:
//                   Tensor.__dlpack__, which tvm-ffi uses when the attribute is absent).
//
// Tensor and Storage stay Python classes with __slots__: init() learns the byte offsets
// of their slots once, so the fast path reads and writes them like CPython itself does.

#include <pybind11/pybind11.h>

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
// PyDataMem_SetHandler (the aligned allocator inside plain calls) is API of numpy 1.22 on;
// older numpy headers default to an earlier target and hide it
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tensorplay_ARRAY_API
#include <numpy/arrayobject.h>
#include <structmember.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dlpack_abi.h"

#if defined(__linux__)
#include <dlfcn.h>
#endif
#include <string>

namespace py = pybind11;

namespace {

// ---- what init() learns about tensorplay's Python classes ------------------------------

struct Layout {
    PyTypeObject *tensor = nullptr, *storage = nullptr;
    Py_ssize_t t_data = 0, t_storage = 0, t_shape = 0, t_dtype = 0, t_device = 0;
    Py_ssize_t s_buf = 0, s_start = 0, s_nbytes = 0, s_device = 0, s_version = 0;
    PyObject *cpu = nullptr;         // tensorplay._device.CPU
    PyObject *aligned_u8 = nullptr;  // tensorplay._storage._aligned_u8(nbytes)
    PyObject *requires_grad = nullptr;  // interned "requires_grad"
    PyObject *out_kwnames = nullptr;    // ("out",)
    bool ready = false;
};
Layout L;


inline PyObject *&slot(PyObject *o, Py_ssize_t off) {
    return *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(o) + off);
}

// The fast-path gate: tensorplay._dispatch.state.plain, read through its slot (watch_gate).
PyObject *g_state = nullptr;
Py_ssize_t g_plain_off = 0;

inline bool gate_plain() { return !g_state || slot(g_state, g_plain_off) == Py_True; }

Py_ssize_t slot_offset(PyTypeObject *type, const char *name) {
    py::object d = py::reinterpret_steal<py::object>(
        PyObject_GetAttrString(reinterpret_cast<PyObject *>(type), name));
    if (!d) PyErr_Clear();
    if (!d || Py_TYPE(d.ptr()) != &PyMemberDescr_Type)
        throw py::type_error(std::string("tensorplay._C.init: ") + type->tp_name + "." + name +
                             " is not a __slots__ member");
    return reinterpret_cast<PyMemberDescrObject *>(d.ptr())->d_member->offset;
}

void init(py::object tensor, py::object storage, py::object cpu, py::object aligned_u8) {
    if (!PyType_Check(tensor.ptr()) || !PyType_Check(storage.ptr()))
        throw py::type_error("tensorplay._C.init(tensor, storage, ...): expected two classes");
    if (!PyCallable_Check(aligned_u8.ptr()))
        throw py::type_error("tensorplay._C.init(aligned_u8=): expected a callable");
    auto *tt = reinterpret_cast<PyTypeObject *>(tensor.ptr());
    auto *st = reinterpret_cast<PyTypeObject *>(storage.ptr());
    Layout n;  // filled completely before it replaces L: a failed call changes nothing
    n.t_data = slot_offset(tt, "_data");
    n.t_storage = slot_offset(tt, "_storage");
    n.t_shape = slot_offset(tt, "_shape");
    n.t_dtype = slot_offset(tt, "dtype");
    n.t_device = slot_offset(tt, "device");
    n.s_buf = slot_offset(st, "_buf");
    n.s_start = slot_offset(st, "_start");
    n.s_nbytes = slot_offset(st, "_nbytes");
    n.s_device = slot_offset(st, "device");
    n.s_version = slot_offset(st, "_version");
    if (L.ready) throw py::value_error("tensorplay._C.init() was already called");
    // Kept for the life of the process (module-level singletons of tensorplay).
    n.tensor = reinterpret_cast<PyTypeObject *>(tensor.release().ptr());
    n.storage = reinterpret_cast<PyTypeObject *>(storage.release().ptr());
    n.cpu = cpu.release().ptr();
    n.aligned_u8 = aligned_u8.release().ptr();
    n.requires_grad = PyUnicode_InternFromString("requires_grad");
    n.out_kwnames = Py_BuildValue("(s)", "out");
    n.ready = true;
    L = n;
}

// ---- aligned CPU allocation (twin: tensorplay._storage.cpu_empty) ----------------------
//
// Small buffers are carved from 64 KiB slabs in 64-byte steps (every piece stays 64-byte
// aligned, which TVM kernels need); the GIL serialises access. Large buffers get their own
// aligned allocation from the Python allocator (their cost is the memory traffic anyway).

constexpr Py_ssize_t kAlign = 64, kSmall = 512, kSlab = 1 << 16;

struct Slab {
    PyObject *buf = nullptr;  // 1-D uint8 numpy array, 64-byte aligned
    Py_ssize_t pos = kSlab;   // next free byte (kSlab: take a new slab first)
};
Slab g_slab;

// A new reference to the buffer holding ``nbytes`` at byte ``*start``; NULL on error.
PyObject *take(Py_ssize_t nbytes, Py_ssize_t *start) {
    if (nbytes > kSmall) {
        *start = 0;
        return PyObject_CallFunction(L.aligned_u8, "n", nbytes);
    }
    Py_ssize_t need = nbytes ? (nbytes + kAlign - 1) / kAlign * kAlign : kAlign;
    if (g_slab.pos + need > kSlab) {
        PyObject *fresh = PyObject_CallFunction(L.aligned_u8, "n", kSlab);
        if (!fresh) return nullptr;
        Py_XSETREF(g_slab.buf, fresh);  // tensors on the old slab keep it alive
        g_slab.pos = 0;
    }
    *start = g_slab.pos;
    g_slab.pos += need;
    Py_INCREF(g_slab.buf);
    return g_slab.buf;
}

// A C-contiguous array shaped like ``like`` with dtype ``descr``, in aligned memory, plus the
// buffer and start the Storage records. Returns a new reference or NULL.
PyObject *aligned_like(PyArrayObject *like, PyArray_Descr *descr, PyObject **buf_out,
                       Py_ssize_t *start) {
    int nd = PyArray_NDIM(like);
    npy_intp *dims = PyArray_DIMS(like);
    Py_ssize_t nbytes = PyDataType_ELSIZE(descr);
    for (int i = 0; i < nd; ++i) nbytes *= dims[i];
    PyObject *buf = take(nbytes, start);
    if (!buf) return nullptr;
    char *data = PyArray_BYTES(reinterpret_cast<PyArrayObject *>(buf)) + *start;
    Py_INCREF(descr);  // PyArray_NewFromDescr steals it
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, nd, dims, nullptr, data,
                                         NPY_ARRAY_CARRAY, nullptr);
    if (!arr) {
        Py_DECREF(buf);
        return nullptr;
    }
    Py_INCREF(buf);
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject *>(arr), buf) < 0) {  // steals
        Py_DECREF(arr);
        Py_DECREF(buf);
        return nullptr;
    }
    *buf_out = buf;
    return arr;
}

// ---- numpy allocations inside a plain call's CPU kernel ------------------------------------
//
// A kernel's result from numpy's default allocator is 16-byte aligned, so a plain call used
// to copy every CPU result into aligned storage: a second pass over the output, as long as
// the op itself for a pointwise op on large arrays. While a CPU kernel runs, numpy allocates
// through this handler instead (numpy's PyDataMem_SetHandler, a context variable: other
// threads and the code around the call keep their allocator), and a fresh result that the
// kernel alone made is kept as the storage without a copy (adopt_cpu). Each block carries
// its size in a 64-byte header: realloc must copy the old contents without being told their
// length. Arrays remember the handler that allocated them, so they are freed here whenever
// they die.

constexpr size_t kHeader = 64;

void *aligned_alloc_block(void *, size_t n) {
    void *p = nullptr;
    if (n > SIZE_MAX - kHeader || posix_memalign(&p, kAlign, n + kHeader) != 0) return nullptr;
    *static_cast<size_t *>(p) = n;
    return static_cast<char *>(p) + kHeader;
}

void *aligned_calloc_block(void *ctx, size_t nelem, size_t elsize) {
    if (elsize && nelem > SIZE_MAX / elsize) return nullptr;
    void *p = aligned_alloc_block(ctx, nelem * elsize);
    if (p) std::memset(p, 0, nelem * elsize);
    return p;
}

void aligned_free_block(void *, void *p, size_t) {
    if (p) std::free(static_cast<char *>(p) - kHeader);
}

void *aligned_realloc_block(void *ctx, void *p, size_t n) {
    if (!p) return aligned_alloc_block(ctx, n);
    void *q = aligned_alloc_block(ctx, n);
    if (!q) return nullptr;  // (the old block stays valid, as realloc leaves it)
    size_t old = *reinterpret_cast<size_t *>(static_cast<char *>(p) - kHeader);
    std::memcpy(q, p, std::min(old, n));
    aligned_free_block(ctx, p, old);
    return q;
}

PyDataMem_Handler g_aligned_handler = {
    "tensorplay_aligned64",
    1,
    {nullptr, aligned_alloc_block, aligned_calloc_block, aligned_realloc_block,
     aligned_free_block},
};
PyObject *g_aligned_capsule = nullptr;  // made once; every array it allocated references it

// Make numpy allocate through the aligned handler; returns the previous handler (a new
// reference, for restore_allocator) or NULL with an exception set.
PyObject *use_aligned_allocator() {
    if (!g_aligned_capsule) {
        g_aligned_capsule = PyCapsule_New(&g_aligned_handler, "mem_handler", nullptr);
        if (!g_aligned_capsule) return nullptr;
    }
    return PyDataMem_SetHandler(g_aligned_capsule);
}

// Put back the handler use_aligned_allocator returned (and release it), keeping any
// exception that is set.
int restore_allocator(PyObject *prev) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *ours = PyDataMem_SetHandler(prev);
    Py_DECREF(prev);
    int rc = ours ? 0 : -1;
    Py_XDECREF(ours);
    if (rc == 0) PyErr_Restore(et, ev, tb);
    else {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
    }
    return rc;
}

// ``r`` as the buffer of a new storage, without a copy, when nothing else can see it: an
// exact, C-contiguous, writable numpy array that owns its 64-byte aligned memory, of more
// than kSmall bytes (smaller results share a slab), referenced only by the caller. Returns
// the flat uint8 buffer over r's memory (a new reference whose base is r), nullptr when r
// does not qualify (no exception), or nullptr with an exception set.
PyObject *own_buffer(PyObject *r) {
    auto *arr = reinterpret_cast<PyArrayObject *>(r);
    Py_ssize_t nbytes = PyArray_NBYTES(arr);
    if (Py_REFCNT(r) != 1 || !PyArray_CheckExact(r) || nbytes <= kSmall ||
        !PyArray_CHKFLAGS(arr, NPY_ARRAY_OWNDATA | NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE) ||
        reinterpret_cast<uintptr_t>(PyArray_DATA(arr)) % kAlign != 0)
        return nullptr;
    npy_intp dims[1] = {nbytes};
    PyObject *buf = PyArray_New(&PyArray_Type, 1, dims, NPY_UINT8, nullptr, PyArray_DATA(arr),
                                0, NPY_ARRAY_CARRAY, nullptr);
    if (!buf) return nullptr;
    Py_INCREF(r);
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject *>(buf), r) < 0) {  // steals r
        Py_DECREF(buf);
        return nullptr;
    }
    return buf;
}

// twin: tensorplay._tensor.wrap_array. Steals ``arr`` and ``buf``.
PyObject *wrap(PyObject *arr, PyObject *buf, Py_ssize_t start, PyObject *shape, PyObject *odt) {
    Py_ssize_t nbytes = PyArray_NBYTES(reinterpret_cast<PyArrayObject *>(arr));
    PyObject *st = L.storage->tp_alloc(L.storage, 0);
    PyObject *t = st ? L.tensor->tp_alloc(L.tensor, 0) : nullptr;
    PyObject *pstart = PyLong_FromSsize_t(start), *pnbytes = PyLong_FromSsize_t(nbytes);
    if (!t || !pstart || !pnbytes) {
        Py_XDECREF(st);
        Py_XDECREF(t);
        Py_XDECREF(pstart);
        Py_XDECREF(pnbytes);
        Py_DECREF(arr);
        Py_DECREF(buf);
        return nullptr;
    }
    slot(st, L.s_buf) = buf;
    slot(st, L.s_start) = pstart;
    slot(st, L.s_nbytes) = pnbytes;
    Py_INCREF(L.cpu);
    slot(st, L.s_device) = L.cpu;
    slot(st, L.s_version) = PyLong_FromLong(0);
    slot(t, L.t_data) = arr;
    slot(t, L.t_storage) = st;
    Py_INCREF(shape);
    slot(t, L.t_shape) = shape;
    Py_INCREF(odt);
    slot(t, L.t_dtype) = odt;
    Py_INCREF(L.cpu);
    slot(t, L.t_device) = L.cpu;
    return t;
}

// 1 / 0 / -1 (error). A Tensor's requires_grad is a class default overridden per instance.
inline int requires_grad(PyObject *t) {
    PyObject *v = PyObject_GetAttr(t, L.requires_grad);
    if (!v) return -1;
    int r = v == Py_True ? 1 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

// ---- make_view: a strided view of a CPU tensor (and the common CUDA views) -----------------
//
// Twin: tensorplay._tensor.make_view (its CPU branch): the numpy array over the source's
// storage at the view's offset and strides, and the Tensor around it sharing the storage
// (and so the version counter), with _base the source's base or the source. numpy's
// ndarray(shape, dtype, buffer, offset, strides) constructor costs most of a view's host
// time; here the array is made from the buffer's address directly, after the bounds check
// that constructor makes. On CUDA, cuda_view below. Anything else (meta, a subclass, lists
// for the geometry, a negative stride, a view past the buffer) returns None and Python makes
// it (or raises).

struct ViewNames {
    PyObject *offset = nullptr, *stride = nullptr, *base = nullptr, *reshape = nullptr,
             *transpose = nullptr;
};
ViewNames V;

// The view Tensor around ``arr`` (stolen): src's storage, dtype and device, the view's
// geometry, and _base (src's base, or src). A new reference, or NULL.
PyObject *wrap_view(PyObject *src, PyObject *arr, PyObject *shape, PyObject *stride,
                    PyObject *off, bool offset) {
    PyObject *t = L.tensor->tp_alloc(L.tensor, 0);
    if (!t) {
        Py_DECREF(arr);
        return nullptr;
    }
    slot(t, L.t_data) = arr;
    slot(t, L.t_storage) = Py_NewRef(slot(src, L.t_storage));
    slot(t, L.t_shape) = Py_NewRef(shape);
    slot(t, L.t_dtype) = Py_NewRef(slot(src, L.t_dtype));
    slot(t, L.t_device) = Py_NewRef(slot(src, L.t_device));
    PyObject *src_base = PyObject_GetAttr(src, V.base);
    int rc = src_base ? 0 : -1;
    if (rc == 0 && offset) rc = PyObject_SetAttr(t, V.offset, off);
    if (rc == 0) rc = PyObject_SetAttr(t, V.stride, stride);
    if (rc == 0) rc = PyObject_SetAttr(t, V.base, src_base == Py_None ? src : src_base);
    Py_XDECREF(src_base);
    if (rc < 0) {
        Py_DECREF(t);
        return nullptr;
    }
    return t;
}

// ``shape``'s C-contiguous strides in elements, as _tensor.contiguous_strides (a dim of
// size 1 takes the stride of the dims after it).
void contiguous_of(const Py_ssize_t *shape, Py_ssize_t nd, Py_ssize_t *out) {
    Py_ssize_t acc = 1;
    for (Py_ssize_t i = nd - 1; i >= 0; --i) {
        out[i] = acc;
        if (shape[i] > 1) acc *= shape[i];
    }
}

// A tuple of ints into ``out`` (at most ``cap``); false (no exception) where it is not one.
bool read_ints(PyObject *tuple, Py_ssize_t *out, Py_ssize_t cap) {
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) > cap) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) {
        out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return false;
        }
    }
    return true;
}

// The CUDA branch (twin: _tensor._derived_cuda_view): a reshape of contiguous ``src`` or a
// permutation of its dims at its own offset is CuPy's reshape/transpose of src's array (a
// C call, where a new cupy.ndarray over a pointer costs several times more host time);
// anything else returns None and Python makes the view.
PyObject *cuda_view(PyObject *src, PyObject *shape, PyObject *stride, PyObject *off) {
    PyObject *storage = slot(src, L.t_storage), *data = slot(src, L.t_data);
    // a CudaStorage (the one Storage subclass) holding a CuPy array; not meta, not numpy
    if (!storage || Py_TYPE(storage) == L.storage || !data || data == Py_None ||
        PyArray_Check(data))
        Py_RETURN_NONE;
    constexpr Py_ssize_t kMax = 8;
    const Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    Py_ssize_t dims[kMax], strides[kMax], cs[kMax], sdims[kMax], sstrides[kMax];
    if (nd > kMax || PyTuple_GET_SIZE(stride) != nd || !read_ints(shape, dims, kMax) ||
        !read_ints(stride, strides, kMax))
        Py_RETURN_NONE;
    PyObject *src_off = PyObject_GetAttr(src, V.offset);
    if (!src_off) return nullptr;
    const int same_offset = PyObject_RichCompareBool(src_off, off, Py_EQ);
    Py_DECREF(src_off);
    if (same_offset < 0) return nullptr;
    if (!same_offset) Py_RETURN_NONE;
    PyObject *src_stride = PyObject_GetAttr(src, V.stride);
    if (!src_stride) return nullptr;
    const bool src_contiguous = src_stride == Py_None;
    PyObject *src_shape = slot(src, L.t_shape);
    const Py_ssize_t snd = PyTuple_GET_SIZE(src_shape);
    bool ok = read_ints(src_shape, sdims, kMax) &&
              (src_contiguous || read_ints(src_stride, sstrides, kMax));
    Py_DECREF(src_stride);
    if (!ok) Py_RETURN_NONE;
    PyObject *arr = nullptr;
    contiguous_of(dims, nd, cs);
    if (src_contiguous && std::equal(strides, strides + nd, cs)) {
        arr = PyObject_CallMethodOneArg(data, V.reshape, shape);
    } else {
        if (snd != nd) Py_RETURN_NONE;
        if (src_contiguous) contiguous_of(sdims, snd, sstrides);
        bool used[kMax] = {};
        PyObject *perm = PyTuple_New(nd);
        if (!perm) return nullptr;
        for (Py_ssize_t i = 0; i < nd; ++i) {
            Py_ssize_t j = 0;  // the first unused dim of src with this size and stride
            while (j < nd && (used[j] || sdims[j] != dims[i] || sstrides[j] != strides[i])) ++j;
            if (j == nd) {
                Py_DECREF(perm);
                Py_RETURN_NONE;
            }
            used[j] = true;
            PyTuple_SET_ITEM(perm, i, PyLong_FromSsize_t(j));
        }
        arr = PyObject_CallMethodOneArg(data, V.transpose, perm);
        Py_DECREF(perm);
    }
    if (!arr) return nullptr;
    const Py_ssize_t offset = PyLong_AsSsize_t(off);
    if (offset == -1 && PyErr_Occurred()) {
        Py_DECREF(arr);
        return nullptr;
    }
    return wrap_view(src, arr, shape, stride, off, offset != 0);
}

PyObject *make_view(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "make_view(src, shape, stride, offset)");
        return nullptr;
    }
    PyObject *src = args[0], *shape = args[1], *stride = args[2], *off = args[3];
    if (!L.ready || Py_TYPE(src) != L.tensor || !PyTuple_CheckExact(shape) ||
        !PyTuple_CheckExact(stride) || !PyLong_CheckExact(off))
        Py_RETURN_NONE;
    if (slot(src, L.t_device) != L.cpu) return cuda_view(src, shape, stride, off);
    PyObject *data = slot(src, L.t_data), *storage = slot(src, L.t_storage);
    PyObject *buf = storage ? slot(storage, L.s_buf) : nullptr;
    if (!data || !PyArray_CheckExact(data) || !buf || !PyArray_Check(buf)) Py_RETURN_NONE;
    const Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd != PyTuple_GET_SIZE(stride) || nd > NPY_MAXDIMS) Py_RETURN_NONE;
    PyArray_Descr *descr = PyArray_DESCR(reinterpret_cast<PyArrayObject *>(data));
    const Py_ssize_t isz = PyDataType_ELSIZE(descr);
    const Py_ssize_t offset = PyLong_AsSsize_t(off);
    const Py_ssize_t base_start = PyLong_AsSsize_t(slot(storage, L.s_start));
    if ((offset == -1 || base_start == -1) && PyErr_Occurred()) return nullptr;
    if (offset < 0 || isz <= 0) Py_RETURN_NONE;
    npy_intp dims[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    bool empty = false;
    Py_ssize_t extent = 0;  // bytes past the first element's start that the view reaches
    for (Py_ssize_t i = 0; i < nd; ++i) {
        const Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        const Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(stride, i));
        if ((d == -1 || s == -1) && PyErr_Occurred()) {
            PyErr_Clear();  // not ints: Python's make_view explains
            Py_RETURN_NONE;
        }
        if (d < 0 || s < 0) Py_RETURN_NONE;
        dims[i] = d;
        strides[i] = s * isz;
        empty |= d == 0;
        if (d > 0) extent += (d - 1) * s * isz;
    }
    Py_ssize_t start = base_start + offset * isz;
    const Py_ssize_t nbytes = PyArray_NBYTES(reinterpret_cast<PyArrayObject *>(buf));
    const Py_ssize_t own = PyLong_AsSsize_t(slot(storage, L.s_nbytes));
    if (own == -1 && PyErr_Occurred()) return nullptr;
    if (empty) {
        if (start > nbytes) start = 0;  // no element is read (as _view_array)
    } else if (start + extent + isz > base_start + own || start + extent + isz > nbytes) {
        // past the storage (small storages share a slab, which numpy's constructor cannot
        // tell): Python's make_view decides (numpy raises past the buffer)
        Py_RETURN_NONE;
    }
    auto *b = reinterpret_cast<PyArrayObject *>(buf);
    Py_INCREF(descr);  // PyArray_NewFromDescr steals it
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, static_cast<int>(nd), dims, strides,
                                         PyArray_BYTES(b) + start,
                                         PyArray_ISWRITEABLE(b) ? NPY_ARRAY_WRITEABLE : 0, nullptr);
    if (!arr) return nullptr;
    Py_INCREF(buf);
    if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject *>(arr), buf) < 0) {  // steals buf
        Py_DECREF(arr);
        return nullptr;
    }
    return wrap_view(src, arr, shape, stride, off, offset != 0);
}

PyMethodDef make_view_defs[] = {
    {"make_view", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(make_view)),
     METH_FASTCALL,
     "make_view(src, shape, stride, offset): a view of a CPU tensor (a reshape or permutation "
     "of a CUDA one), or None where Python "
     "makes it (twin: tensorplay._tensor.make_view)"},
    {nullptr, nullptr, 0, nullptr},
};

// ---- FastOp: the fast path of one pointwise op ----------------------------------------

struct FastOp {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;      // __name__, __doc__, __wrapped__ ... (so inspect and pickle work)
    PyObject *fallback;  // the Python function: the full semantics
    PyObject *ufunc;     // numpy ufunc
    PyObject *table;     // dtype -> (out dtype, numpy descr, is floating)
    PyObject *row;       // the op-table row (for autograd recording)
    PyObject *record;    // _dispatch._fast_record(row, targs, result)
    PyObject *mode_call; // overrides.mode_call(public, fallback, args) or None
    PyObject *pub;       // the function a function mode sees (NULL: this object)
    int nin;             // 1 or 2 tensor inputs
};

// Python numbers the fast path passes to numpy: the bound of _dispatch._LIMIT.
constexpr double NUMBER_LIMIT = 9.2e18;

PyObject *const NOT_FAST = Py_Ellipsis;  // a borrowed sentinel: "take the Python function"

// The result of the fast path, NOT_FAST (borrowed) or NULL with an exception set.
PyObject *fast(FastOp *op, PyObject *const *args) {
    PyObject *a = args[0];
    if (Py_TYPE(a) != L.tensor || slot(a, L.t_device) != L.cpu) return NOT_FAST;
    PyObject *adt = slot(a, L.t_dtype);
    PyObject *entry = adt ? PyDict_GetItemWithError(op->table, adt) : nullptr;  // borrowed
    if (!entry) return PyErr_Occurred() ? nullptr : NOT_FAST;
    PyObject *odt = PyTuple_GET_ITEM(entry, 0);
    auto *descr = reinterpret_cast<PyArray_Descr *>(PyTuple_GET_ITEM(entry, 1));
    PyObject *x = slot(a, L.t_data), *shape = slot(a, L.t_shape);
    PyObject *other = nullptr;  // the second ufunc operand
    PyObject *b = op->nin == 2 ? args[1] : nullptr;
    if (b) {
        if (Py_TYPE(b) == L.tensor) {
            if (slot(b, L.t_device) != L.cpu || slot(b, L.t_dtype) != adt) return NOT_FAST;
            PyObject *bshape = slot(b, L.t_shape);
            if (bshape != shape) {  // broadcasting is the general path's job
                int eq = PyObject_RichCompareBool(bshape, shape, Py_EQ);
                if (eq <= 0) return eq < 0 ? nullptr : NOT_FAST;
            }
            other = slot(b, L.t_data);
        } else if ((PyFloat_CheckExact(b) || PyLong_CheckExact(b)) &&
                   PyTuple_GET_ITEM(entry, 2) == Py_True) {
            // a Python number keeps a floating tensor's dtype; one past _dispatch._LIMIT
            // (or NaN) takes the Python path, which raises past int64 and quietly
            // turns floats past float32's range into inf
            double v;
            if (PyFloat_CheckExact(b)) {
                v = PyFloat_AS_DOUBLE(b);
            } else {
                int overflow;
                long long n = PyLong_AsLongLongAndOverflow(b, &overflow);
                if (n == -1 && PyErr_Occurred()) return nullptr;
                if (overflow) return NOT_FAST;
                v = static_cast<double>(n);
            }
            if (!(v > -NUMBER_LIMIT && v < NUMBER_LIMIT)) return NOT_FAST;
            other = b;
        } else {
            return NOT_FAST;
        }
    }
    if (!x || !PyArray_Check(x)) return NOT_FAST;
    PyObject *buf;
    Py_ssize_t start;
    PyObject *r = aligned_like(reinterpret_cast<PyArrayObject *>(x), descr, &buf, &start);
    if (!r) return nullptr;
    // uf(x, [other,] out=r): numpy deprecates a positional out for some ufuncs (maximum)
    PyObject *call[3] = {x, other ? other : r, r};
    PyObject *done = PyObject_Vectorcall(op->ufunc, call, other ? 2 : 1, L.out_kwnames);
    if (!done) {
        Py_DECREF(r);
        Py_DECREF(buf);
        return nullptr;
    }
    Py_DECREF(done);
    PyObject *t = wrap(r, buf, start, shape, odt);
    if (!t) return nullptr;
    int rg = requires_grad(a);
    if (rg == 0 && b && Py_TYPE(b) == L.tensor) rg = requires_grad(b);
    if (rg == 0) return t;
    if (rg < 0) {
        Py_DECREF(t);
        return nullptr;
    }
    PyObject *targs = b ? PyTuple_Pack(2, a, b) : PyTuple_Pack(1, a);
    PyObject *rec = targs ? PyObject_CallFunctionObjArgs(op->record, op->row, targs, t, nullptr)
                          : nullptr;
    Py_XDECREF(targs);
    Py_DECREF(t);
    return rec;
}

// Arguments no __tensorplay_function__ can hide behind: exact Tensors and Python numbers.
inline bool plain_args(PyObject *const *args, int n) {
    for (int i = 0; i < n; ++i) {
        PyObject *x = args[i];
        if (Py_TYPE(x) != L.tensor && !PyFloat_CheckExact(x) && !PyLong_CheckExact(x))
            return false;
    }
    return true;
}

PyObject *fastop_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames) {
    auto *op = reinterpret_cast<FastOp *>(self);
    if (!kwnames && PyVectorcall_NARGS(nargsf) == op->nin) {
        if (gate_plain()) {
            PyObject *r = fast(op, args);
            if (r != NOT_FAST) return r;
        } else if (op->mode_call != Py_None && plain_args(args, op->nin)) {
            // A layer is active: function modes come first (twin: _dispatch.call ->
            // overrides.dispatch); mode_call hands anything else to the fallback.
            PyObject *targs = op->nin == 2 ? PyTuple_Pack(2, args[0], args[1])
                                           : PyTuple_Pack(1, args[0]);
            if (!targs) return nullptr;
            PyObject *pub = op->pub ? op->pub : self;
            PyObject *r =
                PyObject_CallFunctionObjArgs(op->mode_call, pub, op->fallback, targs, nullptr);
            Py_DECREF(targs);
            return r;
        }
    }
    return PyObject_Vectorcall(op->fallback, args, nargsf, kwnames);
}

int fastop_traverse(PyObject *self, visitproc visit, void *arg) {
    auto *op = reinterpret_cast<FastOp *>(self);
    Py_VISIT(op->dict);
    Py_VISIT(op->fallback);
    Py_VISIT(op->ufunc);
    Py_VISIT(op->table);
    Py_VISIT(op->row);
    Py_VISIT(op->record);
    Py_VISIT(op->mode_call);
    Py_VISIT(op->pub);
    return 0;
}

int fastop_clear(PyObject *self) {
    auto *op = reinterpret_cast<FastOp *>(self);
    Py_CLEAR(op->dict);
    Py_CLEAR(op->fallback);
    Py_CLEAR(op->ufunc);
    Py_CLEAR(op->table);
    Py_CLEAR(op->row);
    Py_CLEAR(op->record);
    Py_CLEAR(op->mode_call);
    Py_CLEAR(op->pub);
    return 0;
}

void fastop_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    fastop_clear(self);
    Py_TYPE(self)->tp_free(self);
}

PyObject *fastop_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static const char *kw[] = {"fallback", "ufunc",     "table", "row", "record",
                               "nin",      "mode_call", "public", nullptr};
    PyObject *fallback, *ufunc, *table, *row, *record, *mode_call = Py_None, *pub = nullptr;
    int nin;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OOi|OO:FastOp", const_cast<char **>(kw),
                                     &fallback, &ufunc, &PyDict_Type, &table, &row, &record,
                                     &nin, &mode_call, &pub))
        return nullptr;
    if (pub == Py_None) pub = nullptr;
    if (nin != 1 && nin != 2) {
        PyErr_Format(PyExc_ValueError, "FastOp(nin=%d): nin must be 1 or 2", nin);
        return nullptr;
    }
    if (!L.ready) {
        PyErr_SetString(PyExc_RuntimeError, "tensorplay._C.init() has not been called");
        return nullptr;
    }
    // Validate the table once so the hot path can index its tuples blindly.
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(table, &pos, &key, &value)) {
        if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != 3 ||
            !PyArray_DescrCheck(PyTuple_GET_ITEM(value, 1))) {
            PyErr_SetString(PyExc_TypeError,
                            "FastOp(table=): values must be (dtype, numpy.dtype, bool) tuples");
            return nullptr;
        }
    }
    auto *op = reinterpret_cast<FastOp *>(type->tp_alloc(type, 0));
    if (!op) return nullptr;
    op->vectorcall = fastop_vectorcall;
    op->dict = PyDict_New();
    Py_INCREF(fallback);
    op->fallback = fallback;
    Py_INCREF(ufunc);
    op->ufunc = ufunc;
    Py_INCREF(table);
    op->table = table;
    Py_INCREF(row);
    op->row = row;
    Py_INCREF(record);
    op->record = record;
    Py_INCREF(mode_call);
    op->mode_call = mode_call;
    Py_XINCREF(pub);
    op->pub = pub;
    op->nin = nin;
    if (!op->dict) {
        Py_DECREF(op);
        return nullptr;
    }
    return reinterpret_cast<PyObject *>(op);
}

// A FastOp stored on a class behaves like a function: it binds to the instance.
PyObject *fastop_descr_get(PyObject *self, PyObject *obj, PyObject *) {
    if (!obj || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

PyObject *fastop_reduce(PyObject *self, PyObject *) {
    // Pickle by reference, like a function: "tensorplay.<name>".
    return PyObject_GetAttrString(self, "__qualname__");
}

PyObject *fastop_repr(PyObject *self) {
    PyObject *name = PyObject_GetAttrString(self, "__qualname__");
    if (!name) {
        PyErr_Clear();
        return PyUnicode_FromString("<tensorplay op>");
    }
    PyObject *r = PyUnicode_FromFormat("<tensorplay op %U (native fast path)>", name);
    Py_DECREF(name);
    return r;
}

PyMethodDef fastop_methods[] = {
    {"__reduce__", fastop_reduce, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef fastop_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(FastOp, dict), READONLY, nullptr},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastOp, vectorcall), READONLY, nullptr},
    {"fallback", T_OBJECT, offsetof(FastOp, fallback), READONLY,
     "the Python function with the op's full semantics"},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot fastop_slots[] = {
    {Py_tp_new, reinterpret_cast<void *>(fastop_new)},
    {Py_tp_dealloc, reinterpret_cast<void *>(fastop_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void *>(fastop_traverse)},
    {Py_tp_clear, reinterpret_cast<void *>(fastop_clear)},
    {Py_tp_call, reinterpret_cast<void *>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void *>(fastop_descr_get)},
    {Py_tp_repr, reinterpret_cast<void *>(fastop_repr)},
    {Py_tp_methods, fastop_methods},
    {Py_tp_members, fastop_members},
    {Py_tp_doc, const_cast<char *>("The native fast path of a TensorPlay pointwise op; "
                                   "other calls go to .fallback.")},
    {0, nullptr},
};

PyType_Spec fastop_spec = {
    "tensorplay._C.FastOp",
    sizeof(FastOp),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
        Py_TPFLAGS_METHOD_DESCRIPTOR,
    fastop_slots,
};

#include "plain_call.h"

// ---- scans over an op's inputs (twins in tensorplay._native) ----------------------------

// twin: tensorplay._native.any_requires_grad. Items may be lists/tuples of tensors (cat).
int scan_requires_grad(PyObject *seq, int depth) {
    Py_ssize_t n = PyTuple_Check(seq) ? PyTuple_GET_SIZE(seq) : PyList_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *x = PyTuple_Check(seq) ? PyTuple_GET_ITEM(seq, i) : PyList_GET_ITEM(seq, i);
        int r = 0;
        if (PyObject_TypeCheck(x, L.tensor))
            r = requires_grad(x);
        else if (depth == 0 && (PyList_Check(x) || PyTuple_Check(x)))
            r = scan_requires_grad(x, 1);
        if (r) return r;  // 1, or -1 with an exception set
    }
    return 0;
}

bool any_requires_grad(py::handle items) {
    if (!PyList_Check(items.ptr()) && !PyTuple_Check(items.ptr()))
        throw py::type_error("any_requires_grad(items): items must be a list or tuple");
    int r = scan_requires_grad(items.ptr(), 0);
    if (r < 0) throw py::error_already_set();
    return r == 1;
}

// ---- a new backward node's inputs (twin: tensorplay.autograd.graph.input_edges) -------
//
// Every recording (op-table rows, autograd.Function, custom ops) reads its inputs' edges
// and metadata in this one pass. The rare cases stay in Python: a view whose memory was
// written since its history was recorded (_view_version set) goes through
// graph.grad_fn_of, and a leaf's AccumulateGrad comes from graph.accumulator.

struct EdgeHooks {
    PyObject *grad_fn_of = nullptr, *accumulator = nullptr;
    PyObject *view_version = nullptr, *grad_fn = nullptr, *output_nr = nullptr;
    PyObject *no_edge = nullptr, *zero = nullptr;
};
EdgeHooks E;

void init_edges(py::object grad_fn_of, py::object accumulator) {
    if (!PyCallable_Check(grad_fn_of.ptr()) || !PyCallable_Check(accumulator.ptr()))
        throw py::type_error("tensorplay._C.init_edges(grad_fn_of, accumulator): expected callables");
    if (E.grad_fn_of) throw py::value_error("tensorplay._C.init_edges() was already called");
    E.view_version = PyUnicode_InternFromString("_view_version");
    E.grad_fn = PyUnicode_InternFromString("grad_fn");
    E.output_nr = PyUnicode_InternFromString("_output_nr");
    E.zero = PyLong_FromLong(0);
    E.no_edge = PyTuple_Pack(2, Py_None, E.zero);
    E.accumulator = accumulator.release().ptr();  // kept for the life of the process
    E.grad_fn_of = grad_fn_of.release().ptr();
}

// A new reference to tensor x's edge (node, output_nr); NULL with an exception set.
PyObject *edge_of(PyObject *x) {
    PyObject *seen = PyObject_GetAttr(x, E.view_version);
    if (!seen) return nullptr;
    PyObject *fn = seen == Py_None ? PyObject_GetAttr(x, E.grad_fn)
                                   : PyObject_CallOneArg(E.grad_fn_of, x);
    Py_DECREF(seen);
    if (!fn) return nullptr;
    if (fn != Py_None) {
        PyObject *nr = PyObject_GetAttr(x, E.output_nr);
        PyObject *edge = nr ? PyTuple_Pack(2, fn, nr) : nullptr;
        Py_XDECREF(nr);
        Py_DECREF(fn);
        return edge;
    }
    Py_DECREF(fn);
    int r = requires_grad(x);
    if (r < 0) return nullptr;
    if (!r) return Py_NewRef(E.no_edge);
    PyObject *acc = PyObject_CallOneArg(E.accumulator, x);
    if (!acc) return nullptr;
    PyObject *edge = PyTuple_Pack(2, acc, E.zero);
    Py_DECREF(acc);
    return edge;
}

// (edges, meta) of the tensors in list or tuple ``seq``: a new reference, or NULL with an
// exception set.
PyObject *input_edges_raw(PyObject *seq) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *edges = PyTuple_New(n), *meta = PyList_New(n);
    if (!edges || !meta) goto fail;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(x, L.tensor)) {
            PyTuple_SET_ITEM(edges, i, Py_NewRef(E.no_edge));
            PyList_SET_ITEM(meta, i, Py_NewRef(Py_None));
            continue;
        }
        PyObject *edge = edge_of(x);
        if (!edge) goto fail;
        PyTuple_SET_ITEM(edges, i, edge);
        PyObject *m = PyTuple_Pack(2, slot(x, L.t_shape), slot(x, L.t_dtype));
        if (!m) goto fail;
        PyList_SET_ITEM(meta, i, m);
    }
    {
        PyObject *pair = PyTuple_Pack(2, edges, meta);
        Py_DECREF(edges);
        Py_DECREF(meta);
        return pair;
    }
fail:
    Py_XDECREF(edges);
    Py_XDECREF(meta);
    return nullptr;
}

py::tuple input_edges(py::handle items) {
    if (!E.grad_fn_of || !L.ready)
        throw py::value_error("tensorplay._C.input_edges: init() and init_edges() come first");
    if (!PyList_Check(items.ptr()) && !PyTuple_Check(items.ptr()))
        throw py::type_error("input_edges(items): items must be a list or tuple");
    PyObject *pair = input_edges_raw(items.ptr());
    if (!pair) throw py::error_already_set();
    return py::reinterpret_steal<py::tuple>(pair);
}

#include "record.h"

// ---- the backward pass (twins: tensorplay.autograd.engine) ------------------------------
//
// topological_order: the nodes reachable from the roots, each before the nodes it feeds
// from (twin: engine._topological_order). backward_loop: engine._loop without
// autograd.grad's capture. A node's apply, a leaf's accumulation and a node with hooks
// (engine._step) stay Python calls; the loop, its bookkeeping and the routing of gradients
// into the buffers of the next nodes are here.

struct EngineHooks {
    PyObject *accumulate_type = nullptr, *accumulate = nullptr, *step = nullptr;
    PyObject *next_functions = nullptr, *n_outputs = nullptr, *apply = nullptr,
             *release = nullptr;
    PyObject *hook_names[4] = {nullptr, nullptr, nullptr, nullptr};
};
EngineHooks G;

void init_engine(py::object accumulate_type, py::object accumulate, py::object step) {
    if (!PyType_Check(accumulate_type.ptr()) || !PyCallable_Check(accumulate.ptr()) ||
        !PyCallable_Check(step.ptr()))
        throw py::type_error(
            "tensorplay._C.init_engine(accumulate_type, accumulate, step): a class and two "
            "callables");
    if (G.step) throw py::value_error("tensorplay._C.init_engine() was already called");
    G.next_functions = PyUnicode_InternFromString("next_functions");
    G.n_outputs = PyUnicode_InternFromString("n_outputs");
    G.apply = PyUnicode_InternFromString("apply");
    G.release = PyUnicode_InternFromString("release");
    const char *hooks[4] = {"_tensor_hooks", "_retained", "_prehooks", "_hooks"};
    for (int i = 0; i < 4; ++i) G.hook_names[i] = PyUnicode_InternFromString(hooks[i]);
    G.accumulate_type = accumulate_type.release().ptr();  // kept for the life of the process
    G.accumulate = accumulate.release().ptr();
    G.step = step.release().ptr();
}

void need_engine() {
    if (!G.step) throw py::value_error("tensorplay._C: init_engine() comes first");
}

// A node's edges as a new reference to a tuple or list (PySequence_Fast); NULL on error.
PyObject *edges_of(PyObject *node) {
    PyObject *nf = PyObject_GetAttr(node, G.next_functions);
    if (!nf) return nullptr;
    PyObject *seq = PySequence_Fast(nf, "next_functions must be a sequence of (node, nr) pairs");
    Py_DECREF(nf);
    return seq;
}

// The child node of an edge (borrowed) and its output number; false with an exception set.
bool unpack_edge(PyObject *edge, PyObject **child, Py_ssize_t *nr) {
    if (!PyTuple_Check(edge) || PyTuple_GET_SIZE(edge) != 2) {
        PyErr_SetString(PyExc_TypeError, "next_functions must hold (node, output_nr) tuples");
        return false;
    }
    *child = PyTuple_GET_ITEM(edge, 0);
    *nr = *child == Py_None ? 0 : PyLong_AsSsize_t(PyTuple_GET_ITEM(edge, 1));
    return !(*nr == -1 && PyErr_Occurred());
}

py::list topological_order(py::handle roots) {
    need_engine();
    py::object seq = py::reinterpret_steal<py::object>(
        PySequence_Fast(roots.ptr(), "topological_order(roots): a list of nodes"));
    if (!seq) throw py::error_already_set();
    struct Frame {
        PyObject *node;   // borrowed (the graph keeps it alive)
        PyObject *edges;  // owned
        Py_ssize_t next;
    };
    std::unordered_set<PyObject *> seen;
    std::vector<PyObject *> post;
    std::vector<Frame> stack;
    auto fail = [&]() {
        for (auto &f : stack) Py_DECREF(f.edges);
        throw py::error_already_set();
    };
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    for (Py_ssize_t r = 0; r < n; ++r) {
        PyObject *root = PySequence_Fast_GET_ITEM(seq.ptr(), r);
        if (root == Py_None || !seen.insert(root).second) continue;
        PyObject *edges = edges_of(root);
        if (!edges) fail();
        stack.push_back({root, edges, 0});
        while (!stack.empty()) {  // iterative DFS: graphs can be deeper than C's stack
            Frame &top = stack.back();
            if (top.next < PySequence_Fast_GET_SIZE(top.edges)) {
                PyObject *edge = PySequence_Fast_GET_ITEM(top.edges, top.next++);
                PyObject *child;
                Py_ssize_t nr;
                if (!unpack_edge(edge, &child, &nr)) fail();
                if (child == Py_None || !seen.insert(child).second) continue;
                PyObject *child_edges = edges_of(child);
                if (!child_edges) fail();
                stack.push_back({child, child_edges, 0});  // (top is invalid from here)
            } else {
                post.push_back(top.node);
                Py_DECREF(top.edges);
                stack.pop_back();
            }
        }
    }
    py::list order(post.size());
    for (size_t i = 0; i < post.size(); ++i)
        PyList_SET_ITEM(order.ptr(), i, Py_NewRef(post[post.size() - 1 - i]));
    return order;
}

// Does the node have a hook of any kind (its class defaults are empty)? -1 on error.
int has_hooks(PyObject *node) {
    for (PyObject *name : G.hook_names) {
        PyObject *v = PyObject_GetAttr(node, name);
        if (!v) return -1;
        int t = PyObject_IsTrue(v);
        Py_DECREF(v);
        if (t) return t;
    }
    return 0;
}

// buffers[child][nr] += g (engine._add: None is nothing). false with an exception set.
bool route(PyObject *buffers, PyObject *child, Py_ssize_t nr, PyObject *g) {
    PyObject *buf = PyDict_GetItemWithError(buffers, child);  // borrowed
    if (!buf) {
        if (PyErr_Occurred()) return false;
        PyObject *count = PyObject_GetAttr(child, G.n_outputs);
        if (!count) return false;
        Py_ssize_t n = PyLong_AsSsize_t(count);
        Py_DECREF(count);
        if (n == -1 && PyErr_Occurred()) return false;
        buf = PyList_New(n);
        if (!buf) return false;
        for (Py_ssize_t i = 0; i < n; ++i) PyList_SET_ITEM(buf, i, Py_NewRef(Py_None));
        int err = PyDict_SetItem(buffers, child, buf);
        Py_DECREF(buf);  // the dict holds it
        if (err) return false;
    }
    if (!PyList_Check(buf) || nr < 0 || nr >= PyList_GET_SIZE(buf)) {
        PyErr_Format(PyExc_IndexError, "gradient for output %zd of a node with %zd outputs", nr,
                     PyList_Check(buf) ? PyList_GET_SIZE(buf) : (Py_ssize_t)-1);
        return false;
    }
    PyObject *old = PyList_GET_ITEM(buf, nr);
    PyObject *sum = old == Py_None ? Py_NewRef(g) : PyNumber_Add(old, g);
    if (!sum) return false;
    PyList_SetItem(buf, nr, sum);  // steals sum, drops old
    return true;
}

void backward_loop(py::handle order, py::handle buffers, bool retain_graph, bool direct) {
    need_engine();
    if (!PyList_Check(order.ptr()) || !PyDict_Check(buffers.ptr()))
        throw py::type_error("backward_loop(order, buffers, ...): a list and a dict");
    PyObject *bufs = buffers.ptr();
    py::list nodes = py::reinterpret_borrow<py::list>(order);  // keeps every node alive
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(nodes.ptr()); ++k) {
        PyObject *node = PyList_GET_ITEM(nodes.ptr(), k);
        PyObject *found = PyDict_GetItemWithError(bufs, node);
        if (!found) {
            if (PyErr_Occurred()) throw py::error_already_set();
            continue;
        }
        py::object grads = py::reinterpret_borrow<py::object>(found);
        if (PyDict_DelItem(bufs, node)) throw py::error_already_set();
        if (!PyList_Check(grads.ptr())) throw py::type_error("gradient buffers must be lists");
        bool any = false;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(grads.ptr()) && !any; ++i)
            any = PyList_GET_ITEM(grads.ptr(), i) != Py_None;
        if (!any) continue;  // no gradient reached this node
        if (Py_TYPE(node) == reinterpret_cast<PyTypeObject *>(G.accumulate_type)) {
            PyObject *r = PyObject_CallFunctionObjArgs(G.accumulate, node, grads.ptr(), nullptr);
            if (!r) throw py::error_already_set();
            Py_DECREF(r);
            continue;
        }
        int hooked = direct ? has_hooks(node) : 1;
        if (hooked < 0) throw py::error_already_set();
        py::object grad_inputs;
        if (hooked) {
            grad_inputs = py::reinterpret_steal<py::object>(PyObject_CallFunctionObjArgs(
                G.step, node, grads.ptr(), retain_graph ? Py_True : Py_False, nullptr));
        } else {
            grad_inputs = py::reinterpret_steal<py::object>(
                PyObject_CallMethodOneArg(node, G.apply, grads.ptr()));
            if (grad_inputs && !retain_graph) {
                PyObject *r = PyObject_CallMethodNoArgs(node, G.release);
                if (!r) throw py::error_already_set();
                Py_DECREF(r);
            }
        }
        if (!grad_inputs) throw py::error_already_set();
        py::object edges = py::reinterpret_steal<py::object>(edges_of(node));
        if (!edges) throw py::error_already_set();
        py::object gi = py::reinterpret_steal<py::object>(
            PySequence_Fast(grad_inputs.ptr(), "a node's apply must return a sequence"));
        if (!gi) throw py::error_already_set();
        Py_ssize_t n = std::min(PySequence_Fast_GET_SIZE(edges.ptr()),
                                PySequence_Fast_GET_SIZE(gi.ptr()));
        for (Py_ssize_t i = 0; i < n; ++i) {
            PyObject *child, *g = PySequence_Fast_GET_ITEM(gi.ptr(), i);
            Py_ssize_t nr;
            if (!unpack_edge(PySequence_Fast_GET_ITEM(edges.ptr(), i), &child, &nr))
                throw py::error_already_set();
            if (child == Py_None || g == Py_None) continue;
            if (!route(bufs, child, nr, g)) throw py::error_already_set();
        }
    }
}

// ---- the DLPack C exchange table ------------------------------------------------------
//
// tvm-ffi reads `Tensor.__dlpack_c_exchange_api__` (a capsule holding this table) and then
// converts TensorPlay tensors with these C functions. CPU tensors with a numpy dtype are
// described straight from the numpy array in the tensor's `_data` slot; CUDA tensors and
// ml_dtypes dtypes (bfloat16) go through the tensor's own __dlpack__ (correct, slower).
// DLPack has a read-only flag that kernels ignore, so read-only and misaligned tensors are
// refused here with a BufferError naming the fix.

struct Exchange {
    PyObject *from_capsule = nullptr;    // tensorplay._native._from_capsule
    PyObject *stream_ptr = nullptr;      // tensorplay._native._stream_ptr(device_id) -> int
    PyObject *dunder_kwargs = nullptr;   // {"max_version": (1, 3)}
    tpdl::ExchangeAPI api{};
    PyObject *capsule = nullptr;
};
Exchange X;

struct Block {  // one allocation: the managed tensor, then shape and strides
    tpdl::ManagedTensorVersioned managed;
    int64_t dims[1];
};

void delete_block(tpdl::ManagedTensorVersioned *self) {
    // a consumer may release the tensor on a thread that does not hold the GIL
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(static_cast<PyObject *>(self->manager_ctx));
    PyGILState_Release(gil);
    std::free(self);
}

bool dl_type_of(PyArray_Descr *d, tpdl::DataType *out) {
    out->lanes = 1;
    out->bits = static_cast<uint8_t>(PyDataType_ELSIZE(d) * 8);
    switch (d->type_num) {
        case NPY_BOOL: out->code = tpdl::kBool; return true;
        case NPY_BYTE: case NPY_SHORT: case NPY_INT: case NPY_LONG: case NPY_LONGLONG:
            out->code = tpdl::kInt; return true;
        case NPY_UBYTE: case NPY_USHORT: case NPY_UINT: case NPY_ULONG: case NPY_ULONGLONG:
            out->code = tpdl::kUInt; return true;
        case NPY_HALF: case NPY_FLOAT: case NPY_DOUBLE: out->code = tpdl::kFloat; return true;
        case NPY_CFLOAT: case NPY_CDOUBLE: out->code = tpdl::kComplex; return true;
        default: return false;  // ml_dtypes (bfloat16, float8): the __dlpack__ path
    }
}

int via_dunder_dlpack(PyObject *obj, tpdl::ManagedTensorVersioned **out) {
    PyObject *method = PyObject_GetAttrString(obj, "__dlpack__");
    PyObject *empty = method ? PyTuple_New(0) : nullptr;
    PyObject *cap = empty ? PyObject_Call(method, empty, X.dunder_kwargs) : nullptr;
    Py_XDECREF(method);
    Py_XDECREF(empty);
    if (!cap) return -1;
    void *ptr = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (ptr) PyCapsule_SetName(cap, "used_dltensor_versioned");  // ours to delete now
    Py_DECREF(cap);
    if (!ptr) return -1;
    *out = static_cast<tpdl::ManagedTensorVersioned *>(ptr);
    return 0;
}

int from_py_object(void *py_obj, tpdl::ManagedTensorVersioned **out) {
    auto *obj = static_cast<PyObject *>(py_obj);
    PyObject *data = PyObject_TypeCheck(obj, L.tensor) ? slot(obj, L.t_data) : nullptr;
    if (!data || data == Py_None) {
        PyErr_SetString(PyExc_BufferError,
                        data ? "a meta tensor holds no data: pass a cpu or cuda tensor"
                             : "expected a tensorplay.Tensor");
        return -1;
    }
    if (!PyArray_Check(data)) return via_dunder_dlpack(obj, out);  // CUDA (CuPy)
    auto *arr = reinterpret_cast<PyArrayObject *>(data);
    tpdl::DataType dtype;
    if (!dl_type_of(PyArray_DESCR(arr), &dtype)) return via_dunder_dlpack(obj, out);
    if (!PyArray_ISWRITEABLE(arr)) {
        PyErr_SetString(PyExc_BufferError,
                        "a read-only tensor cannot be passed to a kernel (a kernel can write "
                        "through any tensor it gets); pass a writable copy: x.clone()");
        return -1;
    }
    if (!PyArray_ISALIGNED(arr)) {
        PyErr_SetString(PyExc_BufferError,
                        "the tensor's data address is not a multiple of its element size; "
                        "pass an aligned copy: x.clone()");
        return -1;
    }
    const int nd = PyArray_NDIM(arr);
    const size_t bytes = sizeof(Block) + sizeof(int64_t) * (2 * size_t(nd > 0 ? nd : 1) - 1);
    auto *block = static_cast<Block *>(std::malloc(bytes));
    if (!block) {
        PyErr_NoMemory();
        return -1;
    }
    std::memset(&block->managed, 0, sizeof(block->managed));
    const npy_intp *shape = PyArray_DIMS(arr), *strides = PyArray_STRIDES(arr);
    const npy_intp itemsize = PyArray_ITEMSIZE(arr);
    for (int i = 0; i < nd; ++i) {
        block->dims[i] = shape[i];
        block->dims[nd + i] = strides[i] / itemsize;
    }
    tpdl::ManagedTensorVersioned &m = block->managed;
    m.version = {tpdl::kMajor, tpdl::kMinor};
    Py_INCREF(data);
    m.manager_ctx = data;  // keeps the memory alive until the consumer deletes it
    m.deleter = delete_block;
    m.dl_tensor.data = PyArray_DATA(arr);
    m.dl_tensor.device = {tpdl::kCPU, 0};
    m.dl_tensor.ndim = nd;
    m.dl_tensor.dtype = dtype;
    m.dl_tensor.shape = block->dims;
    m.dl_tensor.strides = block->dims + nd;
    *out = &m;
    return 0;
}

void unconsumed_capsule(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        auto *m = static_cast<tpdl::ManagedTensorVersioned *>(
            PyCapsule_GetPointer(cap, "dltensor_versioned"));
        if (m->deleter) m->deleter(m);
    }
}

int to_py_object(tpdl::ManagedTensorVersioned *tensor, void **out) {
    PyObject *cap = PyCapsule_New(tensor, "dltensor_versioned", unconsumed_capsule);
    if (!cap) return -1;
    PyObject *result = PyObject_CallOneArg(X.from_capsule, cap);
    Py_DECREF(cap);
    if (!result) return -1;
    *out = result;
    return 0;
}

int current_work_stream(tpdl::DeviceType device_type, int32_t device_id, void **out) {
    *out = nullptr;
    if (device_type != tpdl::kCUDA) return 0;
    PyObject *ptr = PyObject_CallFunction(X.stream_ptr, "i", device_id);
    if (!ptr) return -1;
    *out = PyLong_AsVoidPtr(ptr);
    Py_DECREF(ptr);
    return PyErr_Occurred() ? -1 : 0;
}

py::object exchange_api(py::object from_capsule, py::object stream_ptr) {
    if (!L.ready) throw py::value_error("tensorplay._C.init() has not been called");
    if (X.capsule) return py::reinterpret_borrow<py::object>(X.capsule);
    X.from_capsule = from_capsule.release().ptr();
    X.stream_ptr = stream_ptr.release().ptr();
    X.dunder_kwargs = Py_BuildValue("{s:(ii)}", "max_version", 1, 3);
    X.api.header.version = {tpdl::kMajor, tpdl::kMinor};
    X.api.header.prev_api = nullptr;
    X.api.managed_tensor_allocator = nullptr;  // kernels allocate through tvm-ffi's env allocator
    X.api.managed_tensor_from_py_object_no_sync = from_py_object;
    X.api.managed_tensor_to_py_object_no_sync = to_py_object;
    X.api.dltensor_from_py_object_no_sync = nullptr;
    X.api.current_work_stream = current_work_stream;
    X.capsule = PyCapsule_New(&X.api, "dlpack_exchange_api", nullptr);  // lives forever
    if (!X.capsule) throw py::error_already_set();
    return py::reinterpret_borrow<py::object>(X.capsule);
}

void watch_gate(py::object state) {
    Py_ssize_t off = slot_offset(Py_TYPE(state.ptr()), "plain");
    PyObject *v = slot(state.ptr(), off);
    if (v != Py_True && v != Py_False)
        throw py::type_error("watch_gate(state): state.plain must be set to a bool");
    Py_XDECREF(g_state);
    g_state = state.release().ptr();
    g_plain_off = off;
}


// ---- im2col ----------------------------------------------------------------------------------

// The output columns [lo, hi) (of ow) whose input column ix = x0 + ox * sw falls inside a
// row of w elements (im2col's and col2im's walk over one kernel offset).
inline void valid_columns(npy_intp x0, npy_intp w, npy_intp sw, npy_intp ow, npy_intp *lo,
                          npy_intp *hi) {
    npy_intp l = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
    npy_intp h = x0 >= w ? 0 : (w - 1 - x0) / sw + 1;
    *lo = std::min(l, ow);
    *hi = std::max(*lo, std::min(h, ow));
}

// (Plain loops, not std::fill/std::copy, and GCC told not to turn them back into memset
// and memcpy calls: the rows of small images are a few elements long, where a library
// call per row costs more than the copy.)
template <typename T>
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
void im2col_loop(const T *x, T *col, npy_intp n, npy_intp c, npy_intp h, npy_intp w,
                 npy_intp kh, npy_intp kw, npy_intp sh, npy_intp sw, npy_intp dh, npy_intp dw,
                 npy_intp ph, npy_intp pw, npy_intp oh, npy_intp ow) {
    // row (ci, ki, kj), column (b, oy, ox) = x[b, ci, oy * sh - ph + ki * dh, ox * sw - pw + kj * dw]
    for (npy_intp ci = 0; ci < c; ++ci)
        for (npy_intp ki = 0; ki < kh; ++ki)
            for (npy_intp kj = 0; kj < kw; ++kj) {
                // zeros before and after the valid columns, a branch-free copy between (per
                // kernel offset, so small images do not pay a bounds test per element)
                const npy_intp x0 = kj * dw - pw;
                npy_intp lo, hi;
                valid_columns(x0, w, sw, ow, &lo, &hi);
                for (npy_intp b = 0; b < n; ++b) {
                    const T *plane = x + (b * c + ci) * h * w;
                    for (npy_intp oy = 0; oy < oh; ++oy, col += ow) {
                        npy_intp iy = oy * sh - ph + ki * dh;
                        if (iy < 0 || iy >= h) {
                            std::fill(col, col + ow, T(0));
                            continue;
                        }
                        const T *row = plane + iy * w + (lo < hi ? x0 + lo * sw : 0);
                        npy_intp ox = 0;
                        for (; ox < lo; ++ox) col[ox] = T(0);
                        for (; ox < hi; ++ox, row += sw) col[ox] = *row;
                        for (; ox < ow; ++ox) col[ox] = T(0);
                    }
                }
            }
}

struct Bytes16 {
    unsigned long long lo, hi;
    Bytes16(int z = 0) : lo(z), hi(z) {}
};

py::object im2col(py::object xo, npy_intp kh, npy_intp kw, npy_intp sh, npy_intp sw,
                  npy_intp dh, npy_intp dw, npy_intp ph, npy_intp pw, npy_intp oh, npy_intp ow) {
    PyObject *xp = xo.ptr();
    if (!PyArray_Check(xp)) throw py::type_error("im2col(x): x must be a numpy array");
    auto *x = reinterpret_cast<PyArrayObject *>(xp);
    if (PyArray_NDIM(x) != 4 || !PyArray_IS_C_CONTIGUOUS(x))
        throw py::value_error("im2col(x): x must be a C-contiguous (N, C, H, W) array");
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || ph < 0 || pw < 0 ||
        oh < 0 || ow < 0)
        throw py::value_error("im2col(): kernel, stride and dilation must be >= 1, padding "
                              "and output sizes >= 0");
    npy_intp *d = PyArray_DIMS(x);
    npy_intp n = d[0], c = d[1], h = d[2], w = d[3];
    npy_intp dims[2] = {c * kh * kw, n * oh * ow};
    PyArray_Descr *descr = PyArray_DESCR(x);
    Py_INCREF(descr);
    PyObject *out = PyArray_NewFromDescr(&PyArray_Type, descr, 2, dims, nullptr, nullptr, 0,
                                         nullptr);
    if (!out) throw py::error_already_set();
    auto *o = reinterpret_cast<PyArrayObject *>(out);
    const void *src = PyArray_DATA(x);
    void *dst = PyArray_DATA(o);
    npy_intp size = PyArray_ITEMSIZE(x);
    Py_BEGIN_ALLOW_THREADS
    switch (size) {
        case 1: im2col_loop(static_cast<const uint8_t *>(src), static_cast<uint8_t *>(dst), n, c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow); break;
        case 2: im2col_loop(static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst), n, c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow); break;
        case 4: im2col_loop(static_cast<const uint32_t *>(src), static_cast<uint32_t *>(dst), n, c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow); break;
        case 8: im2col_loop(static_cast<const uint64_t *>(src), static_cast<uint64_t *>(dst), n, c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow); break;
        case 16: im2col_loop(static_cast<const Bytes16 *>(src), static_cast<Bytes16 *>(dst), n, c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow); break;
        default: size = 0;
    }
    Py_END_ALLOW_THREADS
    if (size == 0) {
        Py_DECREF(out);
        throw py::type_error("im2col(x): unsupported item size");
    }
    return py::reinterpret_steal<py::object>(out);
}


// ---- col2im: im2col's adjoint --------------------------------------------------------------
// out[b, ci, iy, ix] += col[(ci, ki, kj), (b, oy, ox)] over every window position that reads
// (iy, ix): the columns of a transposed convolution (or of a convolution's input gradient)
// added back into the image, the same walk as im2col_loop with the copy reversed.

template <typename T>
void col2im_loop(const T *col, T *x, npy_intp n, npy_intp c, npy_intp h, npy_intp w,
                 npy_intp kh, npy_intp kw, npy_intp sh, npy_intp sw, npy_intp dh, npy_intp dw,
                 npy_intp ph, npy_intp pw, npy_intp oh, npy_intp ow) {
    for (npy_intp ci = 0; ci < c; ++ci)
        for (npy_intp ki = 0; ki < kh; ++ki)
            for (npy_intp kj = 0; kj < kw; ++kj) {
                const npy_intp x0 = kj * dw - pw;
                npy_intp lo, hi;
                valid_columns(x0, w, sw, ow, &lo, &hi);
                for (npy_intp b = 0; b < n; ++b) {
                    T *plane = x + (b * c + ci) * h * w;
                    for (npy_intp oy = 0; oy < oh; ++oy, col += ow) {
                        const npy_intp iy = oy * sh - ph + ki * dh;
                        if (iy < 0 || iy >= h || lo == hi) continue;
                        T *row = plane + iy * w + x0 + lo * sw;
                        for (npy_intp ox = lo; ox < hi; ++ox, row += sw) *row += col[ox];
                    }
                }
            }
}

// The (N, C, H, W) image whose im2col has adjoint ``cols`` (float32/float64, C-contiguous
// (C*KH*KW, N*OH*OW)); None for other dtypes and layouts (the caller's numpy form).
py::object col2im(py::object co, npy_intp n, npy_intp c, npy_intp h, npy_intp w, npy_intp kh,
                  npy_intp kw, npy_intp sh, npy_intp sw, npy_intp dh, npy_intp dw, npy_intp ph,
                  npy_intp pw, npy_intp oh, npy_intp ow) {
    if (!PyArray_Check(co.ptr())) return py::none();
    auto *cols = reinterpret_cast<PyArrayObject *>(co.ptr());
    const int type = PyArray_TYPE(cols);
    if ((type != NPY_FLOAT32 && type != NPY_FLOAT64) || !PyArray_IS_C_CONTIGUOUS(cols) ||
        !PyArray_ISNOTSWAPPED(cols))
        return py::none();
    if (n < 0 || c < 0 || h < 0 || w < 0 || kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 ||
        dw < 1 || ph < 0 || pw < 0 || oh < 0 || ow < 0)
        throw py::value_error("col2im(): sizes >= 0; kernel, stride and dilation >= 1; padding >= 0");
    if (PyArray_NDIM(cols) != 2 || PyArray_DIM(cols, 0) != c * kh * kw ||
        PyArray_DIM(cols, 1) != n * oh * ow)
        throw py::value_error("col2im(cols): cols must be (C*KH*KW, N*OH*OW)");
    npy_intp dims[4] = {n, c, h, w};
    PyObject *out = PyArray_ZEROS(4, dims, type, 0);
    if (!out) throw py::error_already_set();
    const void *src = PyArray_DATA(cols);
    void *dst = PyArray_DATA(reinterpret_cast<PyArrayObject *>(out));
    Py_BEGIN_ALLOW_THREADS
    if (type == NPY_FLOAT32)
        col2im_loop(static_cast<const float *>(src), static_cast<float *>(dst), n, c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow);
    else
        col2im_loop(static_cast<const double *>(src), static_cast<double *>(dst), n, c, h, w, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow);
    Py_END_ALLOW_THREADS
    return py::reinterpret_steal<py::object>(out);
}


// ---- max pooling -------------------------------------------------------------------------------

// Every window of max pooling in output order: visit(plane, flat argmax in the plane, best).
// As torch's loop: the first maximum wins a tie, a NaN replaces anything (the last NaN of a
// window is the one picked), padding never wins.
template <typename T, typename Visit>
void max_pool_walk(const T *x, npy_intp planes, npy_intp h, npy_intp w, npy_intp kh,
                   npy_intp kw, npy_intp sh, npy_intp sw, npy_intp dh, npy_intp dw, npy_intp ph,
                   npy_intp pw, npy_intp oh, npy_intp ow, Visit &&visit) {
    for (npy_intp p = 0; p < planes; ++p) {
        const T *plane = x + p * h * w;
        for (npy_intp oy = 0; oy < oh; ++oy) {
            npy_intp y0 = oy * sh - ph;
            while (y0 < 0) y0 += dh;  // the first row inside the input
            npy_intp y1 = std::min(oy * sh - ph + (kh - 1) * dh + 1, h);
            for (npy_intp ox = 0; ox < ow; ++ox) {
                npy_intp x0 = ox * sw - pw;
                while (x0 < 0) x0 += dw;
                npy_intp x1 = std::min(ox * sw - pw + (kw - 1) * dw + 1, w);
                T best = -std::numeric_limits<T>::infinity();
                int64_t at = y0 * w + x0;
                for (npy_intp iy = y0; iy < y1; iy += dh)
                    for (npy_intp ix = x0; ix < x1; ix += dw) {
                        T v = plane[iy * w + ix];
                        if (v > best || v != v) {
                            best = v;
                            at = iy * w + ix;
                        }
                    }
                visit(p, at, best);
            }
        }
    }
}

// The checks of max_pool2d and its backward: x a C-contiguous float32/float64 (planes, H, W)
// array, a valid geometry in which every window holds an input position.
int check_pool(PyObject *xp, const char *fn, npy_intp kh, npy_intp kw, npy_intp sh, npy_intp sw,
               npy_intp dh, npy_intp dw, npy_intp ph, npy_intp pw, npy_intp oh, npy_intp ow) {
    if (!PyArray_Check(xp))
        throw py::type_error(std::string(fn) + "(x): x must be a numpy array");
    auto *x = reinterpret_cast<PyArrayObject *>(xp);
    int type = PyArray_TYPE(x);
    if (PyArray_NDIM(x) != 3 || !PyArray_IS_C_CONTIGUOUS(x) ||
        (type != NPY_FLOAT32 && type != NPY_FLOAT64))
        throw py::value_error(std::string(fn) + "(x): x must be a C-contiguous float32/float64 "
                              "(planes, H, W) array");
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || ph < 0 || pw < 0 ||
        oh < 0 || ow < 0)
        throw py::value_error(std::string(fn) + "(): kernel, stride and dilation must be >= 1, "
                              "padding and output sizes >= 0");
    npy_intp h = PyArray_DIM(x, 1), w = PyArray_DIM(x, 2);
    // every window must hold an input position: a padding at most half the kernel (the
    // row checks it as torch does) and output sizes from torch's formula guarantee it
    if (ph > ((kh - 1) * dh + 1) / 2 || pw > ((kw - 1) * dw + 1) / 2 ||
        (oh > 0 && (oh - 1) * sh - ph >= h) || (ow > 0 && (ow - 1) * sw - pw >= w))
        throw py::value_error(std::string(fn) + "(): a window would lie wholly in the padding");
    return type;
}

py::tuple max_pool2d(py::object xo, npy_intp kh, npy_intp kw, npy_intp sh, npy_intp sw,
                     npy_intp dh, npy_intp dw, npy_intp ph, npy_intp pw, npy_intp oh,
                     npy_intp ow) {
    const int type = check_pool(xo.ptr(), "max_pool2d", kh, kw, sh, sw, dh, dw, ph, pw, oh, ow);
    auto *x = reinterpret_cast<PyArrayObject *>(xo.ptr());
    npy_intp planes = PyArray_DIM(x, 0), h = PyArray_DIM(x, 1), w = PyArray_DIM(x, 2);
    npy_intp dims[3] = {planes, oh, ow};
    PyObject *val = PyArray_SimpleNew(3, dims, type);
    if (!val) throw py::error_already_set();
    PyObject *idx = PyArray_SimpleNew(3, dims, NPY_INT64);
    if (!idx) {
        Py_DECREF(val);
        throw py::error_already_set();
    }
    void *v = PyArray_DATA(reinterpret_cast<PyArrayObject *>(val));
    auto *i = static_cast<int64_t *>(PyArray_DATA(reinterpret_cast<PyArrayObject *>(idx)));
    Py_BEGIN_ALLOW_THREADS
    if (type == NPY_FLOAT32) {
        auto *out = static_cast<float *>(v);
        max_pool_walk(static_cast<const float *>(PyArray_DATA(x)), planes, h, w, kh, kw, sh, sw,
                      dh, dw, ph, pw, oh, ow, [&](npy_intp, int64_t at, float best) {
                          *out++ = best;
                          *i++ = at;
                      });
    } else {
        auto *out = static_cast<double *>(v);
        max_pool_walk(static_cast<const double *>(PyArray_DATA(x)), planes, h, w, kh, kw, sh,
                      sw, dh, dw, ph, pw, oh, ow, [&](npy_intp, int64_t at, double best) {
                          *out++ = best;
                          *i++ = at;
                      });
    }
    Py_END_ALLOW_THREADS
    return py::make_tuple(py::reinterpret_steal<py::object>(val),
                          py::reinterpret_steal<py::object>(idx));
}

// max_pool2d's backward: each window's gradient added at its maximum (the same pick as the
// forward's), into zeros shaped like x; windows sharing a maximum add up (torch's). One pass,
// where the indices and a scatter take three.
py::object max_pool2d_backward(py::object xo, py::object go, npy_intp kh, npy_intp kw,
                               npy_intp sh, npy_intp sw, npy_intp dh, npy_intp dw, npy_intp ph,
                               npy_intp pw, npy_intp oh, npy_intp ow) {
    const int type =
        check_pool(xo.ptr(), "max_pool2d_backward", kh, kw, sh, sw, dh, dw, ph, pw, oh, ow);
    auto *x = reinterpret_cast<PyArrayObject *>(xo.ptr());
    npy_intp planes = PyArray_DIM(x, 0), h = PyArray_DIM(x, 1), w = PyArray_DIM(x, 2);
    PyObject *gp = go.ptr();
    if (!PyArray_Check(gp) || PyArray_TYPE(reinterpret_cast<PyArrayObject *>(gp)) != type ||
        !PyArray_IS_C_CONTIGUOUS(reinterpret_cast<PyArrayObject *>(gp)) ||
        PyArray_NDIM(reinterpret_cast<PyArrayObject *>(gp)) != 3 ||
        PyArray_DIM(reinterpret_cast<PyArrayObject *>(gp), 0) != planes ||
        PyArray_DIM(reinterpret_cast<PyArrayObject *>(gp), 1) != oh ||
        PyArray_DIM(reinterpret_cast<PyArrayObject *>(gp), 2) != ow)
        throw py::value_error("max_pool2d_backward(x, grad): grad must be a C-contiguous "
                              "(planes, OH, OW) array of x's dtype");
    npy_intp dims[3] = {planes, h, w};
    PyObject *out = PyArray_ZEROS(3, dims, type, 0);
    if (!out) throw py::error_already_set();
    void *gx = PyArray_DATA(reinterpret_cast<PyArrayObject *>(out));
    const void *g = PyArray_DATA(reinterpret_cast<PyArrayObject *>(gp));
    const npy_intp hw = h * w;
    Py_BEGIN_ALLOW_THREADS
    if (type == NPY_FLOAT32) {
        auto *dst = static_cast<float *>(gx);
        const auto *src = static_cast<const float *>(g);
        max_pool_walk(static_cast<const float *>(PyArray_DATA(x)), planes, h, w, kh, kw, sh, sw,
                      dh, dw, ph, pw, oh, ow,
                      [&](npy_intp p, int64_t at, float) { dst[p * hw + at] += *src++; });
    } else {
        auto *dst = static_cast<double *>(gx);
        const auto *src = static_cast<const double *>(g);
        max_pool_walk(static_cast<const double *>(PyArray_DATA(x)), planes, h, w, kh, kw, sh,
                      sw, dh, dw, ph, pw, oh, ow,
                      [&](npy_intp p, int64_t at, double) { dst[p * hw + at] += *src++; });
    }
    Py_END_ALLOW_THREADS
    return py::reinterpret_steal<py::object>(out);
}

template <typename T>
void scatter_add_loop(T *out, const int64_t *idx, const T *src, npy_intp outer, npy_intp k,
                      npy_intp inner, npy_intp ka) {
    for (npy_intp o = 0; o < outer; ++o, out += ka * inner)
        for (npy_intp j = 0; j < k; ++j)
            for (npy_intp i = 0; i < inner; ++i) out[*idx++ * inner + i] += *src++;
}

// out[o, idx[o, j, i], i] += src[o, j, i] over contiguous (outer, ka, inner) out and
// (outer, k, inner) idx/src: scatter(dim, reduce="add") along one dim
void scatter_add(py::object oo, py::object io, py::object so, npy_intp outer, npy_intp k,
                 npy_intp inner) {
    for (PyObject *a : {oo.ptr(), io.ptr(), so.ptr()})
        if (!PyArray_Check(a) || !PyArray_IS_C_CONTIGUOUS(reinterpret_cast<PyArrayObject *>(a)))
            throw py::type_error("scatter_add(out, index, src): C-contiguous numpy arrays expected");
    auto *out = reinterpret_cast<PyArrayObject *>(oo.ptr());
    auto *ix = reinterpret_cast<PyArrayObject *>(io.ptr());
    auto *src = reinterpret_cast<PyArrayObject *>(so.ptr());
    int type = PyArray_TYPE(out);
    if (PyArray_TYPE(src) != type || PyArray_TYPE(ix) != NPY_INT64 ||
        !PyArray_ISWRITEABLE(out) || outer < 0 || k < 0 || inner < 0 ||
        PyArray_SIZE(ix) != outer * k * inner || PyArray_SIZE(src) != outer * k * inner ||
        (outer * inner > 0 && PyArray_SIZE(out) % (outer * inner) != 0))
        throw py::value_error("scatter_add(out, index, src, outer, k, inner): a writable out "
                              "and src of one dtype, an int64 index, sizes outer * k * inner");
    npy_intp ka = outer * inner > 0 ? PyArray_SIZE(out) / (outer * inner) : 0;
    const int64_t *i = static_cast<const int64_t *>(PyArray_DATA(ix));
    for (npy_intp n = 0; n < outer * k * inner; ++n)
        if (i[n] < 0 || i[n] >= ka)
            throw py::value_error("scatter_add(): an index is out of bounds");
    void *o = PyArray_DATA(out);
    const void *sv = PyArray_DATA(src);
    bool done = true;
    Py_BEGIN_ALLOW_THREADS
    switch (type) {
        case NPY_FLOAT32: scatter_add_loop(static_cast<float *>(o), i, static_cast<const float *>(sv), outer, k, inner, ka); break;
        case NPY_FLOAT64: scatter_add_loop(static_cast<double *>(o), i, static_cast<const double *>(sv), outer, k, inner, ka); break;
        case NPY_INT32: scatter_add_loop(static_cast<int32_t *>(o), i, static_cast<const int32_t *>(sv), outer, k, inner, ka); break;
        case NPY_INT64: scatter_add_loop(static_cast<int64_t *>(o), i, static_cast<const int64_t *>(sv), outer, k, inner, ka); break;
        default: done = false;
    }
    Py_END_ALLOW_THREADS
    if (!done) throw py::type_error("scatter_add(): float32/float64/int32/int64 only");
}

// ---- relu and its backward --------------------------------------------------------------
// numpy's maximum(x, 0) and where(x <= t, 0, g) take several passes (a NaN check, a
// comparison array) where torch makes one; these loops make one, with the same results:
// relu keeps NaN (as numpy's maximum and torch do) and maps -0.0 to +0.0 as numpy's
// maximum does (torch keeps the sign: the values compare equal); the backward passes g on where x is NaN (NaN <= t is false).
// Twins: the numpy expressions of the rows in _rows/pointwise.py (relu, _threshold_backward).

template <typename T>
void relu_loop(const T *x, T *o, npy_intp n) {
    for (npy_intp i = 0; i < n; ++i) {
        T v = x[i];
        // (bitwise |: no branch between the two tests, so the loop vectorizes)
        o[i] = ((v > T(0)) | (v != v)) ? v : T(0);
    }
}

template <typename T>
void threshold_backward_loop(const T *g, const T *x, T *o, npy_intp n, T t) {
    for (npy_intp i = 0; i < n; ++i) {
        const T gv = g[i];  // (read unconditionally: the loop vectorizes)
        o[i] = x[i] <= t ? T(0) : gv;
    }
}

// A float32/float64 C-contiguous numpy array, or NULL (borrowed).
PyArrayObject *float_array(PyObject *a) {
    if (!PyArray_Check(a)) return nullptr;
    auto *arr = reinterpret_cast<PyArrayObject *>(a);
    int type = PyArray_TYPE(arr);
    if ((type != NPY_FLOAT32 && type != NPY_FLOAT64) || !PyArray_IS_C_CONTIGUOUS(arr) ||
        !PyArray_ISNOTSWAPPED(arr))
        return nullptr;
    return arr;
}

// A new C-contiguous array shaped and typed like ``like`` (numpy's current allocator: the
// aligned one inside a plain call).
PyObject *new_like(PyArrayObject *like) {
    PyArray_Descr *descr = PyArray_DESCR(like);
    Py_INCREF(descr);
    return PyArray_NewFromDescr(&PyArray_Type, descr, PyArray_NDIM(like), PyArray_DIMS(like),
                                nullptr, nullptr, 0, nullptr);
}

// relu of a float32/float64 C-contiguous array as a new array; None for any other array
// (the caller's numpy expression takes it).
py::object relu(py::object xo) {
    PyArrayObject *x = float_array(xo.ptr());
    if (!x) return py::none();
    PyObject *out = new_like(x);
    if (!out) throw py::error_already_set();
    auto *o = reinterpret_cast<PyArrayObject *>(out);
    npy_intp n = PyArray_SIZE(x);
    const void *src = PyArray_DATA(x);
    void *dst = PyArray_DATA(o);
    Py_BEGIN_ALLOW_THREADS
    if (PyArray_TYPE(x) == NPY_FLOAT32)
        relu_loop(static_cast<const float *>(src), static_cast<float *>(dst), n);
    else
        relu_loop(static_cast<const double *>(src), static_cast<double *>(dst), n);
    Py_END_ALLOW_THREADS
    return py::reinterpret_steal<py::object>(out);
}

// where(x <= threshold, 0, g) as a new array for g and x of one float dtype and shape, both
// C-contiguous; None otherwise.
py::object threshold_backward(py::object go, py::object xo, double threshold) {
    PyArrayObject *g = float_array(go.ptr()), *x = float_array(xo.ptr());
    if (!g || !x || PyArray_TYPE(g) != PyArray_TYPE(x) ||
        !PyArray_SAMESHAPE(g, x))
        return py::none();
    PyObject *out = new_like(g);
    if (!out) throw py::error_already_set();
    auto *o = reinterpret_cast<PyArrayObject *>(out);
    npy_intp n = PyArray_SIZE(g);
    const void *gv = PyArray_DATA(g), *xv = PyArray_DATA(x);
    void *dst = PyArray_DATA(o);
    Py_BEGIN_ALLOW_THREADS
    if (PyArray_TYPE(g) == NPY_FLOAT32)
        threshold_backward_loop(static_cast<const float *>(gv), static_cast<const float *>(xv),
                                static_cast<float *>(dst), n, static_cast<float>(threshold));
    else
        threshold_backward_loop(static_cast<const double *>(gv), static_cast<const double *>(xv),
                                static_cast<double *>(dst), n, threshold);
    Py_END_ALLOW_THREADS
    return py::reinterpret_steal<py::object>(out);
}

// ---- cuda_launch ------------------------------------------------------------------------
// The driver is found at run time (CuPy has loaded it by then): the module builds and imports
// where no CUDA toolkit or driver exists, and only a launch there raises.

using CuLaunchKernel = int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, void *, void **, void **);
using CuGetErrorName = int (*)(int, const char **);
using CuCtxGetDevice = int (*)(int *);

struct Driver {
    CuLaunchKernel launch = nullptr;
    CuGetErrorName error_name = nullptr;
    CuCtxGetDevice ctx_device = nullptr;  // the current context's device (CuPy's current one)
    bool tried = false;
};

Driver &driver() {
    static Driver d;
    if (!d.tried) {
        d.tried = true;
#if defined(__linux__)
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (lib) {
            d.launch = reinterpret_cast<CuLaunchKernel>(dlsym(lib, "cuLaunchKernel"));
            d.error_name = reinterpret_cast<CuGetErrorName>(dlsym(lib, "cuGetErrorName"));
            d.ctx_device = reinterpret_cast<CuCtxGetDevice>(dlsym(lib, "cuCtxGetDevice"));
        }
#endif
    }
    return d;
}

union LaunchArg {
    void *p;
    float f;
    double d;
    int8_t b;
    uint8_t B;
    int16_t h;
    int32_t i;
    uint32_t I;
    int64_t q;
    bool t;
};

constexpr size_t MAX_LAUNCH_ARGS = 32;

// function: a CUfunction (CuPy's Function.ptr); stream: a CUstream (0: the legacy default);
// signature: one code per argument: p (a device address, int), f/d (float32/64), b/B/h/i/I/q
// (int8, uint8, int16, int32, uint32, int64), ? (bool)
void cuda_launch(uintptr_t function, unsigned grid, unsigned block, uintptr_t stream,
                 const std::string &signature, py::tuple args) {
    if (!function) throw py::value_error("cuda_launch(): function must be a CUfunction, not 0");
    if (!grid || !block || block > 1024)
        throw py::value_error("cuda_launch(): grid must be >= 1 and block in [1, 1024]");
    const size_t n = signature.size();
    if (n != static_cast<size_t>(args.size()) || n > MAX_LAUNCH_ARGS)
        throw py::value_error("cuda_launch(): the signature needs one code per argument (at "
                              "most 32); got " + std::to_string(n) + " codes for " +
                              std::to_string(args.size()) + " arguments");
    LaunchArg values[MAX_LAUNCH_ARGS];
    void *params[MAX_LAUNCH_ARGS];
    for (size_t k = 0; k < n; ++k) {
        PyObject *o = PyTuple_GET_ITEM(args.ptr(), k);
        LaunchArg &v = values[k];
        switch (signature[k]) {
            case 'p': v.p = PyLong_AsVoidPtr(o); break;
            case 'f': v.f = static_cast<float>(PyFloat_AsDouble(o)); break;
            case 'd': v.d = PyFloat_AsDouble(o); break;
            case 'b': v.b = static_cast<int8_t>(PyLong_AsLongLong(o)); break;
            case 'B': v.B = static_cast<uint8_t>(PyLong_AsLongLong(o)); break;
            case 'h': v.h = static_cast<int16_t>(PyLong_AsLongLong(o)); break;
            case 'i': v.i = static_cast<int32_t>(PyLong_AsLongLong(o)); break;
            case 'I': v.I = static_cast<uint32_t>(PyLong_AsUnsignedLongLong(o)); break;
            case 'q': v.q = PyLong_AsLongLong(o); break;
            case '?': {
                int t = PyObject_IsTrue(o);
                v.t = t > 0;
                break;
            }
            default:
                throw py::value_error(std::string("cuda_launch(): unknown signature code '") +
                                      signature[k] + "' (expected one of p f d b B h i I q ?)");
        }
        if (PyErr_Occurred()) throw py::error_already_set();
        params[k] = &v;
    }
    Driver &drv = driver();
    if (!drv.launch)
        throw std::runtime_error("cuda_launch(): the CUDA driver (libcuda.so.1) cannot be "
                                 "loaded in this process");
    int r = drv.launch(reinterpret_cast<void *>(function), grid, 1, 1, block, 1, 1, 0,
                       reinterpret_cast<void *>(stream), params, nullptr);
    if (r != 0) {
        const char *name = nullptr;
        if (drv.error_name) drv.error_name(r, &name);
        throw std::runtime_error(std::string("cuda_launch(): cuLaunchKernel failed: ") +
                                 (name ? name : "CUDA error " + std::to_string(r)));
    }
}

#include "cublas_gemm.h"
#include "cuda_pointwise.h"

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "TensorPlay's native hot paths (each has a Python twin; see tensorplay._native)";
    if (_import_array() < 0) throw py::error_already_set();

    PyObject *fastop = PyType_FromSpec(&fastop_spec);
    if (!fastop) throw py::error_already_set();
    m.add_object("FastOp", fastop);

    if (PyModule_AddFunctions(m.ptr(), plain_call_defs) < 0) throw py::error_already_set();
    if (PyModule_AddFunctions(m.ptr(), make_view_defs) < 0) throw py::error_already_set();
    if (PyModule_AddFunctions(m.ptr(), record_defs) < 0) throw py::error_already_set();
    V.offset = PyUnicode_InternFromString("_offset");
    V.stride = PyUnicode_InternFromString("_stride");
    V.base = PyUnicode_InternFromString("_base");
    V.reshape = PyUnicode_InternFromString("reshape");
    V.transpose = PyUnicode_InternFromString("transpose");
    if (!V.offset || !V.stride || !V.base) throw py::error_already_set();
    m.def("init_plain", &init_plain, py::arg("fallback"), py::arg("plan"), py::arg("wrap"),
          py::arg("record"), py::arg("row_type"), py::arg("dtype_type"), py::arg("quiet"),
          "Learn _dispatch's general path, planner, wrap and autograd record (called once by "
          "tensorplay._dispatch)");
    m.def("init_cuda_adopt", &init_cuda_adopt, py::arg("ndarray"), py::arg("storage"),
          "Learn cupy.ndarray and CudaStorage for adopt_cuda (called once CuPy loads)");
    m.def("plain_forget", &plain_forget, "Forget every plain-call plan (a row's kernels changed)");
    m.def("init", &init, py::arg("tensor"), py::arg("storage"), py::arg("cpu"),
          py::arg("aligned_u8"),
          "Learn the slot layout of Tensor and Storage (called once by tensorplay._native)");
    m.def("watch_gate", &watch_gate, py::arg("state"),
          "Read the fast-path gate from state.plain (a __slots__ member)");
    m.def("is_plain", [] { return gate_plain(); });
    m.def("exchange_api", &exchange_api, py::arg("from_capsule"), py::arg("stream_ptr"),
          "The DLPack C exchange table as a 'dlpack_exchange_api' capsule (made once)");
    m.def("any_requires_grad", &any_requires_grad, py::arg("tensors"),
          "Some Tensor in the sequence requires grad");
    m.def("init_edges", &init_edges, py::arg("grad_fn_of"), py::arg("accumulator"),
          "Learn autograd.graph's grad_fn_of and accumulator (called once by autograd.graph)");
    m.def("init_engine", &init_engine, py::arg("accumulate_type"), py::arg("accumulate"),
          py::arg("step"), "Learn autograd.engine's AccumulateGrad, _accumulate and _step");
    m.def("topological_order", &topological_order, py::arg("roots"),
          "Nodes reachable from roots, each before the nodes it feeds from (twin: "
          "autograd.engine._topological_order)");
    m.def("backward_loop", &backward_loop, py::arg("order"), py::arg("buffers"),
          py::arg("retain_graph"), py::arg("direct"),
          "autograd.engine._loop without capture (direct: no profiler span per node)");
    m.def("im2col", &im2col, py::arg("x"), py::arg("kh"), py::arg("kw"), py::arg("sh"),
          py::arg("sw"), py::arg("dh"), py::arg("dw"), py::arg("ph"), py::arg("pw"),
          py::arg("oh"), py::arg("ow"),
          "The (C*KH*KW, N*OH*OW) columns of contiguous (N, C, H, W) x, zero-padded "
          "(twin: tensorplay._rows.convolution._columns_py)");
    m.def("col2im", &col2im, py::arg("cols"), py::arg("n"), py::arg("c"), py::arg("h"),
          py::arg("w"), py::arg("kh"), py::arg("kw"), py::arg("sh"), py::arg("sw"),
          py::arg("dh"), py::arg("dw"), py::arg("ph"), py::arg("pw"), py::arg("oh"),
          py::arg("ow"),
          "The (N, C, H, W) image that im2col's adjoint makes of float32/float64 columns "
          "(C*KH*KW, N*OH*OW); None for other arrays (twin: tensorplay._rows.convolution."
          "_conv_t_arrays's strided adds)");
    m.def("max_pool2d", &max_pool2d, py::arg("x"), py::arg("kh"), py::arg("kw"), py::arg("sh"),
          py::arg("sw"), py::arg("dh"), py::arg("dw"), py::arg("ph"), py::arg("pw"),
          py::arg("oh"), py::arg("ow"),
          "(values, flat indices) of 2-D max pooling over (planes, H, W) float x (twin: "
          "tensorplay._rows.convolution._max_pool_arrays)");
    m.def("max_pool2d_backward", &max_pool2d_backward, py::arg("x"), py::arg("grad"),
          py::arg("kh"), py::arg("kw"), py::arg("sh"), py::arg("sw"), py::arg("dh"),
          py::arg("dw"), py::arg("ph"), py::arg("pw"), py::arg("oh"), py::arg("ow"),
          "max pooling's input gradient: grad (planes, OH, OW) added at each window's maximum "
          "of x (planes, H, W) (twin: tensorplay._rows.convolution._max_pool_backward_arrays)");
    m.def("scatter_add", &scatter_add, py::arg("out"), py::arg("index"), py::arg("src"),
          py::arg("outer"), py::arg("k"), py::arg("inner"),
          "out[o, index[o, j, i], i] += src[o, j, i] in place (twin: numpy's add.at in "
          "tensorplay._rows.indexing.add_at)");
    m.def("relu", &relu, py::arg("x"),
          "relu of a float32/float64 C-contiguous array in one pass; None for other arrays "
          "(twin: the relu row's numpy kernel)");
    m.def("threshold_backward", &threshold_backward, py::arg("grad"), py::arg("x"),
          py::arg("threshold"),
          "where(x <= threshold, 0, grad) in one pass for float32/float64 C-contiguous arrays "
          "of one shape; None otherwise (twin: the _threshold_backward row's numpy kernel)");
    m.def("cuda_launch", &cuda_launch, py::arg("function"), py::arg("grid"), py::arg("block"),
          py::arg("stream"), py::arg("signature"), py::arg("args"),
          "Launch a CUfunction on a 1-D grid, its arguments converted by the signature codes "
          "(twin: the CuPy Function's call, tensorplay._cuda_launch)");
    m.def("init_record", &init_record, py::arg("node_type"), py::arg("saved_type"),
          py::arg("diff_dtypes"), py::arg("anomaly"), py::arg("forward"),
          py::arg("saved_hooks"), py::arg("grad"),
          "Learn autograd's OpNode, SavedTensor and mode states (called once by "
          "autograd._record)");
    m.def("record_node", &record_node, py::arg("row"), py::arg("targs"), py::arg("params"),
          py::arg("result"),
          "Attach row's OpNode to result in the common case and return result; None where "
          "Python must record (twin: autograd._record.record)");
    m.def("input_edges", &input_edges, py::arg("items"),
          "(edges, meta) of a new backward node's inputs (twin: autograd.graph.input_edges)");
    m.def("cublas_bind", &cublas_bind, py::arg("path"),
          "Bind the libcublas at path (CuPy's copy); False when it lacks a GEMM entry point");
    m.def("cublas_register", &cublas_register, py::arg("handle"),
          "Accept a cublasHandle_t of the bound library in cublas_gemm");
    if (PyModule_AddFunctions(m.ptr(), cublas_gemm_defs) < 0) throw py::error_already_set();
    if (PyModule_AddFunctions(m.ptr(), cuda_pointwise_defs) < 0) throw py::error_already_set();
    m.def("init_cuda_pointwise", &init_cuda_pointwise, py::arg("ndarray"), py::arg("functions"),
          py::arg("stream"),
          "Learn cupy.ndarray, _cuda_pointwise._functions and cupy's current-stream getter "
          "(called once by tensorplay._cuda_pointwise when CuPy is imported)");
}
