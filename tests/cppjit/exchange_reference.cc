// Reference DLPackExchangeAPI for tensorplay.Tensor: a test double (and a proposal) for the
// table tensorplay._C is to provide as the class attribute __dlpack_c_exchange_api__.
//
// What it shows: tvm-ffi converts TensorPlay CPU tensors in C (no capsule, no Python call),
// refuses read-only and misaligned memory with a BufferError naming the fix (tvm-ffi
// itself ignores DLPack's read-only flag), and hands allocated results back as tp.Tensor.
// It reads the numpy array a CPU tensor keeps in its `_data` slot; CUDA tensors and
// dtypes numpy cannot describe go through the tensor's own __dlpack__ (slow, correct).
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>

#include <cstdlib>
#include <cstring>

#include <dlpack/dlpack.h>

namespace {

PyObject* g_data_name = nullptr;     // "_data"
PyObject* g_from_dlpack = nullptr;   // tensorplay.from_dlpack
PyObject* g_current_stream = nullptr;  // tensorplay.cuda.current_stream

struct Block {  // one malloc: the managed tensor, then shape and strides
  DLManagedTensorVersioned managed;
  int64_t dims[1];
};

void DeleteBlock(DLManagedTensorVersioned* self) {
  // tvm-ffi may release its temporary tensor without the GIL held
  PyGILState_STATE st = PyGILState_Ensure();
  Py_XDECREF(static_cast<PyObject*>(self->manager_ctx));
  PyGILState_Release(st);
  std::free(self);
}

bool DLTypeOf(PyArray_Descr* d, DLDataType* out) {
  out->lanes = 1;
  out->bits = static_cast<uint8_t>(PyDataType_ELSIZE(d) * 8);
  switch (d->type_num) {
    case NPY_BOOL: out->code = kDLBool; return true;
    case NPY_INT8: case NPY_INT16: case NPY_INT32: case NPY_INT64: case NPY_LONGLONG:
      out->code = kDLInt; return true;
    case NPY_UINT8: case NPY_UINT16: case NPY_UINT32: case NPY_UINT64: case NPY_ULONGLONG:
      out->code = kDLUInt; return true;
    case NPY_HALF: case NPY_FLOAT: case NPY_DOUBLE: out->code = kDLFloat; return true;
    case NPY_CFLOAT: case NPY_CDOUBLE: out->code = kDLComplex; return true;
    default: return false;  // ml_dtypes (bfloat16, float8): the __dlpack__ path
  }
}

int ViaDunderDLPack(PyObject* obj, DLManagedTensorVersioned** out) {
  PyObject* kwargs = Py_BuildValue("{s:(ii)}", "max_version", 1, 1);
  PyObject* method = kwargs ? PyObject_GetAttrString(obj, "__dlpack__") : nullptr;
  PyObject* empty = PyTuple_New(0);
  PyObject* cap = method ? PyObject_Call(method, empty, kwargs) : nullptr;
  Py_XDECREF(kwargs);
  Py_XDECREF(method);
  Py_XDECREF(empty);
  if (cap == nullptr) return -1;
  void* ptr = PyCapsule_GetPointer(cap, "dltensor_versioned");
  if (ptr != nullptr) PyCapsule_SetName(cap, "used_dltensor_versioned");  // we own it now
  Py_DECREF(cap);
  if (ptr == nullptr) return -1;
  *out = static_cast<DLManagedTensorVersioned*>(ptr);
  return 0;
}

int FromPyObject(void* py_obj, DLManagedTensorVersioned** out) {
  PyObject* obj = static_cast<PyObject*>(py_obj);
  PyObject* data = PyObject_GetAttr(obj, g_data_name);
  if (data == nullptr) return -1;
  if (data == Py_None) {
    Py_DECREF(data);
    PyErr_SetString(PyExc_BufferError, "meta tensors hold no data; kernels take cpu or cuda tensors");
    return -1;
  }
  if (!PyArray_Check(data)) {  // CUDA (CuPy) storage
    Py_DECREF(data);
    return ViaDunderDLPack(obj, out);
  }
  PyArrayObject* arr = reinterpret_cast<PyArrayObject*>(data);
  DLDataType dtype;
  if (!DLTypeOf(PyArray_DESCR(arr), &dtype)) {
    Py_DECREF(data);
    return ViaDunderDLPack(obj, out);
  }
  if (!PyArray_ISWRITEABLE(arr)) {
    Py_DECREF(data);
    PyErr_SetString(PyExc_BufferError,
                    "a read-only tensor cannot be passed to a kernel, which can write through "
                    "any TensorView; pass a writable copy (x.clone())");
    return -1;
  }
  if (!PyArray_ISALIGNED(arr)) {
    Py_DECREF(data);
    PyErr_SetString(PyExc_BufferError,
                    "the tensor's data address is not a multiple of its element size; "
                    "pass an aligned copy (x.clone())");
    return -1;
  }
  const int ndim = PyArray_NDIM(arr);
  const size_t bytes = sizeof(Block) + sizeof(int64_t) * (2 * size_t(ndim > 0 ? ndim : 1) - 1);
  auto* block = static_cast<Block*>(std::malloc(bytes));
  if (block == nullptr) {
    Py_DECREF(data);
    PyErr_NoMemory();
    return -1;
  }
  std::memset(&block->managed, 0, sizeof(block->managed));
  const npy_intp* shape = PyArray_DIMS(arr);
  const npy_intp* strides = PyArray_STRIDES(arr);
  const npy_intp itemsize = PyArray_ITEMSIZE(arr);
  for (int i = 0; i < ndim; ++i) {
    block->dims[i] = shape[i];
    block->dims[ndim + i] = strides[i] / itemsize;
  }
  DLManagedTensorVersioned& m = block->managed;
  m.version.major = DLPACK_MAJOR_VERSION;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.manager_ctx = data;  // the reference we took keeps the memory alive
  m.deleter = DeleteBlock;
  m.dl_tensor.data = PyArray_DATA(arr);
  m.dl_tensor.device = DLDevice{kDLCPU, 0};
  m.dl_tensor.ndim = ndim;
  m.dl_tensor.dtype = dtype;
  m.dl_tensor.shape = block->dims;
  m.dl_tensor.strides = block->dims + ndim;
  *out = &m;
  return 0;
}

void CapsuleDestructor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {  // never consumed: free it
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    if (m->deleter) m->deleter(m);
  }
}

