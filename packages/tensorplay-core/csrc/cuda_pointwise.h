// ---- cuda_pointwise: _cuda_pointwise.run's launch, decided and made in C -----------------
//
// Included by _C.cpp inside its anonymous namespace, after cuda_launch (driver(), LaunchArg).
// Twin: tensorplay._cuda_pointwise.run (without out=). The same layouts (one contiguous
// array; two of one shape; one repeating whole inside the other; an array and a numpy
// scalar of its dtype), the same kernels (the table _cuda_pointwise._functions compiles,
// asked once per expression, dtype, arity and device) and the same launch geometry; the
// CuPy array attributes are read and the kernel launched here, where Python spent more host
// time on them than CuPy's own elementwise call takes. Anything else returns None and
// Python's run decides.

struct PointwiseHooks {
    PyObject *ndarray = nullptr;    // cupy.ndarray
    PyObject *functions = nullptr;  // _cuda_pointwise._functions(expr, char, arity, device)
    PyObject *stream = nullptr;     // cupy.cuda.get_current_stream
    PyObject *shape = nullptr, *dtype = nullptr, *data = nullptr, *ptr = nullptr,
             *device = nullptr, *id = nullptr, *vec = nullptr;
    bool ready = false;
};
PointwiseHooks W;

// The launch handles of one (expr, dtype, arity, device), read once from _functions' table.
struct PointwiseKernels {
    long long vec = 0;
    uintptr_t fn[2][5] = {};  // [vectorised][mode]
};
struct KernelKey {
    PyObject *expr;  // held (the op table's string: one object per row)
    char code;
    int arity;
    long device;
    bool operator==(const KernelKey &o) const {
        return expr == o.expr && code == o.code && arity == o.arity && device == o.device;
    }
};
struct KernelKeyHash {
    size_t operator()(const KernelKey &k) const {
        return std::hash<const void *>()(k.expr) ^ (static_cast<size_t>(k.code) << 1) ^
               (static_cast<size_t>(k.arity) << 9) ^ (static_cast<size_t>(k.device) << 11);
    }
};
std::unordered_map<KernelKey, PointwiseKernels, KernelKeyHash> g_pw_kernels;

void init_cuda_pointwise(py::object ndarray, py::object functions, py::object stream) {
    if (!PyType_Check(ndarray.ptr()) || !PyCallable_Check(functions.ptr()) ||
        !PyCallable_Check(stream.ptr()))
        throw py::type_error("tensorplay._C.init_cuda_pointwise(ndarray, functions, stream): "
                             "a class and two callables");
    if (W.ready) throw py::value_error("tensorplay._C.init_cuda_pointwise() was already called");
    PointwiseHooks n;
    const char *names[] = {"shape", "dtype", "data", "ptr", "device", "id", "vec"};
    PyObject **slots[] = {&n.shape, &n.dtype, &n.data, &n.ptr, &n.device, &n.id, &n.vec};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); ++i)
        if (!(*slots[i] = PyUnicode_InternFromString(names[i]))) throw py::error_already_set();
    // kept for the life of the process (CuPy's class and functions, a module function)
    n.ndarray = ndarray.release().ptr();
    n.functions = functions.release().ptr();
    n.stream = stream.release().ptr();
    n.ready = true;
    W = n;
}

// What run() reads of one CuPy array operand.
struct Operand {
    PyObject *shape = nullptr;  // new reference
    PyArray_Descr *descr = nullptr;  // new reference
    long long size = 0;
    uintptr_t ptr = 0;
    bool contiguous = false;
    ~Operand() {
        Py_XDECREF(shape);
        Py_XDECREF(reinterpret_cast<PyObject *>(descr));
    }
};

// A new reference to attribute ``b`` of attribute ``a`` of ``o``.
PyObject *attr2(PyObject *o, PyObject *a, PyObject *b) {
    PyObject *first = PyObject_GetAttr(o, a);
    if (!first) return nullptr;
    PyObject *second = PyObject_GetAttr(first, b);
    Py_DECREF(first);
    return second;
}

