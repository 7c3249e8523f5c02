"""cpp_jit demo: JIT-compile a small C++ kernel and use it as a TensorPlay operator.

The kernel (``axpby``: ``out = a * x + b * y``) is compiled once with
``tensorplay.utils.cpp_jit`` (cached by content afterwards) and called on TensorPlay tensors
zero-copy. When ``tensorplay.library`` provides ``custom_op``, it is wrapped as the operator
``demo::axpby`` with a fake kernel and an autograd formula; otherwise it is called directly.

Run: python examples/demo_cpp_jit.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import tensorplay as tp

KERNEL = r"""
void axpby(tvm::ffi::TensorView x, tvm::ffi::TensorView y, tvm::ffi::TensorView out,
           double a, double b) {
  if (x.dtype().code != kDLFloat || x.dtype().bits != 32) {
    TVM_FFI_THROW(TypeError) << "axpby: expected float32 tensors";
  }
  if (x.numel() != y.numel() || x.numel() != out.numel()) {
    TVM_FFI_THROW(ValueError) << "axpby: x, y and out must have the same number of elements";
  }
  const float* px = static_cast<const float*>(x.data_ptr());
  const float* py = static_cast<const float*>(y.data_ptr());
  float* po = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) po[i] = a * px[i] + b * py[i];
}
"""

_op: Callable | None = None  # built once per process: main() may run more than once


def _build_op() -> Callable:
    from tensorplay.utils import cpp_jit

    t0 = time.perf_counter()
    mod = cpp_jit.load_inline("demo_axpby", cpp_sources=KERNEL, functions=["axpby"])
    print(f"compiled (or loaded from the cache) in {time.perf_counter() - t0:.2f} s")

    def run(x: tp.Tensor, y: tp.Tensor, a: float, b: float) -> tp.Tensor:
        x, y = x.contiguous(), y.contiguous()
        out = tp.empty_like(x)
        mod.axpby(x, y, out, a, b)
        return out

    try:
        from tensorplay.library import custom_op, register_autograd, register_fake
    except ImportError:
        print("tensorplay.library.custom_op not available: calling the kernel directly")
        return run

    op = custom_op("demo::axpby", mutates_args=())(run)
    register_fake("demo::axpby", lambda x, y, a, b: x.new_empty(x.shape))

    def backward(ctx, grad):  # d/dx = a, d/dy = b
        return grad * ctx.a, grad * ctx.b, None, None

    def setup_context(ctx, inputs, output):
        ctx.a, ctx.b = inputs[2], inputs[3]

    register_autograd("demo::axpby", backward, setup_context=setup_context)
    print("wrapped as the operator demo::axpby (fake kernel + autograd formula)")
    return op


def main() -> None:
    global _op
    from tensorplay.utils import cpp_jit

    if not cpp_jit.is_available():
        print("cpp_jit demo skipped: apache-tvm-ffi is not installed (pip install apache-tvm-ffi)")
        return
    if _op is None:
        _op = _build_op()
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = tp.tensor([10.0, 20.0, 30.0], requires_grad=True)
    out = _op(x, y, 2.0, 0.5)
    print("axpby(x, y, a=2, b=0.5) =", out)
    np.testing.assert_allclose(out.detach().numpy(), [7.0, 14.0, 21.0])
    if out.requires_grad:
        out.sum().backward()
        print("grad x:", x.grad, " grad y:", y.grad)
        np.testing.assert_allclose(x.grad.numpy(), [2.0] * 3)
        np.testing.assert_allclose(y.grad.numpy(), [0.5] * 3)


if __name__ == "__main__":
    main()
