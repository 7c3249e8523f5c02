// ---- plain_call: the general path's decisions, kept per key -----------------------------
//
// Included by _C.cpp inside its anonymous namespace (it uses L, slot, gate_plain, wrap,
// aligned_like and requires_grad from there). Twin: tensorplay._dispatch.call -> execute.
//
// A call whose arguments are exact Tensors, Python numbers (int, float) or None, with no
// layer active (the gate), no out= and not in place, has everything execute() decides
// before the kernel (checks, device, dtypes, shape rule, casts, kernel) fixed by its key:
// the row, each input's type, dtype, device and shape, and the parameters' values and
// types. The first call with a key asks _dispatch._plan; the answer (a plan, or None for
// "take the general path") is kept. A plan is replayed here: the kernel runs on the
// inputs' arrays (numpy allocating 64-byte aligned memory), a CPU result is kept as its
// storage when the kernel alone holds it (else copied into aligned storage) and wrapped, other results
// are wrapped by _dispatch._wrap_result, and autograd records the call when an input
// requires grad. Anything else, and a kernel that raises, goes to the Python call (which
// decides anew and raises with its own message).

struct Plain {
    PyObject *fallback = nullptr;    // _dispatch.call
    PyObject *make_plan = nullptr;   // _dispatch._plan(row, targs, params) -> plan | None
    PyObject *wrap = nullptr;        // _dispatch._wrap_result(row, r, odt, dev)
    PyObject *record = nullptr;      // _dispatch._plain_record(row, targs, params, result)
    PyObject *row_type = nullptr;    // _dispatch.OpDef: other entries (TensorOp) go straight on
    PyObject *dtype_type = nullptr;  // tensorplay.dtype: parameter values of this type
    PyObject *quiet_var = nullptr;   // numpy's error-state context variable (or NULL)
    PyObject *quiet_state = nullptr; // the all-ignore state set around kernels that may warn
    PyObject *plans = nullptr;       // key -> plan tuple | None
    bool ready = false;
};
Plain P;

// Keys are few per op in a model (its shapes); a program that keeps changing shapes would
// otherwise grow the table without bound.
constexpr Py_ssize_t kMaxPlans = 8192;
constexpr Py_ssize_t kMaxPlainInputs = 8;
constexpr Py_ssize_t kPlanSize = 7;  // (kernel, xp, odt, dev, converters, quiet, descr)

void init_plain(py::object fallback, py::object plan, py::object wrap_result, py::object record,
                py::object row_type, py::object dtype_type, py::object quiet) {
    for (PyObject *f : {fallback.ptr(), plan.ptr(), wrap_result.ptr(), record.ptr()})
        if (!PyCallable_Check(f))
            throw py::type_error("tensorplay._C.init_plain: fallback, plan, wrap and record "
                                 "must be callables");
    if (!PyType_Check(dtype_type.ptr()) || !PyType_Check(row_type.ptr()))
        throw py::type_error("tensorplay._C.init_plain(row_type=, dtype_type=): expected classes");
    PyObject *var = nullptr, *state = nullptr;
    if (!quiet.is_none()) {
        if (!PyTuple_Check(quiet.ptr()) || PyTuple_GET_SIZE(quiet.ptr()) != 2 ||
            !PyContextVar_CheckExact(PyTuple_GET_ITEM(quiet.ptr(), 0)))
            throw py::type_error("tensorplay._C.init_plain(quiet=): expected (ContextVar, "
                                 "value) or None");
        var = PyTuple_GET_ITEM(quiet.ptr(), 0);
        state = PyTuple_GET_ITEM(quiet.ptr(), 1);
    }
    if (!L.ready) throw py::value_error("tensorplay._C.init() must be called first");
    if (P.ready) throw py::value_error("tensorplay._C.init_plain() was already called");
    PyObject *plans = PyDict_New();
    if (!plans) throw py::error_already_set();
    // Kept for the life of the process (module-level functions of tensorplay._dispatch).
    P.fallback = fallback.release().ptr();
    P.make_plan = plan.release().ptr();
    P.wrap = wrap_result.release().ptr();
    P.record = record.release().ptr();
    P.row_type = row_type.release().ptr();
    P.dtype_type = dtype_type.release().ptr();
    Py_XINCREF(var);
    Py_XINCREF(state);
    P.quiet_var = var;
    P.quiet_state = state;
    P.plans = plans;
    P.ready = true;
}

void plain_forget() {
    if (P.plans) PyDict_Clear(P.plans);
}

