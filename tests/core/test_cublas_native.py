"""``tensorplay._C.cublas_gemm``, the C call of cuBLAS's GEMM behind ``_cublas.matmul``, and
its ctypes twin ``_cublas._gemm_ctypes``.

Without a GPU: misuse raises (TypeError/ValueError before any cuBLAS call, RuntimeError before
``cublas_bind``), never a crash; and a stand-in libcublas compiled here records what each
route hands to cuBLAS (arguments in cuBLAS's order, alpha 1 and beta 0 in the compute type,
the stream set only when asked), in a child process, since a process binds one libcublas.
With CUDA: products against numpy through the C route, and the same bits from the twin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _cublas
from tensorplay._native import NATIVE, REASON

F32, F64, C32F, C64F = 0, 1, 68, 70
N, T = 0, 1
# handle, stream, set_stream, transa, transb, m, n, k, a, lda, stride_a, b, ldb, stride_b,
# c, ldc, stride_c, batch, dtype, compute: a 2-D float32 product (4 x 3 = (4 x 5) @ (5 x 3))
GOOD = [0x1000, 5, True, N, N, 4, 3, 5, 0x2000, 4, 0, 0x3000, 5, 0, 0x4000, 4, 0, 0, F32, C32F]


def _native():
    if NATIVE is None:
        pytest.skip(f"tensorplay._C is not loaded: {REASON}")
    return NATIVE


def _with(**changes):
    names = _cublas._gemm_ctypes.__code__.co_varnames[:20]
    args = list(GOOD)
    for name, value in changes.items():
        args[names.index(name)] = value
    return args


# ---- misuse of the C call: an error, never a crash ------------------------------------------


def test_the_argument_count_is_checked():
    C = _native()
    with pytest.raises(TypeError, match=r"takes 20 positional arguments .* but 19 were given"):
        C.cublas_gemm(*GOOD[:-1])


@pytest.mark.parametrize("name,value", [("m", 2.0), ("a", None), ("dtype", "float32")])
def test_arguments_must_be_ints(name, value):
    C = _native()
    with pytest.raises(TypeError, match=rf"cublas_gemm\(\): {name} must be an int"):
        C.cublas_gemm(*_with(**{name: value}))


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("handle", 0, r"handle must be an int >= 1, got 0"),
        ("a", 0, r"a must be an int >= 1, got 0"),
        ("c", -8, r"c must be an int >= 1, got -8"),
        ("stream", -1, r"stream must be an int >= 0"),
        ("set_stream", 2, r"set_stream must be in \[0, 1\]"),
        ("transa", 3, r"transa must be in \[0, 2\], got 3"),
        ("m", -1, r"m must be in \[0, 2147483647\], got -1"),
        ("k", 1 << 31, r"k must be in \[0, 2147483647\]"),
        ("stride_b", -4, r"stride_b must be an int >= 0"),
        ("batch", -1, r"batch must be in \[0, 2147483647\]"),
        ("b", 1 << 80, r"b must be an int >= 1"),
        ("lda", 0, r"lda must be in \[1, 2147483647\]"),
    ],
)
def test_out_of_range_arguments_raise_value_error(name, value, message):
    C = _native()
    with pytest.raises(ValueError, match=message):
        C.cublas_gemm(*_with(**{name: value}))


@pytest.mark.parametrize(
    "changes",
    [{"lda": 3}, {"transa": T, "lda": 4}, {"ldb": 4}, {"transb": T, "ldb": 2}, {"ldc": 3}],
)
def test_a_leading_dimension_below_the_rows_raises(changes):
    C = _native()
    with pytest.raises(ValueError, match=r"a leading dimension is below its matrix's rows"):
        C.cublas_gemm(*_with(**changes))


@pytest.mark.parametrize("dtype,compute", [(F32, C64F), (F64, C32F), (3, C32F), (F32, 77)])
def test_unknown_dtype_and_compute_pairs_raise(dtype, compute):
    C = _native()
    with pytest.raises(ValueError, match=r"unsupported \(dtype, compute\)"):
        C.cublas_gemm(*_with(dtype=dtype, compute=compute))


def test_a_library_without_gemm_is_not_bound():
    C = _native()
    assert C.cublas_bind("/nonexistent/libcublas.so.12") is False
    assert C.cublas_bind("libm.so.6") is False  # loads, but has no cublasGemmEx
    with pytest.raises(ValueError, match=r"path must name a libcublas file"):
        C.cublas_bind("")


def test_registering_handle_zero_raises():
    C = _native()
    with pytest.raises(ValueError, match=r"handle must be a cublasHandle_t, not 0"):
        C.cublas_register(0)


# ---- both routes against a stand-in libcublas, in a child process ---------------------------

_FAKE_CUBLAS = r"""
#include <stdio.h>
long long tp_args[24];
double tp_alpha, tp_beta;
int tp_which, tp_stream_sets, tp_set_status, tp_gemm_status;
long long tp_stream;

