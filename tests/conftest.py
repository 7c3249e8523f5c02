"""Shared test configuration: hypothesis profiles and the import path of the core package.

Profiles: ``dev`` (default locally: fast, random), ``ci`` (the default when ``CI`` is set:
derandomised, so CI never depends on luck) and ``explore`` (many random examples, for
hunting bugs locally); pick one with the ``HYPOTHESIS_PROFILE`` environment variable.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

try:  # an editable/wheel install wins; a bare checkout runs from the source tree
    import tensorplay  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/tensorplay-core/src"))

settings.register_profile(
    "dev",
    max_examples=25,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
settings.register_profile(
    "explore",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
_default = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """One fresh TensorPlay build cache (cpp_jit, Triton launchers) per session, so nothing
    comes from ~/.cache; a nested pytest run started by a test passes its folder on in
    ``TENSORPLAY_TEST_CACHE_DIR`` and shares it. Folders whose tests build kernels use it for
    every test (an autouse fixture in their conftest)."""
    shared = os.environ.get("TENSORPLAY_TEST_CACHE_DIR")
    root = Path(shared) if shared else tmp_path_factory.mktemp("tp_cache")
    saved = os.environ.get("TENSORPLAY_CACHE_DIR")
    os.environ["TENSORPLAY_CACHE_DIR"] = str(root)
    yield root
    if saved is None:
        os.environ.pop("TENSORPLAY_CACHE_DIR", None)
    else:
        os.environ["TENSORPLAY_CACHE_DIR"] = saved