// 0 read, -1 error.
int read_operand(PyObject *a, Operand *op) {
    op->shape = PyObject_GetAttr(a, W.shape);
    if (!op->shape) return -1;
    if (!PyTuple_Check(op->shape)) {
        PyErr_SetString(PyExc_TypeError, "cuda_pointwise: an array's shape is not a tuple");
        return -1;
    }
    PyObject *dt = PyObject_GetAttr(a, W.dtype);
    if (!dt) return -1;
    if (!PyArray_DescrCheck(dt)) {
        Py_DECREF(dt);
        PyErr_SetString(PyExc_TypeError, "cuda_pointwise: an array's dtype is not a numpy dtype");
        return -1;
    }
    op->descr = reinterpret_cast<PyArray_Descr *>(dt);
    long long size = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(op->shape); ++i) {
        long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(op->shape, i));
        if (d < 0 && PyErr_Occurred()) return -1;
        size *= d;
    }
    op->size = size;
    const int c = cupy_c_contiguous(a);
    if (c < 0) return -1;
    op->contiguous = c == 1;
    PyObject *p = attr2(a, W.data, W.ptr);
    if (!p) return -1;
    op->ptr = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(p));
    Py_DECREF(p);
    return PyErr_Occurred() ? -1 : 0;
}

// Does ``small`` repeat whole inside ``big`` (its shape, less leading 1s, is big's
// trailing part)? (twin: _cuda_pointwise._repeats)
bool repeats(PyObject *small, PyObject *big) {
    Py_ssize_t ns = PyTuple_GET_SIZE(small), nb = PyTuple_GET_SIZE(big), s0 = 0;
    while (s0 < ns && PyLong_AsLongLong(PyTuple_GET_ITEM(small, s0)) == 1) ++s0;
    if (ns - s0 > nb) return false;
    for (Py_ssize_t i = s0; i < ns; ++i) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(small, i),
                                          PyTuple_GET_ITEM(big, nb - (ns - i)), Py_EQ);
        if (eq != 1) {
            PyErr_Clear();
            return false;
        }
    }
    return true;
}

// (magic, shift) of _cuda_pointwise._magic
void magic_of(long long d, uint32_t *magic, uint32_t *shift) {
    if (d < 1 || d >= (1LL << 31)) {
        *magic = *shift = 0;
        return;
    }
    uint32_t s = 0;
    while ((1ULL << s) < static_cast<unsigned long long>(d)) ++s;  // (d - 1).bit_length()
    unsigned __int128 num = (static_cast<unsigned __int128>(1) << 32) * ((1ULL << s) - d);
    *magic = static_cast<uint32_t>(num / static_cast<unsigned long long>(d) + 1);
    *shift = s;
}

// The CUfunction handle of attribute ``ptr`` of ``fns[(v, mode)]``; 0 with an exception set.
uintptr_t function_ptr(PyObject *fns, int v, int mode) {
    PyObject *key = Py_BuildValue("(ii)", v, mode);
    if (!key) return 0;
    PyObject *fn = PyDict_GetItemWithError(fns, key);
    Py_DECREF(key);
    if (!fn) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "cuda_pointwise: no such kernel");
        return 0;
    }
    PyObject *p = PyObject_GetAttr(fn, W.ptr);
    if (!p) return 0;
    uintptr_t r = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(p));
    Py_DECREF(p);
    return PyErr_Occurred() ? 0 : r;
}

// The kernels of (expr, code, arity, device): compiled by _cuda_pointwise._functions on first
// use, their handles kept here (the CuPy modules stay alive in that function's own cache);
// nullptr with an exception set.
const PointwiseKernels *kernels_for(PyObject *expr, char code, int arity, long device) {
    KernelKey key{expr, code, arity, device};
    auto it = g_pw_kernels.find(key);
    if (it != g_pw_kernels.end()) return &it->second;
    PyObject *fns = PyObject_CallFunction(W.functions, "OCil", expr, code, arity, device);
    if (!fns) return nullptr;
    PointwiseKernels k;
    PyObject *vec = PyDict_Check(fns) ? PyDict_GetItemWithError(fns, W.vec) : nullptr;
    k.vec = vec ? PyLong_AsLongLong(vec) : 0;
    if (k.vec < 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "cuda_pointwise: no 'vec' entry");
        Py_DECREF(fns);
        return nullptr;
    }
    for (int w = 0; w < 2; ++w) {
        const int v = w ? static_cast<int>(k.vec) : 1;
        for (int mode = 0; mode < (arity == 1 ? 1 : 5); ++mode) {
            k.fn[w][mode] = function_ptr(fns, v, mode);
            if (!k.fn[w][mode]) {
                Py_DECREF(fns);
                return nullptr;
            }
        }
    }
    Py_DECREF(fns);
    Py_INCREF(expr);  // the key's string lives as long as the entry
    return &g_pw_kernels.emplace(key, k).first->second;
}