// A parameter value the key may hold: compared by value, hashed in C, never a tensor.
bool keyable(PyObject *v) {
    if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
        PyUnicode_CheckExact(v) || Py_TYPE(v) == reinterpret_cast<PyTypeObject *>(P.dtype_type))
        return true;
    if (PyTuple_CheckExact(v)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); ++i) {
            PyObject *x = PyTuple_GET_ITEM(v, i);
            if (x != Py_None && !PyBool_Check(x) && !PyLong_CheckExact(x)) return false;
        }
        return true;
    }
    return false;
}

// The key of a call (a new reference), NOT_FAST (borrowed) when the call is not plain, or
// NULL with an exception set.
PyObject *plain_key(PyObject *row, PyObject *targs, PyObject *params) {
    const Py_ssize_t n = PyTuple_GET_SIZE(targs);
    if (n == 0 || n > kMaxPlainInputs) return NOT_FAST;
    const Py_ssize_t np_ = PyDict_GET_SIZE(params);
    PyObject *key = PyTuple_New(1 + 3 * n + 3 * np_);
    if (!key) return nullptr;
    Py_INCREF(row);
    PyTuple_SET_ITEM(key, 0, row);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *x = PyTuple_GET_ITEM(targs, i);
        PyObject *a, *b, *c;
        if (Py_TYPE(x) == L.tensor) {
            a = slot(x, L.t_dtype);
            c = slot(x, L.t_shape);
            if (!a || !c) {
                Py_DECREF(key);
                return NOT_FAST;
            }
            Py_INCREF(a);
            Py_INCREF(c);
            // the device by identity: devices are interned, and their __hash__ is Python
            b = PyLong_FromVoidPtr(slot(x, L.t_device));
            if (!b) {
                Py_DECREF(a);
                Py_DECREF(c);
                Py_DECREF(key);
                return nullptr;
            }
        } else if (x == Py_None || PyFloat_CheckExact(x) || PyLong_CheckExact(x)) {
            if (PyLong_CheckExact(x)) {  // past int64 the general path raises
                int overflow;
                PyLong_AsLongLongAndOverflow(x, &overflow);
                if (overflow) {
                    Py_DECREF(key);
                    return NOT_FAST;
                }
            }
            a = reinterpret_cast<PyObject *>(Py_TYPE(x));
            Py_INCREF(a);
            b = Py_None;
            Py_INCREF(b);
            c = Py_None;
            Py_INCREF(c);
        } else {
            Py_DECREF(key);
            return NOT_FAST;
        }
        PyTuple_SET_ITEM(key, 1 + 3 * i, a);
        PyTuple_SET_ITEM(key, 2 + 3 * i, b);
        PyTuple_SET_ITEM(key, 3 + 3 * i, c);
    }
    Py_ssize_t pos = 0, k = 1 + 3 * n;
    PyObject *name, *v;
    while (PyDict_Next(params, &pos, &name, &v)) {
        if (!keyable(v)) {
            Py_DECREF(key);
            return NOT_FAST;
        }
        // the name (another caller may pass other names), the value, and its type too:
        // dim=True must not replay a plan made for dim=1
        Py_INCREF(name);
        PyTuple_SET_ITEM(key, k++, name);
        Py_INCREF(v);
        PyTuple_SET_ITEM(key, k++, v);
        PyObject *t = reinterpret_cast<PyObject *>(Py_TYPE(v));
        Py_INCREF(t);
        PyTuple_SET_ITEM(key, k++, t);
    }
    return key;
}

// The plan for ``key`` (borrowed), Py_None for "the general path", or NULL with an
// exception set.
PyObject *plan_for(PyObject *key, PyObject *row, PyObject *targs, PyObject *params) {
    PyObject *plan = PyDict_GetItemWithError(P.plans, key);
    if (plan || PyErr_Occurred()) return plan;
    PyObject *made = PyObject_CallFunctionObjArgs(P.make_plan, row, targs, params, nullptr);
    if (!made) return nullptr;
    if (made != Py_None &&
        (!PyTuple_CheckExact(made) || PyTuple_GET_SIZE(made) != kPlanSize ||
         !PyTuple_CheckExact(PyTuple_GET_ITEM(made, 4)) ||
         PyTuple_GET_SIZE(PyTuple_GET_ITEM(made, 4)) != PyTuple_GET_SIZE(targs))) {
        Py_DECREF(made);
        PyErr_SetString(PyExc_TypeError, "tensorplay._dispatch._plan returned a malformed plan");
        return nullptr;
    }
    if (PyDict_GET_SIZE(P.plans) >= kMaxPlans) PyDict_Clear(P.plans);
    int rc = PyDict_SetItem(P.plans, key, made);
    Py_DECREF(made);  // the table holds it
    return rc < 0 ? nullptr : made;
}

