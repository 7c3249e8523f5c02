"""What a kernel call may not do: write where it cannot safely (expanded, overlapping or
grad-requiring tensors), overwrite a saved tensor unnoticed, or end the process by throwing
something that is not a std::exception. Cases that crashed the process before the fix run
in a subprocess, so a regression fails the test instead of killing pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils import cpp_jit

pytestmark = pytest.mark.usefixtures("engine")

SRC = r"""
#include <string>

// writes numel() elements from data_ptr(): a kernel that trusts its caller's layout
void fill7(tvm::ffi::TensorView x) {
  double* p = static_cast<double*>(x.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = 7;
}
// reads a 1-d tensor through its stride, so expanded inputs are fine
double strided_sum(tvm::ffi::TensorView x) {
  const double* p = static_cast<const double*>(x.data_ptr());
  double s = 0;
  for (int64_t i = 0; i < x.size(0); ++i) s += p[i * x.stride(0)];
  return s;
}
void copy_into(tvm::ffi::TensorView src, tvm::ffi::TensorView dst) {
  const double* ps = static_cast<const double*>(src.data_ptr());
  double* pd = static_cast<double*>(dst.data_ptr());
  for (int64_t i = 0; i < dst.numel(); ++i) pd[i] = ps[i * src.stride(0)];
}
struct NotAnException { int code; };
void throw_int() { throw 42; }
void throw_struct() { throw NotAnException{3}; }
void throw_string() { throw std::string("a bare string"); }
"""
FUNCS = ["fill7", "strided_sum", "copy_into", "throw_int", "throw_struct", "throw_string"]


def _load(**kwargs):
    return cpp_jit.load_inline("safety", cpp_sources=SRC, functions=FUNCS, **kwargs)


@pytest.fixture(scope="module")
def mod():
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    return _load()


@pytest.fixture(scope="module")
def reader():
    """The same library, with the arguments its kernels only read declared read-only."""
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    return _load(read_only={"strided_sum": [0], "copy_into": 0})


def _survives(code: str, cache_dir) -> str:
    """Run ``code`` (after loading ``m``) in a fresh interpreter; it must exit normally."""
    prelude = f"""
        import tensorplay as tp
        from tensorplay.utils import cpp_jit
        m = cpp_jit.load_inline("safety", cpp_sources={SRC!r}, functions={FUNCS!r})
    """
    env = {**os.environ, "TENSORPLAY_CACHE_DIR": str(cache_dir)}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, f"exit status {out.returncode}\n{out.stderr[-3000:]}"
    return out.stdout


# ---- 20: tensors a kernel cannot write safely -------------------------------------------------


def test_expanded_tensor_is_refused_before_the_kernel_runs(cache_dir):
    # this call used to write 80 MB past an 8-byte buffer (SIGSEGV)
    out = _survives(
        """
        base = tp.zeros(1, dtype=tp.float64)
        try:
            m.fill7(base.expand(10**7))
        except BufferError as exc:
            print(exc)
        print("base", base.tolist())
        """,
        cache_dir,
    )
    assert "safety.fill7: argument 0 (shape [10000000], strides [0]) is expanded" in out
    assert "x.clone()" in out and "read_only={'fill7': [0]}" in out
    assert "base [0.0]" in out  # nothing was written


def test_overlapping_view_is_refused(mod):
    base = tp.zeros(4, dtype=tp.float64)
    overlapping = base.as_strided((3, 2), (1, 1))  # rows share elements
    with pytest.raises(BufferError, match=r"argument 0 \(shape \[3, 2\], strides \[1, 1\]\)"):
        mod.fill7(overlapping)
    assert base.tolist() == [0.0] * 4


def test_non_contiguous_tensor_without_overlap_is_written(mod):
    x = tp.zeros(3, 4, dtype=tp.float64).t()  # transposed: distinct elements, 12 of them
    mod.fill7(x)
    assert x.tolist() == [[7.0] * 3] * 4


def test_expanded_tensor_declared_read_only_is_passed(mod, reader):
    x = tp.tensor([2.0], dtype=tp.float64).expand(5)
    assert reader.strided_sum(x) == 10.0
    with pytest.raises(BufferError, match="expanded"):
        mod.strided_sum(x)  # the same kernel, not declared: treated as written
    dst = tp.zeros(5, dtype=tp.float64)
    reader.copy_into(x, dst)
    assert dst.tolist() == [2.0] * 5
    with pytest.raises(BufferError, match=r"safety\.copy_into: argument 1"):
        reader.copy_into(dst, x)  # only argument 0 is read-only


def test_tensors_inside_a_list_argument_are_checked(mod):
    with pytest.raises(BufferError, match=r"argument 0\[1\]"):
        mod.fill7([tp.zeros(2, dtype=tp.float64), tp.zeros(1, dtype=tp.float64).expand(3)])


# ---- 20: autograd sees kernel writes as in-place operations ------------------------------------


def test_writing_a_leaf_that_requires_grad_is_refused(mod):
    w = tp.zeros(3, dtype=tp.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="argument 0 is a leaf tensor that requires grad"):
        mod.fill7(w)
    assert w.detach().tolist() == [0.0] * 3
    with pytest.raises(RuntimeError, match="requires grad, and autograd cannot see"):
        mod.fill7(w * 2)  # a non-leaf: the write would be invisible to its gradient


def test_no_grad_allows_writing_a_leaf_and_bumps_its_version(mod):
    w = tp.zeros(3, dtype=tp.float64, requires_grad=True)
    before = w._version
    with tp.no_grad():
        mod.fill7(w)  # an optimizer-style update
    assert w.detach().tolist() == [7.0] * 3
    assert w._version == before + 1


def test_read_only_leaf_that_requires_grad_is_passed_and_keeps_its_version(reader):
    w = tp.tensor([1.0, 2.0, 3.0], dtype=tp.float64, requires_grad=True)
    before = w._version
    assert reader.strided_sum(w) == 6.0
    assert w._version == before


def test_overwriting_a_tensor_saved_for_backward_fails_in_backward(mod):
    w = tp.ones(3, dtype=tp.float64, requires_grad=True)
    x = tp.ones(3, dtype=tp.float64)
    y = (w * x).sum()  # mul saves x for w's gradient
    mod.fill7(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_reading_a_tensor_saved_for_backward_keeps_backward_valid(reader):
    w = tp.ones(3, dtype=tp.float64, requires_grad=True)
    x = tp.tensor([1.0, 2.0, 3.0], dtype=tp.float64)
    y = (w * x).sum()
    assert reader.strided_sum(x) == 6.0
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0, 3.0])


def test_version_is_bumped_even_when_the_kernel_raises(mod):
    x = tp.zeros(2, dtype=tp.float64)
    before = x._version
    with pytest.raises(TypeError):
        mod.fill7(x, 1)  # wrong arity: refused by the engine
    assert x._version == before + 1  # conservatively counted as a write


@pytest.mark.parametrize(
    ("read_only", "exc", "msg"),
    [
        ({"fil7": [0]}, ValueError, "read_only names 'fil7', which module 'safety' does not"),
        ({"fill7": [-1]}, ValueError, r"read_only\['fill7'\]: -1 is not an argument position"),
        ({"fill7": "x"}, TypeError, r"read_only\['fill7'\] must be an argument position"),
        (["fill7"], TypeError, "read_only must map function names"),
    ],
)
def test_malformed_read_only_is_named(read_only, exc, msg):
    with pytest.raises(exc, match=msg):
        _load(read_only=read_only)


# ---- 21: whatever a kernel throws becomes a Python exception ------------------------------------


def test_non_std_exceptions_raise_runtime_error_naming_the_kernel(cache_dir):
    # `throw 42` used to end the process in std::terminate (SIGABRT)
    out = _survives(
        """
        for name in ("throw_int", "throw_struct", "throw_string"):
            try:
                getattr(m, name)()
            except RuntimeError as exc:
                print(str(exc).splitlines()[0])
        print("alive")
        """,
        cache_dir,
    )
    lines = out.splitlines()
    assert lines[0].startswith("safety.throw_int: the kernel threw a C++ exception of type int,")
    assert "safety.throw_struct: " in lines[1] and "NotAnException" in lines[1]
    assert "safety.throw_string: " in lines[2] and "std::" in lines[2]
    assert lines[-1] == "alive"


# ---- 19c: every module, the system library included, answers implements_function ---------------


def test_implements_function_on_loaded_modules(mod):
    assert mod.implements_function("fill7")
    assert not mod.implements_function("fill8")


def test_implements_function_on_the_system_lib(system_lib_prefix):
    lib = cpp_jit.system_lib(system_lib_prefix)
    assert lib.implements_function("add_one")
    assert not lib.implements_function("missing")
    assert lib.add_one(1) == 2


def test_a_kernel_named_like_a_module_method_is_reached_by_item():
    mod = cpp_jit.load_inline(
        "shadowed",
        cpp_sources="int64_t implements_function(int64_t x) { return x * 2; }",
        functions=["implements_function"],
    )
    assert mod["implements_function"](21) == 42
    assert mod.implements_function("implements_function") is True
