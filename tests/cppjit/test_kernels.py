"""Calling compiled kernels: values, scalars, errors, allocation, threads, unsafe inputs."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils import cpp_jit
from tensorplay.utils.cpp_jit import _allocator

pytestmark = pytest.mark.usefixtures("engine")

KIT = r"""
#include <string>

void add_into(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView out) {
  const float* pa = static_cast<const float*>(a.data_ptr());
  const float* pb = static_cast<const float*>(b.data_ptr());
  float* po = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] + pb[i];
}

tvm::ffi::Tensor scaled(tvm::ffi::TensorView x, double factor) {
  if (x.dtype().code != kDLFloat || x.dtype().bits != 64) {
    TVM_FFI_THROW(TypeError) << "scaled: expected float64, got bits=" << int(x.dtype().bits);
  }
  tvm::ffi::Tensor y = tvm::ffi::Tensor::FromEnvAlloc(
      TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  const double* px = static_cast<const double*>(x.data_ptr());
  double* py = static_cast<double*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] * factor;
  return y;
}

int64_t add_ints(int64_t a, int64_t b) { return a + b; }
bool negate(bool b) { return !b; }
std::string shout(const std::string& s, int64_t times) {
  std::string out;
  for (int64_t i = 0; i < times; ++i) out += s;
  return out + "!";
}
void nothing() {}
int64_t checked_index(int64_t i) {
  if (i < 0) TVM_FFI_THROW(IndexError) << "index " << i << " is negative";
  if (i > 100) TVM_FFI_THROW(ValueError) << "index " << i << " is too large";
  return i;
}
int64_t dtype_bits(tvm::ffi::TensorView x) { return x.dtype().bits; }
"""

FUNCS = [
    "add_into",
    "scaled",
    "add_ints",
    "negate",
    "shout",
    "nothing",
    "checked_index",
    "dtype_bits",
]


@pytest.fixture(scope="module")
def kit():
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    return cpp_jit.load_inline("kit", cpp_sources=KIT, functions=FUNCS)


def test_out_parameter_kernel_matches_numpy(kit):
    a, b = tp.randn(7, 3), tp.randn(7, 3)
    out = tp.empty(7, 3)
    kit.add_into(a, b, out)
    np.testing.assert_array_equal(out.numpy(), a.numpy() + b.numpy())


def test_scalars_pass_by_value(kit):
    assert kit.add_ints(40, 2) == 42
    assert kit.negate(True) is False
    assert kit.shout("ab", 3) == "ababab!"


def test_void_kernel_returns_none(kit):
    assert kit.nothing() is None


@pytest.mark.parametrize(
    ("arg", "exc", "msg"),
    [(-1, IndexError, "index -1 is negative"), (101, ValueError, "index 101 is too large")],
)
def test_ffi_throw_maps_to_the_python_exception(kit, arg, exc, msg):
    with pytest.raises(exc, match=msg):
        kit.checked_index(arg)
    assert kit.checked_index(5) == 5


def test_signature_mismatch_fails_before_the_kernel_runs(kit):
    with pytest.raises(TypeError):
        kit.add_ints("not an int", 2)
    with pytest.raises(TypeError):
        kit.add_ints(1)


def test_allocating_kernel_returns_a_tensorplay_tensor(kit):
    x = tp.arange(6, dtype=tp.float64).reshape(2, 3)
    y = kit.scaled(x, 2.5)
    assert isinstance(y, tp.Tensor)
    assert tuple(y.shape) == (2, 3) and y.dtype == tp.float64
    np.testing.assert_array_equal(y.numpy(), np.arange(6.0).reshape(2, 3) * 2.5)
    assert y.data_ptr() % 64 == 0  # TensorPlay's CPU alignment
    z = tp.from_dlpack(y)  # zero-copy either way
    assert z.data_ptr() == y.data_ptr()


def test_allocating_kernel_error_type_and_message(kit):
    with pytest.raises(TypeError, match="scaled: expected float64, got bits=32"):
        kit.scaled(tp.ones(3), 1.0)


def test_env_allocator_is_tensorplays_and_frees_500_allocations(kit):
    assert _allocator.ensure_installed()
    gc.collect()
    base = _allocator.live_blocks()
    x = tp.ones(1000, dtype=tp.float64)
    for i in range(500):
        y = kit.scaled(x, float(i))
        assert y[999].item() == float(i)
    del y
    gc.collect()
    assert _allocator.live_blocks() == base


def test_four_threads_times_200_calls(kit):
    x = tp.arange(64, dtype=tp.float64)
    errors: list[BaseException] = []
    sums: list[float] = []

    def work(k: int) -> None:
        try:
            for i in range(200):
                y = kit.scaled(x, float(k))
                out = tp.empty(64)
                kit.add_into(tp.ones(64), tp.ones(64), out)
                assert out.numpy().sum() == 128.0
                if i == 199:
                    sums.append(float(y.numpy().sum()))
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(sums) == [k * 2016.0 for k in range(4)]


def test_read_only_tensor_is_refused_with_a_clear_error(kit):
    frozen = np.ones(4, np.float32)
    frozen.flags.writeable = False
    ro = tp.from_dlpack(frozen)
    out = tp.empty(4)
    with pytest.raises(BufferError, match=r"read-only tensor.*x\.clone\(\)"):
        kit.add_into(ro, tp.ones(4), out)
    kit.add_into(ro.clone(), tp.ones(4), out)  # the suggested fix works
    np.testing.assert_array_equal(out.numpy(), [2.0] * 4)


def test_misaligned_tensor_is_refused_with_a_clear_error(kit):
    raw = np.zeros(4 * 4 + 1, np.uint8)
    odd = np.ndarray((4,), np.float32, buffer=raw, offset=1)  # float32 at an odd address
    x = tp.from_dlpack(odd)
    with pytest.raises(BufferError, match=r"data address .*is not a multiple of its element size"):
        kit.add_into(tp.ones(4), x, tp.empty(4))


def test_views_with_an_offset_are_fine(kit):
    base = tp.arange(8, dtype=tp.float32)
    out = tp.zeros(8)
    kit.add_into(base[2:6], base[2:6], out[4:8])
    np.testing.assert_array_equal(out.numpy(), [0, 0, 0, 0, 4, 6, 8, 10])


def test_meta_tensor_is_refused(kit):
    with pytest.raises(BufferError, match="meta"):
        kit.dtype_bits(tp.empty(3, device="meta"))


def test_bfloat16_crosses_through_dlpack(kit):
    assert kit.dtype_bits(tp.ones(3, dtype=tp.bfloat16)) == 16
    assert kit.dtype_bits(tp.ones(3, dtype=tp.float16)) == 16


def test_missing_function_names_the_module(kit):
    with pytest.raises(AttributeError, match="module 'kit' has no function 'nope'"):
        kit.nope  # noqa: B018


def test_device_fallback_allocates_with_tensorplay():
    # The path CUDA requests take (tp.empty + TensorPlay's own DLPack export), on CPU.
    import ctypes

    from tensorplay._dlpack import DLDataType, DLDevice, DLManagedTensorVersioned, DLTensor

    shape = (ctypes.c_int64 * 2)(3, 5)
    proto = DLTensor(None, DLDevice(1, 0), 2, DLDataType(2, 32, 1), shape, None, 0)
    ptr = _allocator.alloc_with_tensorplay(proto)
    managed = DLManagedTensorVersioned.from_address(ptr)
    assert [managed.dl_tensor.shape[i] for i in range(2)] == [3, 5]
    assert managed.dl_tensor.data % 64 == 0 and managed.version.major == 1
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(managed.deleter)(ptr)  # the consumer's release


def test_system_lib_reaches_kernels_registered_in_the_process(system_lib_prefix):
    lib = cpp_jit.system_lib(system_lib_prefix)
    assert lib.add_one(41) == 42
    with pytest.raises(AttributeError, match="has no function 'missing'"):
        lib.missing  # noqa: B018
    with pytest.raises(TypeError, match="symbol_prefix must be a str"):
        cpp_jit.system_lib(3)


def test_kernel_attributes_are_checking_kernels_in_both_exchange_modes(kit):
    # with or without the native exchange table, calls go through Kernel's write checks
    assert isinstance(kit.add_ints, cpp_jit.Kernel)
    assert kit.add_ints.__qualname__ == "kit.add_ints"


HOST_ALLOCATOR = r"""
// A host that installed its own environment allocator before cpp_jit's first use.
static int host_alloc(DLTensor*, DLManagedTensorVersioned**, void* ctx,
                      void (*set_error)(void*, const char*, const char*)) {
  set_error(ctx, "RuntimeError", "served by the host allocator");
  return -1;
}
bool install_host_allocator() {
  return TVMFFIEnvSetDLPackManagedTensorAllocator(host_alloc, 1, nullptr) == 0;
}
"""


def test_an_already_installed_host_allocator_takes_precedence(cache_dir):
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import tvm_ffi, tvm_ffi.cpp
        import tensorplay as tp
        host = tvm_ffi.cpp.load_inline("host_alloc", cpp_sources={HOST_ALLOCATOR!r},
                                       functions=["install_host_allocator"])
        assert host.install_host_allocator()
        from tensorplay.utils import cpp_jit
        from tensorplay.utils.cpp_jit import _allocator
        kit = cpp_jit.load_inline("kit", cpp_sources={KIT!r}, functions={FUNCS!r})
        assert _allocator.ensure_installed() is False  # ours stepped aside
        try:
            kit.scaled(tp.ones(3, dtype=tp.float64), 2.0)
        except RuntimeError as exc:
            print(exc)
        """
    )
    env = {**os.environ, "TVM_FFI_CACHE_DIR": str(cache_dir / "tvm_ffi")}  # hermetic
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "served by the host allocator" in out.stdout
