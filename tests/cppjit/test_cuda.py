"""cuda_sources: compiled here with nvcc (architecture from TENSORPLAY_CUDA_ARCH, no GPU
needed); run on a GPU with CuPy-backed TensorPlay tensors (skipped without CUDA)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils import cpp_jit

pytestmark = pytest.mark.usefixtures("engine")

CUDA = r"""
#include <cuda_runtime.h>

__global__ void add_one_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  if (x.device().device_type != kDLCUDA || y.device().device_type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << "add_one: expected CUDA tensors";
  }
  int64_t n = x.numel();
  auto stream = static_cast<cudaStream_t>(
      TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  add_one_kernel<<<(n + 255) / 256, 256, 0, stream>>>(
      static_cast<const float*>(x.data_ptr()), static_cast<float*>(y.data_ptr()), n);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) TVM_FFI_THROW(RuntimeError) << cudaGetErrorString(err);
}

int64_t stream_seen(tvm::ffi::TensorView x) {
  return reinterpret_cast<int64_t>(
      TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
}

tvm::ffi::Tensor plus_one(tvm::ffi::TensorView x) {
  tvm::ffi::Tensor y = tvm::ffi::Tensor::FromEnvAlloc(
      TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  add_one(x, y);
  return y;
}
"""

# With both kinds of sources, functions are exported from the C++ side, which declares
# the CUDA-side ones (tvm-ffi's convention, as in torch's load_inline).
CPP = r"""
void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y);
int64_t stream_seen(tvm::ffi::TensorView x);
tvm::ffi::Tensor plus_one(tvm::ffi::TensorView x);
int64_t host_side() { return 7; }
"""
FUNCS = ["add_one", "stream_seen", "plus_one"]


def cuda_available() -> bool:
    return tp.cuda.is_available()


def _needs_nvcc() -> None:
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("nvcc not installed")


def test_cuda_sources_compile_for_the_arch_from_the_env(monkeypatch):
    _needs_nvcc()
    if not cuda_available():
        monkeypatch.setenv("TENSORPLAY_CUDA_ARCH", "9.0")
    path = cpp_jit.build_inline(
        "cuda_add_one", cpp_sources=CPP, cuda_sources=CUDA, functions=FUNCS + ["host_side"]
    )
    assert Path(path).is_file()
    mod = cpp_jit.load_module(path)  # loads without a GPU: cudart is found through the rpath
    assert mod.host_side() == 7
    if not cuda_available():
        assert b"sm_90" in Path(path).read_bytes()  # the requested architecture is embedded


def test_no_gpu_and_no_arch_is_a_clear_error(monkeypatch):
    _needs_nvcc()
    if cuda_available():
        pytest.skip("a GPU is present; the architecture is detected")
    monkeypatch.delenv("TENSORPLAY_CUDA_ARCH", raising=False)
    monkeypatch.delenv("TVM_FFI_CUDA_ARCH_LIST", raising=False)
    with pytest.raises(
        RuntimeError, match="set TENSORPLAY_CUDA_ARCH, e.g. TENSORPLAY_CUDA_ARCH=9.0"
    ):
        cpp_jit.build_inline("cuda_noarch", cuda_sources=CUDA, functions=FUNCS)


def test_bad_arch_value_is_named(monkeypatch):
    monkeypatch.setenv("TENSORPLAY_CUDA_ARCH", "hopper")
    with pytest.raises(ValueError, match="TENSORPLAY_CUDA_ARCH='hopper'"):
        cpp_jit.build_inline("cuda_badarch", cuda_sources=CUDA, functions=FUNCS)


@pytest.fixture
def gpu_mod():
    if not cuda_available():
        pytest.skip("CUDA not available")
    return cpp_jit.load_inline("cuda_add_one_run", cuda_sources=CUDA, functions=FUNCS)


@pytest.mark.cuda
def test_cuda_kernel_runs_on_tensorplay_tensors(gpu_mod):
    x = tp.arange(1000, dtype=tp.float32, device="cuda")
    y = tp.empty_like(x)
    gpu_mod.add_one(x, y)
    np.testing.assert_array_equal(y.cpu().numpy(), np.arange(1000, dtype=np.float32) + 1)


@pytest.mark.cuda
def test_cuda_kernel_sees_the_current_tensorplay_stream(gpu_mod):
    import cupy

    x = tp.ones(16, device="cuda")
    with cupy.cuda.Stream(non_blocking=True):
        expected = tp.cuda.current_stream().cuda_stream
        assert expected != 0
        assert gpu_mod.stream_seen(x) == expected
        y = tp.empty_like(x)
        gpu_mod.add_one(x, y)
        tp.cuda.current_stream().synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), np.full(16, 2.0, np.float32))


@pytest.mark.cuda
def test_cuda_kernel_allocates_through_tensorplay(gpu_mod):
    x = tp.arange(300, dtype=tp.float32, device="cuda")
    for _ in range(50):
        y = gpu_mod.plus_one(x)
    assert isinstance(y, tp.Tensor) and y.device.type == "cuda"
    np.testing.assert_array_equal(y.cpu().numpy(), np.arange(300, dtype=np.float32) + 1)