PyObject *record_plain(PyObject *row, PyObject *targs, PyObject *params, PyObject *t);  // record.h

// A CPU result in aligned storage, as a Tensor (twin: _tensor.adopt_array's CPU branch):
// the result itself when only the kernel made and holds it (own_buffer), else a copy.
PyObject *adopt_cpu(PyObject *r, PyArray_Descr *descr, PyObject *odt) {
    auto *arr = reinterpret_cast<PyArrayObject *>(r);
    PyObject *buf = own_buffer(r), *out;
    Py_ssize_t start = 0;
    if (buf) {
        out = Py_NewRef(r);
    } else {
        if (PyErr_Occurred()) return nullptr;
        out = aligned_like(arr, descr, &buf, &start);
        if (!out) return nullptr;
        if (PyArray_SIZE(arr) &&
            PyArray_CopyInto(reinterpret_cast<PyArrayObject *>(out), arr) < 0) {
            Py_DECREF(out);
            Py_DECREF(buf);
            return nullptr;
        }
    }
    const int nd = PyArray_NDIM(arr);
    PyObject *shape = PyTuple_New(nd);
    if (!shape) {
        Py_DECREF(out);
        Py_DECREF(buf);
        return nullptr;
    }
    for (int i = 0; i < nd; ++i) {
        PyObject *d = PyLong_FromSsize_t(PyArray_DIM(arr, i));
        if (!d) {
            Py_DECREF(shape);
            Py_DECREF(out);
            Py_DECREF(buf);
            return nullptr;
        }
        PyTuple_SET_ITEM(shape, i, d);
    }
    PyObject *t = wrap(out, buf, start, shape, odt);
    Py_DECREF(shape);
    return t;
}

// ---- adopt_cuda: a CUDA kernel's result as a Tensor (twin: _tensor.adopt_array's CUDA branch)
//
// A C-contiguous CuPy array of the result's dtype becomes the Tensor's array, over a
// CudaStorage of its memory pointer, both built here (the Python twin is three frames and a
// CudaStorage.__init__ per op result). The classes are registered once CuPy loads
// (init_cuda_adopt, from tensorplay._native); anything else is left to Python.

// Is CuPy array ``a`` C-contiguous? 1 or 0, or -1 with an exception set. CuPy keeps it in a
// readonly attribute (``_c_contiguous``), read without making a ``flags`` object; where an
// array lacks it (another CuPy version) ``flags.c_contiguous`` from then on. (cuda_pointwise
// reads its operands through this too.)
int cupy_c_contiguous(PyObject *a) {
    static PyObject *attr = PyUnicode_InternFromString("_c_contiguous");
    static PyObject *flags = PyUnicode_InternFromString("flags");
    static PyObject *c_contiguous = PyUnicode_InternFromString("c_contiguous");
    static bool has_attr = true;
    if (!attr || !flags || !c_contiguous) return -1;
    PyObject *c = nullptr;
    if (has_attr) {
        c = PyObject_GetAttr(a, attr);
        if (!c && PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            has_attr = false;
        }
    }
    if (!c && !has_attr) {
        PyObject *f = PyObject_GetAttr(a, flags);
        c = f ? PyObject_GetAttr(f, c_contiguous) : nullptr;
        Py_XDECREF(f);
    }
    if (!c) return -1;
    const int r = PyObject_IsTrue(c);
    Py_DECREF(c);
    return r;
}

struct CudaAdopt {
    PyTypeObject *ndarray = nullptr;  // cupy.ndarray
    PyTypeObject *storage = nullptr;  // tensorplay._storage.CudaStorage
    Py_ssize_t mem = 0;               // CudaStorage._mem's slot
    PyObject *dtype = nullptr, *np = nullptr, *data = nullptr, *shape = nullptr,
             *nbytes = nullptr;
    bool ready = false;
};
CudaAdopt CA;

