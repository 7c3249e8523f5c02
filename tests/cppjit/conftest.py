"""cpp_jit tests share one fresh build cache per session (hermetic: nothing from ~/.cache).

test_native_exchange.py reruns the kernel tests in a subprocess with
TENSORPLAY_PURE_PYTHON=1, where tp.Tensor has no native DLPack exchange table.
"""

from __future__ import annotations

import pytest

from tensorplay.utils import cpp_jit


@pytest.fixture(scope="session", autouse=True)
def _fresh_cache(cache_dir):
    """Every test here builds into the session's fresh cache (``cache_dir``, tests/conftest.py)."""
    return cache_dir


@pytest.fixture
def engine():
    """Skip (not pass) when the optional tvm-ffi engine is missing."""
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")


SYSTEM_LIB = r"""
// A kernel that registers itself in the process-wide system library when loaded, the way
// kernels linked into an executable do (tvm-ffi's TVMFFIEnvModRegisterSystemLibSymbol).
static int tp_add_one(void*, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* ret) {
  TVM_FFI_SAFE_CALL_BEGIN();
  TVM_FFI_CHECK(num_args == 1, "add_one takes 1 argument");
  int64_t x = reinterpret_cast<const tvm::ffi::AnyView*>(args)[0].cast<int64_t>();
  reinterpret_cast<tvm::ffi::Any*>(ret)[0] = x + 1;
  TVM_FFI_SAFE_CALL_END();
}
static int registered = TVMFFIEnvModRegisterSystemLibSymbol(
    "__tvm_ffi_tp_cppjit_test.add_one", reinterpret_cast<void*>(tp_add_one));
"""


@pytest.fixture
def system_lib_prefix(engine) -> str:
    """The symbol prefix under which a loaded library registered ``add_one`` (x + 1)."""
    cpp_jit.load_inline("syslib_provider", cpp_sources=SYSTEM_LIB)
    return "tp_cppjit_test."
