// ---- record_node: an op-table row's backward node, made in C ----------------------------
//
// Included by _C.cpp inside its anonymous namespace, after input_edges_raw. Twin:
// tensorplay.autograd._record.record -> OpNode.__init__ -> graph.SavedTensor, for the
// common case: one differentiable Tensor result (a subclass too: vmap's BatchedTensor) of
// a row that is neither a view, nor multi-output, nor takes a sequence of tensors, with no
// anomaly detection, no dual level of forward mode and no saved-tensor hooks active. The node is the same Python OpNode
// (its apply, hooks and release stay Python); only its construction and that of its
// SavedTensors happen here. Anything else is declined (None) and Python records it.

struct RecordHooks {
    PyTypeObject *node_type = nullptr, *saved_type = nullptr;
    PyObject *diff_dtypes = nullptr;    // tuple of the dtypes that carry gradients
    PyObject *anomaly = nullptr;        // anomaly_mode.state (.enabled)
    PyObject *forward = nullptr;        // forward_ad.state (.level)
    PyObject *saved_hooks = nullptr;    // graph._saved_hooks (.stack)
    PyObject *grad = nullptr;           // grad_mode.state (.enabled)
    PyObject *empty = nullptr;          // ()
    // interned attribute names
    PyObject *saves = nullptr, *simple = nullptr, *enabled = nullptr, *level = nullptr,
             *stack = nullptr, *next_functions = nullptr, *meta = nullptr,
             *n_outputs = nullptr, *needs = nullptr, *row = nullptr, *params = nullptr,
             *seq = nullptr, *saved = nullptr, *grad_fn = nullptr, *output_nr = nullptr,
             *base = nullptr, *detach = nullptr, *one = nullptr;
    // SavedTensor's slots
    Py_ssize_t packed = 0, unpack = 0, version = 0, storage = 0, node = 0, nr = 0,
               requires = 0, tangent = 0;
    bool ready = false;
};
RecordHooks R;

void init_record(py::object node_type, py::object saved_type, py::tuple diff_dtypes,
                 py::object anomaly, py::object forward, py::object saved_hooks,
                 py::object grad) {
    if (!PyType_Check(node_type.ptr()) || !PyType_Check(saved_type.ptr()))
        throw py::type_error("tensorplay._C.init_record(node_type, saved_type, ...): expected "
                             "two classes");
    if (!L.ready || !E.grad_fn_of)
        throw py::value_error("tensorplay._C.init_record: init() and init_edges() come first");
    if (R.ready) throw py::value_error("tensorplay._C.init_record() was already called");
    auto *st = reinterpret_cast<PyTypeObject *>(saved_type.ptr());
    RecordHooks n;
    n.packed = slot_offset(st, "_packed");
    n.unpack = slot_offset(st, "_unpack");
    n.version = slot_offset(st, "_version");
    n.storage = slot_offset(st, "_storage");
    n.node = slot_offset(st, "_node");
    n.nr = slot_offset(st, "_output_nr");
    n.requires = slot_offset(st, "_requires_grad");
    n.tangent = slot_offset(st, "_tangent");
    const char *names[] = {"_saves", "_record_simple", "enabled", "level", "stack",
                           "next_functions", "_meta", "n_outputs", "_needs", "row", "params",
                           "_seq", "_saved", "grad_fn", "_output_nr", "_base", "detach"};
    PyObject **slots[] = {&n.saves, &n.simple, &n.enabled, &n.level, &n.stack,
                          &n.next_functions, &n.meta, &n.n_outputs, &n.needs, &n.row,
                          &n.params, &n.seq, &n.saved, &n.grad_fn, &n.output_nr, &n.base,
                          &n.detach};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); ++i)
        if (!(*slots[i] = PyUnicode_InternFromString(names[i]))) throw py::error_already_set();
    n.one = PyLong_FromLong(1);
    n.empty = PyTuple_New(0);
    // Kept for the life of the process (module-level classes and state of autograd).
    n.node_type = reinterpret_cast<PyTypeObject *>(node_type.release().ptr());
    n.saved_type = reinterpret_cast<PyTypeObject *>(saved_type.release().ptr());
    n.diff_dtypes = diff_dtypes.release().ptr();
    n.anomaly = anomaly.release().ptr();
    n.forward = forward.release().ptr();
    n.saved_hooks = saved_hooks.release().ptr();
    n.grad = grad.release().ptr();
    n.ready = true;
    R = n;
}

