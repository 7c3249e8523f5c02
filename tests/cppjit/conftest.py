"""cpp_jit tests share one fresh build cache per session (hermetic: nothing from ~/.cache).

test_native_exchange.py reruns the kernel tests in a subprocess with
TENSORPLAY_PURE_PYTHON=1, where tp.Tensor has no native DLPack exchange table.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tensorplay.utils import cpp_jit


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory):
    # a nested run (test_native_exchange.py) shares its parent's cache
    shared = os.environ.get("TENSORPLAY_TEST_CACHE_DIR")
    root = Path(shared) if shared else tmp_path_factory.mktemp("tp_cache")
    saved = os.environ.get("TENSORPLAY_CACHE_DIR")
    os.environ["TENSORPLAY_CACHE_DIR"] = str(root)
    yield Path(root)
    if saved is None:
        os.environ.pop("TENSORPLAY_CACHE_DIR", None)
    else:
        os.environ["TENSORPLAY_CACHE_DIR"] = saved


@pytest.fixture
def engine():
    """Skip (not pass) when the optional tvm-ffi engine is missing."""
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
