"""Shared setup for the integration tests: they run with every component installed.

Build caches (cpp_jit, Triton launchers) go to one fresh folder per session, as in the
component folders (hermetic: nothing from ~/.cache); a nested pytest run started by a test
passes its folder on in ``TENSORPLAY_TEST_CACHE_DIR`` and shares it. Triton's mode (the CPU
interpreter when there is no GPU) is chosen here, before a test module imports triton: the
interpreter cannot be switched on after that import.
"""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(scope="session", autouse=True)
def _fresh_cache(cache_dir):
    """Every test here builds into the session's fresh cache (``cache_dir``, tests/conftest.py)."""
    return cache_dir


if importlib.util.find_spec("triton") is not None:
    try:
        from tensorplay.kernels._capability import import_triton
    except ImportError:  # no tensorplay-kernels: its tests here fail on their own import
        pass
    else:
        import_triton()
