// ---- cublas_gemm ------------------------------------------------------------------------
// cuBLAS's GEMM called from C (twin: tensorplay._cublas._gemm_ctypes, the same calls through
// ctypes, which builds a ctypes object per argument on every product).
//
// Included by _C.cpp inside its anonymous namespace (it uses py::, dlopen, <limits> and
// <vector> from there). libcublas is the copy CuPy loaded; Python finds its path and hands it to
// cublas_bind(), so the module builds and imports where no CUDA toolkit exists, and only a
// product there raises. Handle creation and its workspace stay in Python (once per thread
// and device); each handle is registered here before its first product.

using CublasSetStream = int (*)(void *, void *);
using CublasGemmEx = int (*)(void *, int, int, int, int, int, const void *, const void *, int,
                             int, const void *, int, int, const void *, void *, int, int, int,
                             int);
using CublasGemmStridedBatchedEx = int (*)(void *, int, int, int, int, int, const void *,
                                           const void *, int, int, long long, const void *, int,
                                           int, long long, const void *, void *, int, int,
                                           long long, int, int, int);
using CublasGetStatusName = const char *(*)(int);

constexpr int CUBLAS_GEMM_DEFAULT_ALGO = -1;
constexpr int COMPUTE_32F = 68, COMPUTE_64F = 70;  // cublasComputeType_t

struct Cublas {
    void *lib = nullptr;
    CublasSetStream set_stream = nullptr;
    CublasGemmEx gemm = nullptr;
    CublasGemmStridedBatchedEx gemm_batched = nullptr;
    CublasGetStatusName status_name = nullptr;  // optional (cuBLAS 11.4.2 and later)
    // The registered handles. A handle is a host pointer cuBLAS dereferences, so an arbitrary
    // integer must never reach it. One per thread and device: a scan is all a lookup needs.
    std::vector<uintptr_t> handles;
};

Cublas &cublas() {
    static Cublas *c = new Cublas();  // never destroyed: no teardown order at exit
    return *c;
}

bool registered(uintptr_t handle) {
    const auto &hs = cublas().handles;
    return std::find(hs.begin(), hs.end(), handle) != hs.end();
}

// Bind the libcublas at `path` (normally already loaded: RTLD_NOLOAD first). False when it
// cannot be loaded or lacks a GEMM entry point; nothing is bound then.
bool cublas_bind(const std::string &path) {
    // dlopen("") is the main program, where any global library's symbols would be found
    if (path.empty()) throw py::value_error("cublas_bind(): path must name a libcublas file");
#if defined(__linux__)
    Cublas &cb = cublas();
    void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen(path.c_str(), RTLD_NOW);
    if (!lib) return false;
    auto set_stream = reinterpret_cast<CublasSetStream>(dlsym(lib, "cublasSetStream_v2"));
    auto gemm = reinterpret_cast<CublasGemmEx>(dlsym(lib, "cublasGemmEx"));
    auto batched =
        reinterpret_cast<CublasGemmStridedBatchedEx>(dlsym(lib, "cublasGemmStridedBatchedEx"));
    if (!set_stream || !gemm || !batched) {
        dlclose(lib);
        return false;
    }
    if (cb.lib) {
        dlclose(lib);  // the reference taken by the first bind stays
        if (cb.lib == lib) return true;
        // the registered handles belong to the first library: the second would misread them
        throw py::value_error("cublas_bind(): a different libcublas is already bound in this "
                              "process; bind the library that created the handles");
    }
    cb.status_name = reinterpret_cast<CublasGetStatusName>(dlsym(lib, "cublasGetStatusName"));
    cb.set_stream = set_stream;
    cb.gemm = gemm;
    cb.gemm_batched = batched;
    cb.lib = lib;
    return true;
#else
    (void)path;
    return false;
#endif
}

// Accept `handle` (a cublasHandle_t of the bound library, from cublasCreate_v2) in
// cublas_gemm.
void cublas_register(uintptr_t handle) {
    if (!handle) throw py::value_error("cublas_register(): handle must be a cublasHandle_t, not 0");
    if (!cublas().lib)
        throw std::runtime_error("cublas_register(): no libcublas is bound; call "
                                 "cublas_bind(path) first");
    if (!registered(handle)) cublas().handles.push_back(handle);
}

