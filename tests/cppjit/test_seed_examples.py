"""The examples of "C and C++ kernels (JIT)" in the extending notes, verbatim.

Python blocks are copied character for character; the two C++ fragments of that section
(the dtype check and the allocating kernel) are compiled inside minimal kernels. The
ahead-of-time block writes ``cpp_sources=...`` as a placeholder for "the sources above":
the test passes the ``scale_cpu`` source there and changes nothing else.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils import cpp_jit

pytestmark = pytest.mark.usefixtures("engine")

SCALE_EXAMPLE = r'''
import tensorplay as tp
from tensorplay.utils import cpp_jit

mod = cpp_jit.load_inline(
    name="myext",
    cpp_sources=r"""
    void scale_cpu(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
      for (int64_t i = 0; i < x.size(0); ++i) {
        static_cast<float*>(y.data_ptr())[i] =
            static_cast<float*>(x.data_ptr())[i] * 3.0f;
      }
    }
    """,
    functions=["scale_cpu"],
)

x = tp.tensor([1.0, 2.0, 3.0])
y = tp.empty_like(x)
mod.scale_cpu(x, y)          # y == 3 * x, no copies
'''

SCALARS_EXAMPLE = r'''
mod = cpp_jit.load_inline(
    name="myext2",
    cpp_sources=r"""
    #include <string>

    double weighted_sum(tvm::ffi::TensorView x, double factor,
                        int64_t offset, const std::string& tag) {
      double s = static_cast<double>(offset);
      for (int64_t i = 0; i < x.numel(); ++i)
        s += static_cast<float*>(x.data_ptr())[i];
      return s * factor + tag.size();
    }
    """,
    functions=["weighted_sum"],
)
mod.weighted_sum(tp.tensor([1.0, 2.0, 3.0]), 10.0, 5, "abcd")  # -> 114.0
'''

THROW_FRAGMENT = r"""
if (x.dtype().code != kDLFloat || x.dtype().bits != 32) {
  TVM_FFI_THROW(TypeError) << "expected float32";
}
"""

ALLOC_FRAGMENT = r"""
tvm::ffi::Tensor doubled(tvm::ffi::TensorView x) {
  tvm::ffi::Tensor y = tvm::ffi::Tensor::FromEnvAlloc(
      TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  tvm::ffi::TensorView yv(y);
  // write into yv ...
  return y;
}
"""

AOT_EXAMPLE = """
lib = cpp_jit.build_inline(
    name="myext", cpp_sources=..., functions=["scale_cpu"])
# later, possibly in another process:
mod = cpp_jit.load_module(lib)
"""

SCALE_SOURCE = r"""
    void scale_cpu(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
      for (int64_t i = 0; i < x.size(0); ++i) {
        static_cast<float*>(y.data_ptr())[i] =
            static_cast<float*>(x.data_ptr())[i] * 3.0f;
      }
    }
    """


def test_scale_example_writes_three_times_x_into_y():
    ns: dict = {}
    exec(SCALE_EXAMPLE, ns)  # noqa: S102
    x, y = ns["x"], ns["y"]
    np.testing.assert_array_equal(y.numpy(), 3 * np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])  # the input is untouched


def test_scale_example_shares_memory_with_tensorplay_tensors():
    ns: dict = {}
    exec(SCALE_EXAMPLE, ns)  # noqa: S102
    x = tp.arange(1000, dtype=tp.float32)
    y = tp.zeros(1000)
    before = y.data_ptr()
    ns["mod"].scale_cpu(x, y)
    assert y.data_ptr() == before  # written in place: the kernel saw y's own memory
    np.testing.assert_array_equal(y.numpy(), 3 * np.arange(1000, dtype=np.float32))


def test_scalars_example_returns_114():
    ns: dict = {"tp": tp, "cpp_jit": cpp_jit}
    exec(SCALARS_EXAMPLE, ns)  # noqa: S102
    out = ns["mod"].weighted_sum(tp.tensor([1.0, 2.0, 3.0]), 10.0, 5, "abcd")
    assert out == 114.0 and isinstance(out, float)


def test_throw_fragment_arrives_as_python_type_error():
    src = "void check_f32(tvm::ffi::TensorView x) {" + THROW_FRAGMENT + "}"
    mod = cpp_jit.load_inline("seed_throw", cpp_sources=src, functions=["check_f32"])
    assert mod.check_f32(tp.ones(3)) is None
    with pytest.raises(TypeError, match="expected float32"):
        mod.check_f32(tp.ones(3, dtype=tp.float64))


def test_alloc_fragment_returns_a_tensor_of_the_input_shape():
    mod = cpp_jit.load_inline("seed_alloc", cpp_sources=ALLOC_FRAGMENT, functions=["doubled"])
    x = tp.ones(2, 5)
    out = tp.from_dlpack(mod.doubled(x))  # the seed's way back, zero-copy
    assert isinstance(out, tp.Tensor)
    assert tuple(out.shape) == (2, 5) and out.dtype == tp.float32 and out.device.type == "cpu"


def test_aot_example_builds_a_path_that_loads_in_another_process():
    ns: dict = {"cpp_jit": cpp_jit}
    exec(AOT_EXAMPLE.replace("cpp_sources=...", f"cpp_sources={SCALE_SOURCE!r}"), ns)  # noqa: S102
    lib = ns["lib"]
    assert isinstance(lib, str) and lib.endswith(".so")
    np.testing.assert_array_equal(_scale(ns["mod"]), [3.0, 6.0])
    script = textwrap.dedent(
        f"""
        import tensorplay as tp
        from tensorplay.utils import cpp_jit
        mod = cpp_jit.load_module({lib!r})
        x = tp.tensor([1.0, 2.0]); y = tp.empty_like(x)
        mod.scale_cpu(x, y)
        print(y.tolist())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[3.0, 6.0]"


def _scale(mod) -> list[float]:
    x = tp.tensor([1.0, 2.0])
    y = tp.empty_like(x)
    mod.scale_cpu(x, y)
    return y.tolist()