int cublasCreate_v2(void **h) { *h = (void *)0x1000; return 0; }
int cublasSetWorkspace_v2(void *h, void *w, unsigned long n) { return 0; }
int cublasSetStream_v2(void *h, void *s) {
  tp_stream_sets++;
  tp_stream = (long long)s;
  return tp_set_status;
}
const char *cublasGetStatusName(int s) { return s == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : "OTHER"; }
static void scalars(int compute, const void *alpha, const void *beta) {
  tp_alpha = compute == 70 ? *(const double *)alpha : *(const float *)alpha;
  tp_beta = compute == 70 ? *(const double *)beta : *(const float *)beta;
}
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
                 int at, int lda, const void *B, int bt, int ldb, const void *beta, void *C,
                 int ct, int ldc, int compute, int algo) {
  long long v[] = {(long long)h, ta, tb, m, n, k, (long long)A, at, lda, (long long)B, bt, ldb,
                   (long long)C, ct, ldc, compute, algo};
  for (int i = 0; i < 17; ++i) tp_args[i] = v[i];
  scalars(compute, alpha, beta);
  tp_which = 1;
  return tp_gemm_status;
}
int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                               const void *A, int at, int lda, long long sa, const void *B,
                               int bt, int ldb, long long sb, const void *beta, void *C, int ct,
                               int ldc, long long sc, int batch, int compute, int algo) {
  long long v[] = {(long long)h, ta, tb, m, n, k, (long long)A, at, lda, sa, (long long)B, bt,
                   ldb, sb, (long long)C, ct, ldc, sc, batch, compute, algo};
  for (int i = 0; i < 21; ++i) tp_args[i] = v[i];
  scalars(compute, alpha, beta);
  tp_which = 2;
  return tp_gemm_status;
}
"""

# Runs in the child: each scenario's outcome, by name, as JSON on stdout.
_CHILD = r"""
import ctypes, json, sys
from tensorplay import _cublas
from tensorplay._native import NATIVE

path = sys.argv[1]
GOOD = json.loads(sys.argv[2])
lib = _cublas._declare(ctypes.CDLL(path))
fake = {name: getattr(ctypes, t).in_dll(lib, name) for name, t in (
    ("tp_which", "c_int"), ("tp_stream_sets", "c_int"), ("tp_set_status", "c_int"),
    ("tp_gemm_status", "c_int"), ("tp_stream", "c_longlong"), ("tp_alpha", "c_double"),
    ("tp_beta", "c_double"))}
args = (ctypes.c_longlong * 24).in_dll(lib, "tp_args")
BATCHED = GOOD[:16] + [12, 2, 1, 70]  # float64, stride_c 12, 2 products
BATCHED[10], BATCHED[13] = 20, 0  # stride_a 20, b repeats


def run(gemm, call):
    for name in ("tp_which", "tp_stream_sets", "tp_set_status", "tp_gemm_status"):
        fake[name].value = 0
    try:
        gemm(*call)
        error = None
    except Exception as e:
        error = [type(e).__name__, str(e)]
    return {"error": error, "which": fake["tp_which"].value, "args": list(args[:21]),
            "alpha": fake["tp_alpha"].value, "beta": fake["tp_beta"].value,
            "stream_sets": fake["tp_stream_sets"].value, "stream": fake["tp_stream"].value}


def failing(gemm, call, status_name):
    fake["tp_set_status" if status_name == "set" else "tp_gemm_status"].value = 7
    try:
        gemm(*call)
    except Exception as e:
        return [type(e).__name__, str(e)]
    finally:
        fake["tp_set_status"].value = fake["tp_gemm_status"].value = 0


def scenarios(gemm):
    no_set = list(BATCHED)
    no_set[2] = False
    return {"plain": run(gemm, GOOD), "batched": run(gemm, BATCHED),
            "no_stream": run(gemm, no_set), "gemm_fails": failing(gemm, GOOD, "gemm"),
            "set_fails": failing(gemm, GOOD, "set")}


