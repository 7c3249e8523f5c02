"""``tpk::axpby``: ``alpha * x + beta * y`` written in C++ (CPU) and CUDA C (GPU), built
with ``tensorplay.utils.cpp_jit`` and registered as a ``custom_op``.

The CPU library has only ``cpp_sources`` (no nvcc needed); the CUDA library adds
``cuda_sources`` and launches on the stream tvm-ffi reports for the tensor's device
(TensorPlay's current stream). Each is built on first use and cached by cpp_jit.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels._common import check_same, check_tensor, fake_like

__all__ = ["axpby"]

_CHECK = r"""
static void check_args(tvm::ffi::TensorView x, tvm::ffi::TensorView y, tvm::ffi::TensorView out) {
  for (auto t : {x, y, out}) {
    if (t.dtype().code != kDLFloat || t.dtype().bits != 32) {
      TVM_FFI_THROW(TypeError) << "tpk::axpby: expected float32 tensors";
    }
  }
  if (x.numel() != y.numel() || x.numel() != out.numel()) {
    TVM_FFI_THROW(ValueError) << "tpk::axpby: x, y and out must have the same number of elements";
  }
}
"""

CPP_SOURCE = (
    _CHECK
    + r"""
void axpby_cpu(tvm::ffi::TensorView x, tvm::ffi::TensorView y, tvm::ffi::TensorView out,
               double alpha, double beta) {
  check_args(x, y, out);
  const float* px = static_cast<const float*>(x.data_ptr());
  const float* py = static_cast<const float*>(y.data_ptr());
  float* po = static_cast<float*>(out.data_ptr());
  const float a = static_cast<float>(alpha), b = static_cast<float>(beta);
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = a * px[i] + b * py[i];
}
"""
)

CUDA_SOURCE = (
    r"""
#include <cuda_runtime.h>
"""
    + _CHECK
    + r"""
__global__ void axpby_kernel(const float* __restrict__ x, const float* __restrict__ y,
                             float* __restrict__ out, float a, float b, int64_t n) {
  // grid-stride loop: any n with a bounded grid
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = a * x[i] + b * y[i];
  }
}

void axpby_cuda(tvm::ffi::TensorView x, tvm::ffi::TensorView y, tvm::ffi::TensorView out,
                double alpha, double beta) {
  check_args(x, y, out);
  if (out.device().device_type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << "tpk::axpby: axpby_cuda needs CUDA tensors";
  }
  const int64_t n = out.numel();
  if (n == 0) return;
  auto stream = static_cast<cudaStream_t>(
      TVMFFIEnvGetStream(out.device().device_type, out.device().device_id));
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  axpby_kernel<<<blocks, threads, 0, stream>>>(
      static_cast<const float*>(x.data_ptr()), static_cast<const float*>(y.data_ptr()),
      static_cast<float*>(out.data_ptr()), static_cast<float>(alpha),
      static_cast<float>(beta), n);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) TVM_FFI_THROW(RuntimeError) << cudaGetErrorString(err);
}
"""
)

_CUDA_DECL = r"""
void axpby_cuda(tvm::ffi::TensorView x, tvm::ffi::TensorView y, tvm::ffi::TensorView out,
                double alpha, double beta);
"""


@functools.cache
def _module(device_type: str) -> Any:
    from tensorplay.utils import cpp_jit  # noqa: PLC0415 - builds on first use only

    if not cpp_jit.is_available():
        raise RuntimeError(
            "tpk::axpby: the C++/CUDA kernel is built by cpp_jit, whose engine apache-tvm-ffi "
            "does not import here: pip install apache-tvm-ffi ninja"
        )
    if device_type == "cuda":
        return cpp_jit.load_inline(
            "tpk_axpby_cuda",
            cpp_sources=_CUDA_DECL,
            cuda_sources=CUDA_SOURCE,
            functions=["axpby_cuda"],
            read_only={"axpby_cuda": [0, 1]},  # x and y are only read: no version bump
        )
    return cpp_jit.load_inline(
        "tpk_axpby_cpu",
        cpp_sources=CPP_SOURCE,
        functions=["axpby_cpu"],
        read_only={"axpby_cpu": [0, 1]},
    )


def _run(device_type: str, x: tp.Tensor, y: tp.Tensor, alpha: float, beta: float) -> tp.Tensor:
    op = "tpk::axpby"
    check_tensor(op, "x", x, (tp.float32,))
    check_tensor(op, "y", y, (tp.float32,))
    check_same(op, ("x", "y"), x, y)
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"{op}: x {tuple(x.shape)} and y {tuple(y.shape)} must have one shape")
    x, y = x.contiguous(), y.contiguous()  # the kernels walk memory linearly
    out = tp.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    mod = _module(device_type)
    getattr(mod, f"axpby_{device_type}")(x, y, out, float(alpha), float(beta))
    return out


@library.custom_op(
    "tpk::axpby",
    mutates_args=(),
    device_types="cpu",
    schema="(Tensor x, Tensor y, float alpha=1.0, float beta=1.0) -> Tensor",
)
def axpby(x: tp.Tensor, y: tp.Tensor, alpha: float = 1.0, beta: float = 1.0) -> tp.Tensor:
    """``alpha * x + beta * y`` for float32 tensors of one shape (C++ on CPU, CUDA C on GPU)."""
    return _run("cpu", x, y, alpha, beta)


axpby.register_kernel("cuda", lambda x, y, alpha=1.0, beta=1.0: _run("cuda", x, y, alpha, beta))
axpby.register_fake(lambda x, y, alpha=1.0, beta=1.0: fake_like(x))


def _setup(ctx, inputs, output):
    ctx.alpha, ctx.beta = inputs[2], inputs[3]


def _backward(ctx, grad):
    return grad * ctx.alpha, grad * ctx.beta, None, None


axpby.register_autograd(_backward, setup_context=_setup)