// One int argument of cublas_gemm in [lo, hi]; false with a Python error set otherwise.
bool gemm_int(PyObject *o, const char *name, long long lo, long long hi, long long &out) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "cublas_gemm(): %s must be an int, not %.100s", name,
                     Py_TYPE(o)->tp_name);
        return false;
    }
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (out == -1 && PyErr_Occurred()) return false;
    if (overflow || out < lo || out > hi) {
        if (hi == std::numeric_limits<long long>::max())  // an address or a stride
            PyErr_Format(PyExc_ValueError, "cublas_gemm(): %s must be an int >= %lld, got %R",
                         name, lo, o);
        else
            PyErr_Format(PyExc_ValueError, "cublas_gemm(): %s must be in [%lld, %lld], got %R",
                         name, lo, hi, o);
        return false;
    }
    return true;
}

constexpr const char *GEMM_ARGS[] = {
    "handle", "stream", "set_stream", "transa", "transb", "m", "n", "k", "a", "lda",
    "stride_a", "b", "ldb", "stride_b", "c", "ldc", "stride_c", "batch", "dtype", "compute"};
constexpr Py_ssize_t GEMM_NARGS = sizeof(GEMM_ARGS) / sizeof(GEMM_ARGS[0]);

PyObject *gemm_failed(const char *what, int status) {
    const char *name = cublas().status_name ? cublas().status_name(status) : nullptr;
    PyErr_Format(PyExc_RuntimeError, "cuBLAS %s failed with status %d (%s)", what, status,
                 name ? name : "no name");
    return nullptr;
}

