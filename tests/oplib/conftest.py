"""tensorplay-oplib tests: one fresh build cache per session, and the example library
(examples/oplib) built once and loaded in this process as ``tp.ops.oplib_example``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorplay import oplib

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "oplib" / "ops.yaml"


@pytest.fixture(scope="session", autouse=True)
def _fresh_cache(cache_dir):
    """Every test here builds into the session's fresh cache (``cache_dir``, tests/conftest.py)."""
    return cache_dir


@pytest.fixture(scope="session")
def example(_fresh_cache, tmp_path_factory):
    """The example library, loaded (once per process: a namespace is loaded once)."""
    lib = oplib.loaded().get("oplib_example")
    if lib is None:
        lib = oplib.load(oplib.build(EXAMPLE, tmp_path_factory.mktemp("example")))
    return lib