constexpr long long kPwThreads = 256, kPwMaxBlocks = 1 << 20, kPwAlign = 16;

// cuda_pointwise(expr, arrays, min_elements) -> a new CuPy array or None (twin: run).
PyObject *cuda_pointwise(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "cuda_pointwise(expr, arrays, min_elements)");
        return nullptr;
    }
    if (!W.ready) {
        PyErr_SetString(PyExc_RuntimeError, "tensorplay._C.init_cuda_pointwise() was not called");
        return nullptr;
    }
    PyObject *expr = args[0], *arrays = args[1];
    const long long min_elements = PyLong_AsLongLong(args[2]);
    if (min_elements == -1 && PyErr_Occurred()) return nullptr;
    const Py_ssize_t arity = PyTuple_GET_SIZE(arrays);
    if (arity < 1 || arity > 2) Py_RETURN_NONE;
    auto *ndarray = reinterpret_cast<PyTypeObject *>(W.ndarray);
    PyObject *a = PyTuple_GET_ITEM(arrays, 0), *b = arity == 2 ? PyTuple_GET_ITEM(arrays, 1) : nullptr;
    const bool a_arr = Py_TYPE(a) == ndarray, b_arr = b && Py_TYPE(b) == ndarray;
    if (!a_arr && !b_arr) Py_RETURN_NONE;
    Operand x, y;
    PyObject *scalar = nullptr;
    int mode = 0;
    if (a_arr && read_operand(a, &x) < 0) return nullptr;
    if (b_arr && read_operand(b, &y) < 0) return nullptr;
    if (arity == 2 && !(a_arr && b_arr)) {  // an array and a number (modes 3 and 4)
        PyObject *s = a_arr ? b : a;
        Operand &t = a_arr ? x : y;
        if (!PyArray_IsScalar(s, Generic)) Py_RETURN_NONE;
        PyArray_Descr *sd = PyArray_DescrFromScalar(s);
        if (!sd) return nullptr;
        bool same = PyArray_EquivTypes(sd, t.descr);
        Py_DECREF(sd);
        if (!same) Py_RETURN_NONE;
        scalar = s;
        mode = a_arr ? 3 : 4;
    }
    Operand &t = a_arr ? x : y;  // the (first) tensor operand: dtype and device
    const char code = t.descr->type;
    if (code != 'f' && code != 'd') Py_RETURN_NONE;
    long long n = x.size > y.size ? x.size : y.size;
    if (n < min_elements || n == 0) Py_RETURN_NONE;
    PyObject *out_shape = t.shape;
    long long m = n;
    if (arity == 1) {
        if (!x.contiguous) Py_RETURN_NONE;
    } else if (a_arr && b_arr) {
        if (!PyArray_EquivTypes(x.descr, y.descr) || !x.contiguous || !y.contiguous) Py_RETURN_NONE;
        int eq = PyObject_RichCompareBool(x.shape, y.shape, Py_EQ);
        if (eq < 0) return nullptr;
        if (eq) {
            mode = 0;
        } else if (repeats(y.shape, x.shape)) {
            mode = 1;
            m = y.size;
        } else if (repeats(x.shape, y.shape)) {
            mode = 2;
            m = x.size;
            out_shape = y.shape;
        } else {
            Py_RETURN_NONE;
        }
        n = mode == 2 ? y.size : x.size;
    } else if (!t.contiguous) {
        Py_RETURN_NONE;
    }
    // the result on the current device, as run's cupy.empty; its device picks the kernels
    PyObject *out = PyObject_CallFunctionObjArgs(W.ndarray, out_shape,
                                                 reinterpret_cast<PyObject *>(t.descr), nullptr);
    if (!out) return nullptr;
    // the result's address, and its device (the current one: the context's, read from the
    // driver; from the array where the driver call is missing)
    PyObject *zp = attr2(out, W.data, W.ptr);
    const uintptr_t z_ptr = zp ? static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(zp)) : 0;
    Py_XDECREF(zp);
    long device = -1;
    Driver &drv = driver();
    if (!PyErr_Occurred()) {
        int ordinal = -1;
        if (drv.ctx_device && drv.ctx_device(&ordinal) == 0) {
            device = ordinal;
        } else {
            PyObject *dev = attr2(out, W.device, W.id);
            device = dev ? PyLong_AsLong(dev) : -1;
            Py_XDECREF(dev);
        }
    }
    const PointwiseKernels *kern =
        PyErr_Occurred() ? nullptr : kernels_for(expr, code, static_cast<int>(arity), device);
    if (!kern) {
        Py_DECREF(out);
        return nullptr;
    }
    const long long vec = kern->vec;
    const uintptr_t xp = a_arr ? x.ptr : y.ptr, yp = b_arr ? y.ptr : xp;
    bool aligned = z_ptr % kPwAlign == 0 && xp % kPwAlign == 0 && yp % kPwAlign == 0;
    const bool wide = m % vec == 0 && aligned;
    const long long v = wide ? vec : 1;
    long long grid = (n + v * kPwThreads - 1) / (v * kPwThreads);
    grid = grid < 1 ? 1 : grid > kPwMaxBlocks ? kPwMaxBlocks : grid;
    uintptr_t fn = kern->fn[wide ? 1 : 0][arity == 1 ? 0 : mode];
    PyObject *stream = PyObject_CallNoArgs(W.stream);
    PyObject *sp = stream ? PyObject_GetAttr(stream, W.ptr) : nullptr;
    Py_XDECREF(stream);
    uintptr_t stream_ptr = sp ? static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(sp)) : 0;
    Py_XDECREF(sp);
    if (!fn || !sp || PyErr_Occurred()) {
        Py_DECREF(out);
        return nullptr;
    }
    LaunchArg vals[8];
    void *params[8];
    int k = 0;
    if (arity == 1) {
        vals[0].p = reinterpret_cast<void *>(xp);
        vals[1].p = reinterpret_cast<void *>(z_ptr);
        vals[2].q = n;
        k = 3;
    } else {
        uint32_t magic, shift;
        magic_of(m / v, &magic, &shift);
        vals[0].p = reinterpret_cast<void *>(xp);
        vals[1].p = reinterpret_cast<void *>(yp);
        if (code == 'f') {
            float f = 0.0f;
            if (scalar) PyArray_ScalarAsCtype(scalar, &f);
            vals[2].f = f;
        } else {
            double d = 0.0;
            if (scalar) PyArray_ScalarAsCtype(scalar, &d);
            vals[2].d = d;
        }
        vals[3].p = reinterpret_cast<void *>(z_ptr);
        vals[4].q = n;
        vals[5].q = m;
        vals[6].I = magic;
        vals[7].I = shift;
        k = 8;
    }
    for (int i = 0; i < k; ++i) params[i] = &vals[i];
    int r = drv.launch ? drv.launch(reinterpret_cast<void *>(fn), static_cast<unsigned>(grid), 1,
                                    1, kPwThreads, 1, 1, 0, reinterpret_cast<void *>(stream_ptr),
                                    params, nullptr)
                       : -1;
    if (r != 0) {
        Py_DECREF(out);
        const char *name = nullptr;
        if (r > 0 && drv.error_name) drv.error_name(r, &name);
        PyErr_SetString(PyExc_RuntimeError,
                        (std::string("cuda_pointwise(): cuLaunchKernel failed: ") +
                         (name ? name : drv.launch ? "CUDA error " + std::to_string(r)
                                                   : std::string("libcuda.so.1 not loaded")))
                            .c_str());
        return nullptr;
    }
    return out;
}

PyMethodDef cuda_pointwise_defs[] = {
    {"cuda_pointwise", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(cuda_pointwise)),
     METH_FASTCALL,
     "cuda_pointwise(expr, arrays, min_elements): _cuda_pointwise.run without out=, decided "
     "and launched in C; None where run must decide (twin: tensorplay._cuda_pointwise.run)"},
    {nullptr, nullptr, 0, nullptr},
};