void init_cuda_adopt(py::object ndarray, py::object storage) {
    if (!PyType_Check(ndarray.ptr()) || !PyType_Check(storage.ptr()))
        throw py::type_error("tensorplay._C.init_cuda_adopt(ndarray, storage): two classes");
    auto *st = reinterpret_cast<PyTypeObject *>(storage.ptr());
    if (!L.ready || !PyType_IsSubtype(st, L.storage))
        throw py::type_error("tensorplay._C.init_cuda_adopt: storage must subclass Storage "
                             "(after tensorplay._C.init)");
    CudaAdopt n;
    n.mem = slot_offset(st, "_mem");
    const char *names[] = {"dtype", "np", "data", "shape", "nbytes"};
    PyObject **slots[] = {&n.dtype, &n.np, &n.data, &n.shape, &n.nbytes};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); ++i)
        if (!(*slots[i] = PyUnicode_InternFromString(names[i]))) throw py::error_already_set();
    // a test may register a stand-in and then the real classes: the newest wins; the old
    // classes stay referenced (tensors built with them may live on)
    n.ndarray = reinterpret_cast<PyTypeObject *>(ndarray.release().ptr());
    n.storage = reinterpret_cast<PyTypeObject *>(storage.release().ptr());
    n.ready = true;
    CA = n;
}

// The Tensor of CuPy result ``r`` (a new reference); nullptr without an exception where
// Python must adopt it (not a registered array, not C-contiguous, another dtype).
PyObject *adopt_cuda(PyObject *r, PyObject *odt, PyObject *dev) {
    if (!CA.ready || Py_TYPE(r) != CA.ndarray) return nullptr;
    if (cupy_c_contiguous(r) != 1) return nullptr;  // (-1: the exception stays set)
    PyObject *have = PyObject_GetAttr(r, CA.dtype), *want = have ? PyObject_GetAttr(odt, CA.np) : nullptr;
    int same = have && want ? PyObject_RichCompareBool(have, want, Py_EQ) : -1;
    Py_XDECREF(have);
    Py_XDECREF(want);
    if (same != 1) return nullptr;
    PyObject *mem = PyObject_GetAttr(r, CA.data), *shape = mem ? PyObject_GetAttr(r, CA.shape) : nullptr;
    PyObject *nbytes = shape ? PyObject_GetAttr(r, CA.nbytes) : nullptr;
    PyObject *st = nbytes ? CA.storage->tp_alloc(CA.storage, 0) : nullptr;
    PyObject *t = st ? L.tensor->tp_alloc(L.tensor, 0) : nullptr;
    PyObject *zero = t ? PyLong_FromLong(0) : nullptr, *version = zero ? PyLong_FromLong(0) : nullptr;
    if (!version || !PyTuple_Check(shape)) {
        for (PyObject *o : {mem, shape, nbytes, st, t, zero, version}) Py_XDECREF(o);
        return nullptr;  // (an exception, if any, stays set: the caller checks)
    }
    slot(st, CA.mem) = mem;
    slot(st, L.s_start) = zero;
    slot(st, L.s_nbytes) = nbytes;
    slot(st, L.s_device) = Py_NewRef(dev);
    slot(st, L.s_version) = version;
    slot(t, L.t_data) = Py_NewRef(r);
    slot(t, L.t_storage) = st;
    slot(t, L.t_shape) = shape;
    slot(t, L.t_dtype) = Py_NewRef(odt);
    slot(t, L.t_device) = Py_NewRef(dev);
    return t;
}

// _C.adopt_cuda(r, odt, dev): the Tensor, or None where Python must adopt ``r``.
PyObject *adopt_cuda_py(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "adopt_cuda(array, dtype, device)");
        return nullptr;
    }
    PyObject *t = adopt_cuda(args[0], args[1], args[2]);
    if (t || PyErr_Occurred()) return t;
    Py_RETURN_NONE;
}

// The plan's result (a new reference), NOT_FAST when the kernel raised an Exception (the
// general path then raises it its own way), or NULL with an exception set.
PyObject *replay(PyObject *plan, PyObject *row, PyObject *targs, PyObject *params) {
    PyObject *kernel = PyTuple_GET_ITEM(plan, 0), *xp = PyTuple_GET_ITEM(plan, 1);
    PyObject *odt = PyTuple_GET_ITEM(plan, 2), *dev = PyTuple_GET_ITEM(plan, 3);
    PyObject *conv = PyTuple_GET_ITEM(plan, 4), *descr = PyTuple_GET_ITEM(plan, 6);
    const bool quiet = PyTuple_GET_ITEM(plan, 5) == Py_True && P.quiet_var;
    const Py_ssize_t n = PyTuple_GET_SIZE(targs);
    PyObject *stack[1 + kMaxPlainInputs];
    PyObject *owned[kMaxPlainInputs] = {};
    stack[0] = xp;
    PyObject *r = nullptr;
    bool no_array = false;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *x = PyTuple_GET_ITEM(targs, i), *c = PyTuple_GET_ITEM(conv, i);
        if (Py_TYPE(x) == L.tensor) {
            stack[1 + i] = slot(x, L.t_data);
            if (!stack[1 + i]) {  // a tensor with no array: the general path explains it
                no_array = true;
                goto done;
            }
        } else if (c == Py_None) {
            stack[1 + i] = x;
        } else {
            owned[i] = PyObject_CallOneArg(c, x);
            if (!owned[i]) goto done;
            stack[1 + i] = owned[i];
        }
    }
    {
        // a CPU result: numpy allocates 64-byte aligned memory, which adopt_cpu can keep
        PyObject *prev = descr != Py_None ? use_aligned_allocator() : nullptr;
        if (descr != Py_None && !prev) goto done;
        PyObject *token = quiet ? PyContextVar_Set(P.quiet_var, P.quiet_state) : nullptr;
        if (quiet && !token) {
            if (prev) restore_allocator(prev);
            goto done;
        }
        r = PyObject_VectorcallDict(kernel, stack, 1 + n, PyDict_GET_SIZE(params) ? params : nullptr);
        if (prev && restore_allocator(prev) < 0) Py_CLEAR(r);
        if (token) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            int rc = PyContextVar_Reset(P.quiet_var, token);
            Py_DECREF(token);
            PyErr_Restore(et, ev, tb);
            if (rc < 0 && r) Py_CLEAR(r);
        }
    }
