"""Shared test configuration: hypothesis profiles and the import path of the core package.

Profiles: ``dev`` (default locally: fast, random), ``ci`` (the default when ``CI`` is set:
derandomised, so CI never depends on luck) and ``explore`` (many random examples, for
hunting bugs locally); pick one with the ``HYPOTHESIS_PROFILE`` environment variable.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