int ToPyObject(DLManagedTensorVersioned* tensor, void** out) {
  PyObject* cap = PyCapsule_New(tensor, "dltensor_versioned", CapsuleDestructor);
  if (cap == nullptr) return -1;
  PyObject* result = PyObject_CallOneArg(g_from_dlpack, cap);
  Py_DECREF(cap);
  if (result == nullptr) return -1;
  *out = result;
  return 0;
}

int CurrentWorkStream(DLDeviceType device_type, int32_t device_id, void** out) {
  *out = nullptr;
  if (device_type != kDLCUDA) return 0;
  PyObject* stream = PyObject_CallNoArgs(g_current_stream);
  PyObject* ptr = stream ? PyObject_GetAttrString(stream, "cuda_stream") : nullptr;
  Py_XDECREF(stream);
  if (ptr == nullptr) return -1;
  *out = PyLong_AsVoidPtr(ptr);
  Py_DECREF(ptr);
  return PyErr_Occurred() ? -1 : 0;
}

DLPackExchangeAPI g_api;

}  // namespace

// Called once through ctypes.PyDLL (GIL held): the table's address, or 0 with an error set.
extern "C" __attribute__((visibility("default"))) void* tp_reference_exchange_api() {
  if (g_data_name == nullptr) {
    if (PyArray_ImportNumPyAPI() < 0) return nullptr;
    PyObject* tp = PyImport_ImportModule("tensorplay");
    PyObject* cuda = tp ? PyImport_ImportModule("tensorplay.cuda") : nullptr;
    if (cuda == nullptr) return nullptr;
    g_from_dlpack = PyObject_GetAttrString(tp, "from_dlpack");
    g_current_stream = PyObject_GetAttrString(cuda, "current_stream");
    g_data_name = PyUnicode_InternFromString("_data");
    Py_DECREF(tp);
    Py_DECREF(cuda);
    if (!g_from_dlpack || !g_current_stream || !g_data_name) return nullptr;
    g_api.header.version.major = DLPACK_MAJOR_VERSION;
    g_api.header.version.minor = DLPACK_MINOR_VERSION;
    g_api.header.prev_api = nullptr;
    g_api.managed_tensor_allocator = nullptr;  // the environment allocator cpp_jit installs
    g_api.managed_tensor_from_py_object_no_sync = FromPyObject;
    g_api.managed_tensor_to_py_object_no_sync = ToPyObject;
    g_api.dltensor_from_py_object_no_sync = nullptr;
    g_api.current_work_stream = CurrentWorkStream;
  }
  return &g_api;
}