out = {"native": NATIVE is not None}
_cublas._lib = lib
out["twin"] = scenarios(_cublas._gemm_ctypes)
if NATIVE is not None:
    out["before_bind"] = run(NATIVE.cublas_gemm, GOOD)["error"]
    try:
        NATIVE.cublas_register(GOOD[0])
    except RuntimeError as e:
        out["register_before_bind"] = str(e)
    out["bind"] = [NATIVE.cublas_bind(path), NATIVE.cublas_bind(path)]
    out["unregistered"] = run(NATIVE.cublas_gemm, GOOD)["error"]
    NATIVE.cublas_register(GOOD[0])
    out["native"] = scenarios(NATIVE.cublas_gemm)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """What each route handed the stand-in libcublas, scenario by scenario."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcublas")
    tmp = tmp_path_factory.mktemp("fake_cublas")
    (tmp / "fake.c").write_text(_FAKE_CUBLAS)
    lib = tmp / "libcublas.so.99"
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, tmp / "fake.c"], check=True)
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD), str(lib), json.dumps(GOOD)],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def _native_recorded(recorded):
    if not recorded["native"]:
        pytest.skip(f"tensorplay._C is not loaded: {REASON}")
    return recorded["native"]


def test_calling_before_bind_raises_runtime_error(recorded):
    _native_recorded(recorded)
    assert recorded["before_bind"] == [
        "RuntimeError",
        "cublas_gemm(): no libcublas is bound; call cublas_bind(path) first",
    ]
    assert "call cublas_bind(path) first" in recorded["register_before_bind"]


def test_bind_finds_the_gemm_entry_points_and_binds_once(recorded):
    _native_recorded(recorded)
    assert recorded["bind"] == [True, True]


def test_an_unregistered_handle_is_refused(recorded):
    _native_recorded(recorded)
    kind, message = recorded["unregistered"]
    assert kind == "ValueError" and "was not registered with cublas_register()" in message


@pytest.mark.parametrize("route", ["native", "twin"])
def test_a_plain_product_calls_gemm_ex_in_cublas_order(recorded, route):
    got = recorded["twin"] if route == "twin" else _native_recorded(recorded)
    plain = got["plain"]
    assert plain["error"] is None and plain["which"] == 1
    h, _, _, ta, tb, m, n, k, a, lda, _, b, ldb, _, c, ldc, _, _, dtype, compute = GOOD
    want = [h, ta, tb, m, n, k, a, dtype, lda, b, dtype, ldb, c, dtype, ldc, compute, -1]
    assert plain["args"][:17] == want
    assert (plain["alpha"], plain["beta"]) == (1.0, 0.0)
    assert plain["stream_sets"] == 1 and plain["stream"] == GOOD[1]


@pytest.mark.parametrize("route", ["native", "twin"])
def test_a_batched_product_calls_the_strided_gemm_with_double_scalars(recorded, route):
    got = recorded["twin"] if route == "twin" else _native_recorded(recorded)
    batched = got["batched"]
    assert batched["error"] is None and batched["which"] == 2
    h, _, _, ta, tb, m, n, k, a, lda, _, b, ldb, _, c, ldc = GOOD[:16]
    want = [h, ta, tb, m, n, k, a, F64, lda, 20, b, F64, ldb, 0, c, F64, ldc, 12, 2, C64F, -1]
    assert batched["args"] == want
    assert (batched["alpha"], batched["beta"]) == (1.0, 0.0)


@pytest.mark.parametrize("route", ["native", "twin"])
def test_the_stream_is_set_only_when_asked(recorded, route):
    got = recorded["twin"] if route == "twin" else _native_recorded(recorded)
    assert got["no_stream"]["error"] is None and got["no_stream"]["stream_sets"] == 0


@pytest.mark.parametrize("route", ["native", "twin"])
def test_a_failed_call_raises_naming_the_function_and_status(recorded, route):
    got = recorded["twin"] if route == "twin" else _native_recorded(recorded)
    assert got["gemm_fails"] == [
        "RuntimeError",
        "cuBLAS cublasGemmEx failed with status 7 (CUBLAS_STATUS_INVALID_VALUE)",
    ]
    assert got["set_fails"] == [
        "RuntimeError",
        "cuBLAS cublasSetStream failed with status 7 (CUBLAS_STATUS_INVALID_VALUE)",
    ]


# ---- with CUDA: products against numpy ------------------------------------------------------


def _cupy():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    return pytest.importorskip("cupy")


LAYOUTS = [  # (name, (xp, r) -> (a, b)): one layout, built by numpy and by CuPy from r(*shape)
    ("2-D", lambda xp, r: (r(64, 48), r(48, 32))),
    ("a transposed", lambda xp, r: (r(48, 64).T, r(48, 32))),
    ("b transposed", lambda xp, r: (r(64, 48), r(32, 48).T)),
    ("both transposed", lambda xp, r: (r(48, 64).T, r(32, 48).T)),
    ("row slices", lambda xp, r: (r(128, 48)[::2], r(48, 32))),
    ("batched", lambda xp, r: (r(3, 16, 8), r(3, 8, 5))),
    ("batched, b shared", lambda xp, r: (r(3, 16, 8), r(1, 8, 5))),
    (
        "batched, transposed",
        lambda xp, r: (r(3, 8, 16).transpose(0, 2, 1), r(3, 5, 8).transpose(0, 2, 1)),
    ),
    ("4-D attention", lambda xp, r: (r(2, 3, 7, 4), r(2, 3, 4, 7))),
    ("3-D @ 2-D", lambda xp, r: (r(4, 6, 8), r(8, 3))),
]


def _operands(make, dtype, cp):
    """(numpy a, numpy b, CuPy a, CuPy b) of one layout, the same values."""
    arrays = []
    for xp in (np, cp):
        rng = np.random.default_rng(0)

        def r(*shape, xp=xp):
            return xp.asarray(rng.standard_normal(shape).astype(dtype))

        arrays += list(make(xp, r))
    return arrays


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,make", LAYOUTS, ids=[n for n, _ in LAYOUTS])
def test_products_match_numpy_through_the_c_call(monkeypatch, name, make, dtype):
    cp = _cupy()
    C = _native()
    a, b, da, db = _operands(make, dtype, cp)
    assert _cublas.matmul(da, db) is not None  # binds the library on the first product
    assert _cublas._gemm is C.cublas_gemm, _cublas.unavailable_reason()
    calls = []

    def counted(*args):
        calls.append(args[17])  # the batch count: 0 for cublasGemmEx
        return C.cublas_gemm(*args)

    monkeypatch.setattr(_cublas, "_gemm", counted)
    got = _cublas.matmul(da, db)
    assert calls, "cuBLAS was not called"
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(cp.asnumpy(got), a @ b, rtol=rtol, atol=rtol)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_ctypes_twin_gives_the_same_bits(monkeypatch, dtype):
    cp = _cupy()
    _native()
    _, _, da, db = _operands(LAYOUTS[0][1], dtype, cp)
    _, _, ba, bb = _operands(LAYOUTS[6][1], dtype, cp)
    native = [_cublas.matmul(da, db), _cublas.matmul(ba, bb)]
    monkeypatch.setattr(_cublas, "_gemm", _cublas._gemm_ctypes)
    twin = [_cublas.matmul(da, db), _cublas.matmul(ba, bb)]
    for got, want in zip(twin, native, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want))


@pytest.mark.cuda
def test_a_product_on_another_stream_runs_there():
    cp = _cupy()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 32)), rng.standard_normal((32, 16))
    da, db = cp.asarray(a), cp.asarray(b)
    _cublas.matmul(da, db)  # the default stream first, so the handle's stream changes
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        got = _cublas.matmul(da, db)
    stream.synchronize()
    np.testing.assert_allclose(cp.asnumpy(got), a @ b, rtol=1e-12)
    entry = _cublas._handles[(_cublas._get_ident(), got.data.device_id)]
    assert entry[2] == stream.ptr
    again = _cublas.matmul(da, db)  # back on the default stream
    np.testing.assert_allclose(cp.asnumpy(again), a @ b, rtol=1e-12)
    assert entry[2] == cp.cuda.get_current_stream().ptr


@pytest.mark.cuda
def test_tp_matmul_takes_the_c_call(monkeypatch):
    _cupy()
    C = _native()
    x = tp.randn(8, 5, device="cuda")
    w = tp.randn(5, 3, device="cuda")
    (x @ w).sum()  # binds the library
    calls = []
    monkeypatch.setattr(_cublas, "_gemm", lambda *args: (calls.append(1), C.cublas_gemm(*args)))
    got = (x @ w).cpu().numpy()
    np.testing.assert_allclose(got, x.cpu().numpy() @ w.cpu().numpy(), rtol=1e-5, atol=1e-6)
    assert calls == [1]