// Is attribute ``name`` of ``o`` true? -1 on error.
int attr_true(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

// May the node be made here? 1 yes, 0 decline, -1 error. ``*save_in``/``*save_out``: what
// the row's formula reads (autograd._record._saves, cached on the row by Python).
int record_allowed(PyObject *row, PyObject *result, bool *save_in, bool *save_out) {
    if (!R.ready || !PyObject_TypeCheck(result, L.tensor)) return 0;
    PyObject *dt = slot(result, L.t_dtype);
    bool diff = false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(R.diff_dtypes); ++i)
        diff |= PyTuple_GET_ITEM(R.diff_dtypes, i) == dt;
    if (!diff) return 0;
    // the row's static verdict and its saves: set by Python's first record of the row
    PyObject *d = PyObject_GenericGetDict(row, nullptr);
    if (!d) return -1;
    PyObject *simple = PyDict_GetItemWithError(d, R.simple);
    PyObject *saves = simple == Py_True ? PyDict_GetItemWithError(d, R.saves) : nullptr;
    Py_DECREF(d);  // (the row keeps its dict, and the borrowed items with it)
    if (PyErr_Occurred()) return -1;
    if (!saves || !PyTuple_CheckExact(saves) || PyTuple_GET_SIZE(saves) != 2) return 0;
    *save_in = PyTuple_GET_ITEM(saves, 0) == Py_True;
    *save_out = PyTuple_GET_ITEM(saves, 1) == Py_True;
    int a = attr_true(R.anomaly, R.enabled);
    if (a != 0) return a < 0 ? -1 : 0;
    PyObject *level = PyObject_GetAttr(R.forward, R.level);
    if (!level) return -1;
    bool dual = level != Py_None;
    Py_DECREF(level);
    if (dual) return 0;
    int hooks = attr_true(R.saved_hooks, R.stack);
    if (hooks != 0) return hooks < 0 ? -1 : 0;
    return 1;
}

// A SavedTensor of ``t`` (twin: SavedTensor.__init__ without hooks or a dual level):
// ``packed`` is what unpack returns, ``node`` (a weak reference) set for an output of the
// node that saves it. New reference or NULL.
PyObject *saved_tensor(PyObject *t, PyObject *packed, PyObject *node_ref) {
    PyObject *s = R.saved_type->tp_new(R.saved_type, R.empty, nullptr);
    if (!s) return nullptr;
    int rg = requires_grad(t);
    if (rg < 0) {
        Py_DECREF(s);
        return nullptr;
    }
    PyObject *storage = slot(t, L.t_storage);
    if (!storage || !PyObject_TypeCheck(storage, L.storage)) {
        Py_DECREF(s);
        PyErr_SetString(PyExc_AttributeError, "a saved tensor has no storage");
        return nullptr;
    }
    slot(s, R.version) = Py_NewRef(slot(storage, L.s_version));
    slot(s, R.storage) = Py_NewRef(storage);
    slot(s, R.requires) = Py_NewRef(rg ? Py_True : Py_False);
    slot(s, R.tangent) = Py_NewRef(Py_None);
    slot(s, R.node) = Py_NewRef(node_ref ? node_ref : Py_None);
    slot(s, R.nr) = Py_NewRef(E.zero);
    slot(s, R.packed) = Py_NewRef(packed);
    slot(s, R.unpack) = Py_NewRef(Py_None);
    return s;
}

// What the node saves of its output: a detached alias with no base (the output's own
// grad_fn would be a reference cycle), its node kept weakly. New reference or NULL.
PyObject *saved_output(PyObject *result, PyObject *node) {
    PyObject *alias = PyObject_CallMethodNoArgs(result, R.detach);
    if (!alias) return nullptr;
    PyObject *ref = nullptr, *s = nullptr;
    if (PyObject_SetAttr(alias, R.base, Py_None) == 0 &&
        (ref = PyWeakref_NewRef(node, nullptr)) != nullptr)
        s = saved_tensor(result, alias, ref);
    Py_XDECREF(ref);
    Py_DECREF(alias);
    return s;
}

