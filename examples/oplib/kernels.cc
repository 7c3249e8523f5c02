// CPU kernels of the oplib_example operators (ops.yaml). The calling convention: every
// schema argument in order, then the outputs the operator allocated; tensors arrive
// contiguous. Each kernel checks the dtypes it supports (float32 and float64).
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <cmath>
#include <cstdint>

namespace {

using tvm::ffi::TensorView;

bool IsFloat(const TensorView& t, int bits) {
  return t.dtype().code == kDLFloat && t.dtype().bits == bits && t.dtype().lanes == 1;
}

// float32 or float64, the same for every tensor; raises TypeError otherwise
int FloatBits(const char* op, std::initializer_list<const TensorView*> tensors) {
  int bits = (*tensors.begin())->dtype().bits;
  for (const TensorView* t : tensors) {
    if (!(IsFloat(*t, 32) || IsFloat(*t, 64)) || t->dtype().bits != bits) {
      TVM_FFI_THROW(TypeError) << op << ": expected float32 or float64 tensors of one dtype";
    }
  }
  return bits;
}

// How a broadcast input is read for output element i: full, a row (last dimension), a scalar.
int64_t Stride(const char* op, const TensorView& t, const TensorView& out) {
  int64_t n = t.numel(), total = out.numel();
  int64_t last = out.ndim() ? out.size(out.ndim() - 1) : 1;
  if (n == total) return 0;
  if (n == 1) return 1;
  if (n == last) return last;
  TVM_FFI_THROW(ValueError) << op << ": an input broadcasts other than along the last "
                            << "dimension or as a scalar, which this kernel does not support";
  return 0;
}

inline int64_t At(int64_t i, int64_t mode) { return mode == 0 ? i : mode == 1 ? 0 : i % mode; }

template <typename T>
T Gelu(T z) { return T(0.5) * z * (T(1) + std::erf(z * T(0.7071067811865476))); }

template <typename T>
T GeluGrad(T z) {  // Phi(z) + z phi(z)
  return T(0.5) * (T(1) + std::erf(z * T(0.7071067811865476))) +
         z * std::exp(T(-0.5) * z * z) * T(0.3989422804014327);
}

template <typename T>
void Forward(TensorView x, TensorView b, double alpha, TensorView out) {
  const T* px = static_cast<const T*>(x.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  int64_t sx = Stride("fused_bias_gelu", x, out), sb = Stride("fused_bias_gelu", b, out);
  for (int64_t i = 0; i < out.numel(); ++i) {
    po[i] = T(alpha) * Gelu<T>(px[At(i, sx)] + pb[At(i, sb)]);
  }
}

template <typename T>
void Backward(TensorView g, TensorView x, TensorView b, double alpha, TensorView out) {
  const T* pg = static_cast<const T*>(g.data_ptr());
  const T* px = static_cast<const T*>(x.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  const char* op = "fused_bias_gelu_backward";
  int64_t sg = Stride(op, g, out), sx = Stride(op, x, out), sb = Stride(op, b, out);
  for (int64_t i = 0; i < out.numel(); ++i) {
    po[i] = pg[At(i, sg)] * T(alpha) * GeluGrad<T>(px[At(i, sx)] + pb[At(i, sb)]);
  }
}

template <typename T>
void SumOfSquares(TensorView x, int64_t dim, TensorView out) {
  int64_t outer = 1, inner = 1, size = x.ndim() ? x.size(dim) : 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.ndim(); ++d) inner *= x.size(d);
  const T* px = static_cast<const T*>(x.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      T acc = 0;
      for (int64_t k = 0; k < size; ++k) {
        T v = px[(o * size + k) * inner + i];
        acc += v * v;
      }
      po[o * inner + i] = acc;
    }
  }
}

}  // namespace

void fused_bias_gelu_cpu(TensorView x, TensorView b, double alpha, TensorView out) {
  if (FloatBits("fused_bias_gelu", {&x, &b, &out}) == 32) {
    Forward<float>(x, b, alpha, out);
  } else {
    Forward<double>(x, b, alpha, out);
  }
}

void fused_bias_gelu_backward_cpu(TensorView grad_out, TensorView x, TensorView b,
                                  double alpha, TensorView out) {
  if (FloatBits("fused_bias_gelu_backward", {&grad_out, &x, &b, &out}) == 32) {
    Backward<float>(grad_out, x, b, alpha, out);
  } else {
    Backward<double>(grad_out, x, b, alpha, out);
  }
}

void sum_of_squares_cpu(TensorView x, int64_t dim, bool keepdim, TensorView out) {
  int64_t ndim = x.ndim() ? x.ndim() : 1;
  if (dim < -ndim || dim >= ndim) {
    TVM_FFI_THROW(IndexError) << "sum_of_squares: dim " << dim << " is out of range";
  }
  dim = dim < 0 ? dim + ndim : dim;
  if (FloatBits("sum_of_squares", {&x, &out}) == 32) {
    SumOfSquares<float>(x, dim, out);
  } else {
    SumOfSquares<double>(x, dim, out);
  }
}

void scale_inplace_cpu(TensorView x, double alpha) {
  if (FloatBits("scale_", {&x}) == 32) {
    float* p = static_cast<float*>(x.data_ptr());
    for (int64_t i = 0; i < x.numel(); ++i) p[i] *= static_cast<float>(alpha);
  } else {
    double* p = static_cast<double*>(x.data_ptr());
    for (int64_t i = 0; i < x.numel(); ++i) p[i] *= alpha;
  }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_bias_gelu_cpu, fused_bias_gelu_cpu);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_bias_gelu_backward_cpu, fused_bias_gelu_backward_cpu);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sum_of_squares_cpu, sum_of_squares_cpu);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale_inplace_cpu, scale_inplace_cpu);
