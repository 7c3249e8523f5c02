// CUDA kernels of oplib_example::fused_bias_gelu and its backward (ops.yaml). Built only
// where a CUDA toolkit is found; the calling convention is the CPU kernels' (kernels.cc),
// and the kernels run on TensorPlay's current stream (TVMFFIEnvGetStream).
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cstdint>

namespace {

using tvm::ffi::TensorView;

int64_t Mode(const char* op, const TensorView& t, const TensorView& out) {
  int64_t n = t.numel(), total = out.numel();
  int64_t last = out.ndim() ? out.size(out.ndim() - 1) : 1;
  if (n == total) return 0;
  if (n == 1) return 1;
  if (n == last) return last;
  TVM_FFI_THROW(ValueError) << op << ": an input broadcasts other than along the last "
                            << "dimension or as a scalar, which this kernel does not support";
  return 0;
}

__device__ inline int64_t At(int64_t i, int64_t mode) {
  return mode == 0 ? i : mode == 1 ? 0 : i % mode;
}

template <typename T>
__global__ void ForwardKernel(const T* x, int64_t sx, const T* b, int64_t sb, T alpha, T* out,
                              int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  T z = x[At(i, sx)] + b[At(i, sb)];
  out[i] = alpha * T(0.5) * z * (T(1) + erf(z * T(0.7071067811865476)));
}

template <typename T>
__global__ void BackwardKernel(const T* g, int64_t sg, const T* x, int64_t sx, const T* b,
                               int64_t sb, T alpha, T* out, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  T z = x[At(i, sx)] + b[At(i, sb)];
  T d = T(0.5) * (T(1) + erf(z * T(0.7071067811865476))) +
        z * exp(T(-0.5) * z * z) * T(0.3989422804014327);
  out[i] = g[At(i, sg)] * alpha * d;
}

void Check(const char* op, std::initializer_list<const TensorView*> tensors) {
  int bits = (*tensors.begin())->dtype().bits;
  for (const TensorView* t : tensors) {
    if (t->device().device_type != kDLCUDA) {
      TVM_FFI_THROW(ValueError) << op << ": expected CUDA tensors";
    }
    if (t->dtype().code != kDLFloat || t->dtype().bits != bits || (bits != 32 && bits != 64)) {
      TVM_FFI_THROW(TypeError) << op << ": expected float32 or float64 tensors of one dtype";
    }
  }
}

cudaStream_t Stream(const TensorView& t) {
  return static_cast<cudaStream_t>(
      TVMFFIEnvGetStream(t.device().device_type, t.device().device_id));
}

void Launched() {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) TVM_FFI_THROW(RuntimeError) << cudaGetErrorString(err);
}

}  // namespace

void fused_bias_gelu_cuda(TensorView x, TensorView b, double alpha, TensorView out) {
  const char* op = "fused_bias_gelu";
  Check(op, {&x, &b, &out});
  int64_t n = out.numel(), sx = Mode(op, x, out), sb = Mode(op, b, out);
  if (n == 0) return;
  int blocks = static_cast<int>((n + 255) / 256);
  if (x.dtype().bits == 32) {
    ForwardKernel<float><<<blocks, 256, 0, Stream(out)>>>(
        static_cast<const float*>(x.data_ptr()), sx, static_cast<const float*>(b.data_ptr()),
        sb, static_cast<float>(alpha), static_cast<float*>(out.data_ptr()), n);
  } else {
    ForwardKernel<double><<<blocks, 256, 0, Stream(out)>>>(
        static_cast<const double*>(x.data_ptr()), sx, static_cast<const double*>(b.data_ptr()),
        sb, alpha, static_cast<double*>(out.data_ptr()), n);
  }
  Launched();
}

void fused_bias_gelu_backward_cuda(TensorView grad_out, TensorView x, TensorView b,
                                   double alpha, TensorView out) {
  const char* op = "fused_bias_gelu_backward";
  Check(op, {&grad_out, &x, &b, &out});
  int64_t n = out.numel();
  int64_t sg = Mode(op, grad_out, out), sx = Mode(op, x, out), sb = Mode(op, b, out);
  if (n == 0) return;
  int blocks = static_cast<int>((n + 255) / 256);
  if (x.dtype().bits == 32) {
    BackwardKernel<float><<<blocks, 256, 0, Stream(out)>>>(
        static_cast<const float*>(grad_out.data_ptr()), sg,
        static_cast<const float*>(x.data_ptr()), sx, static_cast<const float*>(b.data_ptr()),
        sb, static_cast<float>(alpha), static_cast<float*>(out.data_ptr()), n);
  } else {
    BackwardKernel<double><<<blocks, 256, 0, Stream(out)>>>(
        static_cast<const double*>(grad_out.data_ptr()), sg,
        static_cast<const double*>(x.data_ptr()), sx, static_cast<const double*>(b.data_ptr()),
        sb, alpha, static_cast<double*>(out.data_ptr()), n);
  }
  Launched();
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_bias_gelu_cuda, fused_bias_gelu_cuda);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_bias_gelu_backward_cuda, fused_bias_gelu_backward_cuda);