// Attach row's node to ``result``: a new reference to result, Py_None (a new reference)
// when declined, NULL with an exception set.
PyObject *record_node_raw(PyObject *row, PyObject *targs, PyObject *params, PyObject *result) {
    bool save_in = false, save_out = false;
    int ok = PyTuple_Check(targs) || PyList_Check(targs)
                 ? record_allowed(row, result, &save_in, &save_out)
                 : 0;
    if (ok <= 0) return ok < 0 ? nullptr : Py_NewRef(Py_None);
    PyObject *pair = input_edges_raw(targs);
    if (!pair) return nullptr;
    PyObject *edges = PyTuple_GET_ITEM(pair, 0), *meta = PyTuple_GET_ITEM(pair, 1);
    const Py_ssize_t n = PyTuple_GET_SIZE(edges);
    PyObject *node = nullptr, *needs = nullptr, *saved_in = nullptr, *saved_out = nullptr,
             *saved = nullptr;
    needs = PyTuple_New(n);
    if (!needs) goto fail;
    for (Py_ssize_t i = 0; i < n; ++i)
        PyTuple_SET_ITEM(needs, i,
                         Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(edges, i), 0) != Py_None
                                       ? Py_True
                                       : Py_False));
    node = R.node_type->tp_new(R.node_type, R.empty, nullptr);
    if (!node) goto fail;
    if (PyObject_SetAttr(node, R.next_functions, edges) < 0 ||
        PyObject_SetAttr(node, R.meta, meta) < 0 ||
        PyObject_SetAttr(node, R.n_outputs, R.one) < 0 ||
        PyObject_SetAttr(node, R.needs, needs) < 0 || PyObject_SetAttr(node, R.row, row) < 0 ||
        PyObject_SetAttr(node, R.params, params) < 0 ||
        PyObject_SetAttr(node, R.seq, Py_False) < 0)
        goto fail;
    if (PyObject_SetAttr(result, L.requires_grad, Py_True) < 0 ||
        PyObject_SetAttr(result, R.grad_fn, node) < 0 ||
        PyObject_SetAttr(result, R.output_nr, E.zero) < 0)
        goto fail;
    if (save_in) {
        saved_in = PyList_New(n);
        if (!saved_in) goto fail;
        for (Py_ssize_t i = 0; i < n; ++i) {
            PyObject *x = PySequence_Fast_GET_ITEM(targs, i);
            PyObject *item = PyObject_TypeCheck(x, L.tensor) ? saved_tensor(x, x, nullptr)
                                                             : Py_NewRef(x);
            if (!item) goto fail;
            PyList_SET_ITEM(saved_in, i, item);
        }
    }
    if (save_out) {
        PyObject *s = saved_output(result, node);
        if (!s) goto fail;
        saved_out = PyList_New(1);
        if (!saved_out) {
            Py_DECREF(s);
            goto fail;
        }
        PyList_SET_ITEM(saved_out, 0, s);
    }
    saved = PyTuple_Pack(2, saved_in ? saved_in : Py_None, saved_out ? saved_out : Py_None);
    if (!saved || PyObject_SetAttr(node, R.saved, saved) < 0) goto fail;
    Py_DECREF(saved);
    Py_XDECREF(saved_in);
    Py_XDECREF(saved_out);
    Py_DECREF(needs);
    Py_DECREF(node);  // the result holds it (grad_fn)
    Py_DECREF(pair);
    return Py_NewRef(result);
fail:
    Py_XDECREF(saved);
    Py_XDECREF(saved_in);
    Py_XDECREF(saved_out);
    Py_XDECREF(needs);
    Py_XDECREF(node);
    Py_DECREF(pair);
    return nullptr;
}

py::object record_node(py::object row, py::object targs, py::object params, py::object result) {
    PyObject *r = record_node_raw(row.ptr(), targs.ptr(), params.ptr(), result.ptr());
    if (!r) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(r);
}

// The plain call's recording (twin: _dispatch._plain_record; the caller found an input that
// requires grad): nothing under no_grad, else the node made here or by Python's record.
PyObject *record_plain(PyObject *row, PyObject *targs, PyObject *params, PyObject *t) {
    if (R.ready) {
        int g = attr_true(R.grad, R.enabled);
        if (g <= 0) return g < 0 ? nullptr : Py_NewRef(t);
        PyObject *r = record_node_raw(row, targs, params, t);
        if (r != Py_None) return r;
        Py_DECREF(r);
    }
    return PyObject_CallFunctionObjArgs(P.record, row, targs, params, t, nullptr);
}

// _dispatch._plain_record (the twin) for the generated fast paths: nothing unless grad mode
// is on and an input (or a list/tuple input's item) requires grad; then the node made here,
// or by Python's record where this declines.
PyObject *record_checked(PyObject *row, PyObject *targs, PyObject *params, PyObject *t) {
    if (!R.ready || (!PyTuple_Check(targs) && !PyList_Check(targs)))
        return PyObject_CallFunctionObjArgs(P.record, row, targs, params, t, nullptr);
    int rg = scan_requires_grad(targs, 0);
    if (rg <= 0) return rg < 0 ? nullptr : Py_NewRef(t);
    return record_plain(row, targs, params, t);  // (the rest: grad mode, then the node)
}

// plain_record(row, targs, params, result)
PyObject *plain_record_entry(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !P.ready) {
        PyErr_SetString(PyExc_TypeError, "plain_record(row, targs, params, result), after init_plain()");
        return nullptr;
    }
    return record_checked(args[0], args[1], args[2], args[3]);
}

// fast_record(row, targs, result): plain_record with the row's defaults (twin:
// _dispatch._fast_record)
PyObject *fast_record_entry(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !P.ready) {
        PyErr_SetString(PyExc_TypeError, "fast_record(row, targs, result), after init_plain()");
        return nullptr;
    }
    static PyObject *defaults_name = PyUnicode_InternFromString("defaults");
    if (!defaults_name) return nullptr;
    PyObject *defaults = PyObject_GetAttr(args[0], defaults_name);
    if (!defaults) return nullptr;
    PyObject *r = record_checked(args[0], args[1], defaults, args[2]);
    Py_DECREF(defaults);
    return r;
}

PyMethodDef record_defs[] = {
    {"plain_record", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(plain_record_entry)),
     METH_FASTCALL,
     "plain_record(row, targs, params, result): the result, with its backward node when grad "
     "mode is on and an input requires grad (twin: tensorplay._dispatch._plain_record)"},
    {"fast_record", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_record_entry)),
     METH_FASTCALL,
     "fast_record(row, targs, result): plain_record with the row's defaults (twin: "
     "tensorplay._dispatch._fast_record)"},
    {nullptr, nullptr, 0, nullptr},
};