done:
    for (Py_ssize_t i = 0; i < n; ++i) Py_XDECREF(owned[i]);
    if (no_array) return NOT_FAST;
    if (!r) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();
            return NOT_FAST;
        }
        return nullptr;
    }
    PyObject *t;
    if (descr != Py_None && PyArray_CheckExact(r) &&
        PyArray_EquivTypes(PyArray_DESCR(reinterpret_cast<PyArrayObject *>(r)),
                           reinterpret_cast<PyArray_Descr *>(descr))) {
        t = adopt_cpu(r, reinterpret_cast<PyArray_Descr *>(descr), odt);
    } else if (!(t = adopt_cuda(r, odt, dev)) && !PyErr_Occurred()) {
        t = PyObject_CallFunctionObjArgs(P.wrap, row, r, odt, dev, nullptr);
    }
    Py_DECREF(r);
    if (!t) return nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *x = PyTuple_GET_ITEM(targs, i);
        if (Py_TYPE(x) != L.tensor) continue;
        int rg = requires_grad(x);
        if (rg < 0) {
            Py_DECREF(t);
            return nullptr;
        }
        if (rg) {
            PyObject *rec = record_plain(row, targs, params, t);
            Py_DECREF(t);
            return rec;
        }
    }
    return t;
}

// plain_call(row, targs, params, out=None, inplace=None): _dispatch.call's signature.
PyObject *plain_call(PyObject *, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (P.ready && !kwnames && nargs >= 3 && nargs <= 5 && gate_plain() &&
        PyObject_TypeCheck(args[0], reinterpret_cast<PyTypeObject *>(P.row_type)) &&
        PyTuple_CheckExact(args[1]) && PyDict_CheckExact(args[2]) &&
        (nargs < 4 || args[3] == Py_None) && (nargs < 5 || args[4] == Py_None)) {
        PyObject *row = args[0], *targs = args[1], *params = args[2];
        PyObject *key = plain_key(row, targs, params);
        if (!key) return nullptr;
        if (key != NOT_FAST) {
            PyObject *plan = plan_for(key, row, targs, params);
            Py_DECREF(key);
            if (!plan) return nullptr;
            if (plan != Py_None) {
                Py_INCREF(plan);  // a kernel may clear the table (set_device_kernel)
                PyObject *r = replay(plan, row, targs, params);
                Py_DECREF(plan);
                if (r != NOT_FAST) return r;
            }
        }
    }
    if (!P.ready) {
        PyErr_SetString(PyExc_RuntimeError, "tensorplay._C.init_plain() has not been called");
        return nullptr;
    }
    return PyObject_Vectorcall(P.fallback, args, static_cast<size_t>(nargs), kwnames);
}

PyMethodDef plain_call_defs[] = {
    {"plain_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(plain_call)),
     METH_FASTCALL | METH_KEYWORDS,
     "plain_call(row, targs, params, out=None, inplace=None): _dispatch.call, with the "
     "decisions of a plain call kept per key (twin: tensorplay._dispatch.call)"},
    {"adopt_cuda", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(adopt_cuda_py)),
     METH_FASTCALL,
     "adopt_cuda(array, dtype, device): the Tensor of a C-contiguous CuPy result of dtype's "
     "numpy dtype, or None where Python adopts it (twin: tensorplay._tensor.adopt_array)"},
    {nullptr, nullptr, 0, nullptr},
};
