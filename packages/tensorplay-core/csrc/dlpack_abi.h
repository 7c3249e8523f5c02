// The parts of the DLPack ABI (v1.3, https://github.com/dmlc/dlpack) that tensorplay._C
// uses: versioned managed tensors and the DLPackExchangeAPI table a tensor class exposes as
// `__dlpack_c_exchange_api__` (a PyCapsule named "dlpack_exchange_api"). Declared here, not
// included, so building tensorplay-core needs no DLPack package; the layouts are fixed by
// the DLPack ABI.
#pragma once

#include <cstdint>

namespace tpdl {

constexpr uint32_t kMajor = 1, kMinor = 3;

enum DeviceType : int32_t { kCPU = 1, kCUDA = 2 };
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6 };

struct Version {
    uint32_t major, minor;
};
struct Device {
    DeviceType device_type;
    int32_t device_id;
};
struct DataType {
    uint8_t code, bits;
    uint16_t lanes;
};
struct Tensor {
    void *data;
    Device device;
    int32_t ndim;
    DataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
};
struct ManagedTensorVersioned {
    Version version;
    void *manager_ctx;
    void (*deleter)(ManagedTensorVersioned *self);
    uint64_t flags;
    Tensor dl_tensor;
};

struct ExchangeAPIHeader {
    Version version;
    ExchangeAPIHeader *prev_api;
};
struct ExchangeAPI {
    ExchangeAPIHeader header;
    int (*managed_tensor_allocator)(Tensor *prototype, ManagedTensorVersioned **out,
                                    void *error_ctx,
                                    void (*set_error)(void *, const char *, const char *));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, ManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(ManagedTensorVersioned *tensor, void **out);
    int (*dltensor_from_py_object_no_sync)(void *py_object, Tensor *out);
    int (*current_work_stream)(DeviceType device_type, int32_t device_id, void **out_stream);
};

}  // namespace tpdl
