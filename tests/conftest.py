"""Shared test configuration: hypothesis profiles and the import path of the core package.

Profiles: ``dev`` (default, fast) and ``ci`` (more examples); pick one with the
``HYPOTHESIS_PROFILE`` environment variable.
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
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