// METH_FASTCALL rather than pybind11: a training step makes several products, and parsing the
// 20 ints here costs a fraction of pybind11's overload dispatch.
PyObject *cublas_gemm(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != GEMM_NARGS) {
        PyErr_Format(PyExc_TypeError,
                     "cublas_gemm() takes 20 positional arguments (handle, stream, set_stream, "
                     "transa, transb, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, "
                     "stride_c, batch, dtype, compute) but %zd were given",
                     nargs);
        return nullptr;
    }
    // the range of each argument, in GEMM_ARGS order: cuBLAS takes sizes as int, strides as
    // long long; a zero address is refused (an empty product never reaches cuBLAS)
    constexpr long long I32 = std::numeric_limits<int>::max();
    constexpr long long I64 = std::numeric_limits<long long>::max();
    static constexpr long long lo[] = {1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0,
                                       1, 1, 0, 1, 1, 0, 0, 0, 0};
    static constexpr long long hi[] = {I64, I64, 1,   2,   2,   I32, I32, I32, I64, I32,
                                       I64, I64, I32, I64, I64, I32, I64, I32, I32, I32};
    long long v[GEMM_NARGS];
    for (Py_ssize_t i = 0; i < GEMM_NARGS; ++i)
        if (!gemm_int(args[i], GEMM_ARGS[i], lo[i], hi[i], v[i])) return nullptr;
    const bool set = v[2] != 0;
    const int transa = static_cast<int>(v[3]), transb = static_cast<int>(v[4]);
    const int m = static_cast<int>(v[5]), n = static_cast<int>(v[6]), k = static_cast<int>(v[7]);
    const int lda = static_cast<int>(v[9]), ldb = static_cast<int>(v[12]);
    const int ldc = static_cast<int>(v[15]), batch = static_cast<int>(v[17]);
    const int dtype = static_cast<int>(v[18]), compute = static_cast<int>(v[19]);
    // column-major: op(A) is m x k, op(B) is k x n, C is m x n
    const int rows_a = transa == 0 ? m : k, rows_b = transb == 0 ? k : n;
    if (lda < rows_a || ldb < rows_b || ldc < m) {
        PyErr_Format(PyExc_ValueError,
                     "cublas_gemm(): a leading dimension is below its matrix's rows (lda=%d "
                     "needs >= %d, ldb=%d needs >= %d, ldc=%d needs >= %d)",
                     lda, rows_a, ldb, rows_b, ldc, m);
        return nullptr;
    }
    // cudaDataType_t of A, B and C -> the compute type it goes with here
    const bool known = (dtype == 0 && compute == COMPUTE_32F) ||   // float32
                       (dtype == 1 && compute == COMPUTE_64F) ||   // float64
                       (dtype == 2 && compute == COMPUTE_32F) ||   // float16
                       (dtype == 14 && compute == COMPUTE_32F);    // bfloat16
    if (!known) {
        PyErr_Format(PyExc_ValueError,
                     "cublas_gemm(): unsupported (dtype, compute) = (%d, %d); expected (0, 68) "
                     "float32, (1, 70) float64, (2, 68) float16 or (14, 68) bfloat16",
                     dtype, compute);
        return nullptr;
    }
    Cublas &cb = cublas();
    if (!cb.lib) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cublas_gemm(): no libcublas is bound; call cublas_bind(path) first");
        return nullptr;
    }
    const uintptr_t handle = static_cast<uintptr_t>(v[0]), stream = static_cast<uintptr_t>(v[1]);
    if (!registered(handle)) {
        PyErr_Format(PyExc_ValueError,
                     "cublas_gemm(): handle %R was not registered with cublas_register()",
                     args[0]);
        return nullptr;
    }
    void *h = reinterpret_cast<void *>(handle);
    const void *a = reinterpret_cast<const void *>(v[8]);
    const void *b = reinterpret_cast<const void *>(v[11]);
    void *c = reinterpret_cast<void *>(v[14]);
    union {
        float f;
        double d;
    } one, zero;
    if (compute == COMPUTE_64F) {
        one.d = 1.0;
        zero.d = 0.0;
    } else {
        one.f = 1.0f;
        zero.f = 0.0f;
    }
    int set_status = 0, status = 0;
    // cuBLAS may pick and load kernels on a new shape (milliseconds): other threads run meanwhile
    Py_BEGIN_ALLOW_THREADS
    if (set) set_status = cb.set_stream(h, reinterpret_cast<void *>(stream));
    if (set_status == 0) {
        if (batch == 0)
            status = cb.gemm(h, transa, transb, m, n, k, &one, a, dtype, lda, b, dtype, ldb,
                             &zero, c, dtype, ldc, compute, CUBLAS_GEMM_DEFAULT_ALGO);
        else
            status = cb.gemm_batched(h, transa, transb, m, n, k, &one, a, dtype, lda, v[10], b,
                                     dtype, ldb, v[13], &zero, c, dtype, ldc, v[16], batch,
                                     compute, CUBLAS_GEMM_DEFAULT_ALGO);
    }
    Py_END_ALLOW_THREADS
    if (set_status != 0) return gemm_failed("cublasSetStream", set_status);
    if (status != 0)
        return gemm_failed(batch ? "cublasGemmStridedBatchedEx" : "cublasGemmEx", status);
    Py_RETURN_NONE;
}

PyMethodDef cublas_gemm_defs[] = {
    {"cublas_gemm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(cublas_gemm)),
     METH_FASTCALL,
     "cublas_gemm(handle, stream, set_stream, transa, transb, m, n, k, a, lda, stride_a, b, "
     "ldb, stride_b, c, ldc, stride_c, batch, dtype, compute, /)\n--\n\n"
     "C = op(A) @ op(B) in cuBLAS's column-major terms (alpha 1, beta 0) with a handle "
     "registered by cublas_register(), first setting its stream to `stream` when set_stream "
     "is true: cublasGemmEx when batch is 0, else cublasGemmStridedBatchedEx over `batch` "
     "products. Addresses are ints; transa/transb 0 (N), 1 (T) or 2 (C); dtype a "
     "cudaDataType_t with its compute type (0/68 float32, 1/70 float64, 2/68 float16, 14/68 "
     "bfloat16). Raises ValueError for arguments cuBLAS would refuse or misread, RuntimeError "
     "for a failed call (twin: tensorplay._cublas._gemm_ctypes)."},
    {nullptr, nullptr, 0, nullptr},
};
