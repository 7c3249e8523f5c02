"""Both ways TensorPlay tensors cross into kernels: through tensorplay._C's DLPack exchange
table (tvm-ffi converts them in C; read-only/misaligned/meta tensors are refused by the
table), and, with
TENSORPLAY_PURE_PYTHON=1 (no table), through cpp_jit's own conversion wrapper: the kernel
and seed tests run again that way in a subprocess (the composition with tensorplay.library
does so in tests/integration/test_cppjit_custom_op.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tensorplay as tp
from tensorplay.utils import cpp_jit

HERE = Path(__file__).parent


@pytest.mark.slow
def test_kernel_tests_pass_without_the_native_table(cache_dir):
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    env = {
        **os.environ,
        "TENSORPLAY_PURE_PYTHON": "1",
        "TENSORPLAY_TEST_CACHE_DIR": str(cache_dir),
    }
    files = [
        "test_kernels.py",
        "test_kernel_safety.py",
        "test_seed_examples.py",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_the_native_module_provides_the_table():
    from tensorplay import _native

    if _native.NATIVE is None:
        pytest.skip(f"no tensorplay._C: {_native.REASON}")
    table = tp.Tensor.__dlpack_c_exchange_api__
    assert type(table).__name__ == "PyCapsule" and '"dlpack_exchange_api"' in repr(table)


def test_kernels_pass_tensors_unconverted_with_a_native_table(monkeypatch):
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    from tensorplay.utils.cpp_jit import _module

    mod = cpp_jit.load_inline(
        "native_kind", cpp_sources="int64_t f() { return 3; }", functions=["f"]
    )
    monkeypatch.setattr(tp.Tensor, "__dlpack_c_exchange_api__", object(), raising=False)
    assert _module.native_exchange()
    fresh = cpp_jit.load_module(mod.path)
    assert fresh.f._convert is False and fresh.f() == 3
