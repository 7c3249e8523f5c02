// TensorPlay's environment allocator for tvm-ffi kernels
// (tvm::ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, ...)).
//
// CPU requests are served here, natively, with no Python and no GIL: worker threads that
// allocate do not serialise on the interpreter. Memory is 64-byte aligned like TensorPlay's
// own CPU storage (TVM-compiled kernels fault on less). Ownership travels in the
// DLManagedTensorVersioned: tp.from_dlpack() adopts the block zero-copy and calls
// our deleter when the last TensorPlay view of it dies.
//
// Other devices (CUDA) go to a callback that Python registers (it allocates with
// tp.empty, so CUDA memory comes from TensorPlay's CuPy pool); the callback takes the GIL.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dlpack/dlpack.h>

namespace {

constexpr size_t kAlignment = 64;

using Allocator = DLPackManagedTensorAllocator;
using SetErrorFn = void (*)(void*, const char*, const char*);

std::atomic<Allocator> g_device_fallback{nullptr};
std::atomic<int64_t> g_live{0};  // blocks handed out and not yet freed (leak tests read it)

// One malloc holds the managed struct followed by its shape and strides arrays.
struct Block {
  DLManagedTensorVersioned managed;
  int64_t dims[1];  // really 2 * ndim entries: shape, then strides
};

void Free(DLManagedTensorVersioned* self) {
  std::free(self->dl_tensor.data);
  std::free(self);
  g_live.fetch_sub(1, std::memory_order_relaxed);
}

int Fail(void* ctx, SetErrorFn set_error, const char* kind, const std::string& msg) {
  if (set_error != nullptr) set_error(ctx, kind, msg.c_str());
  return -1;
}

int AllocCPU(DLTensor* proto, DLManagedTensorVersioned** out, void* ctx, SetErrorFn set_error) {
  const int ndim = proto->ndim;
  if (ndim < 0 || (ndim > 0 && proto->shape == nullptr)) {
    return Fail(ctx, set_error, "ValueError", "TensorPlay allocator: invalid shape");
  }
  const uint64_t bits = uint64_t(proto->dtype.bits) * proto->dtype.lanes;
  if (bits == 0 || bits % 8 != 0) {
    return Fail(ctx, set_error, "TypeError",
                "TensorPlay allocator: dtype must be a whole number of bytes, got " +
                    std::to_string(bits) + " bits");
  }
  uint64_t nbytes = bits / 8;
  for (int i = 0; i < ndim; ++i) {
    const int64_t n = proto->shape[i];
    if (n < 0) {
      return Fail(ctx, set_error, "ValueError",
                  "TensorPlay allocator: negative dimension " + std::to_string(n));
    }
    if (n != 0 && nbytes > (uint64_t(1) << 62) / uint64_t(n)) {
      return Fail(ctx, set_error, "ValueError", "TensorPlay allocator: tensor too large");
    }
    nbytes *= uint64_t(n);
  }
  // aligned_alloc wants a size that is a multiple of the alignment (and never 0 here)
  const size_t padded = (nbytes + kAlignment - 1) / kAlignment * kAlignment + kAlignment * (nbytes == 0);
  void* data = std::aligned_alloc(kAlignment, padded);
  const size_t header = sizeof(Block) + sizeof(int64_t) * (2 * size_t(ndim > 0 ? ndim : 1) - 1);
  auto* block = static_cast<Block*>(std::malloc(header));
  if (data == nullptr || block == nullptr) {
    std::free(data);
    std::free(block);
    return Fail(ctx, set_error, "MemoryError",
                "TensorPlay allocator: out of memory allocating " + std::to_string(nbytes) +
                    " bytes");
  }
  std::memset(&block->managed, 0, sizeof(block->managed));
  int64_t* shape = block->dims;
  int64_t* strides = block->dims + ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {  // compact row-major, as tp.empty makes
    shape[i] = proto->shape[i];
    strides[i] = stride;
    stride *= proto->shape[i];
  }
  DLManagedTensorVersioned& m = block->managed;
  m.version.major = DLPACK_MAJOR_VERSION;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.deleter = Free;
  m.dl_tensor.data = data;
  m.dl_tensor.device = proto->device;
  m.dl_tensor.ndim = ndim;
  m.dl_tensor.dtype = proto->dtype;
  m.dl_tensor.shape = shape;
  m.dl_tensor.strides = strides;
  m.dl_tensor.byte_offset = 0;
  g_live.fetch_add(1, std::memory_order_relaxed);
  *out = &m;
  return 0;
}

int Alloc(DLTensor* proto, DLManagedTensorVersioned** out, void* ctx, SetErrorFn set_error) {
  if (proto->device.device_type == kDLCPU) return AllocCPU(proto, out, ctx, set_error);
  Allocator fallback = g_device_fallback.load();
  if (fallback == nullptr) {
    return Fail(ctx, set_error, "RuntimeError",
                "TensorPlay allocator: no allocator for DLPack device type " +
                    std::to_string(proto->device.device_type));
  }
  return fallback(proto, out, ctx, set_error);
}

}  // namespace

// Install as the process-wide (global) allocator unless one is already installed:
// a host that set its own allocator keeps it. Returns whether ours is now active.
bool install(int64_t device_fallback) {
  g_device_fallback.store(reinterpret_cast<Allocator>(device_fallback));
  Allocator current = TVMFFIEnvGetDLPackManagedTensorAllocator();
  if (current != nullptr) return current == &Alloc;
  if (TVMFFIEnvSetDLPackManagedTensorAllocator(&Alloc, 1, nullptr) != 0) {
    TVM_FFI_THROW(RuntimeError) << "could not install TensorPlay's tensor allocator";
  }
  return true;
}

bool is_active() { return TVMFFIEnvGetDLPackManagedTensorAllocator() == &Alloc; }

int64_t live_blocks() { return g_live.load(); }
