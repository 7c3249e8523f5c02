"""Hatchling metadata hook shared by all six TensorPlay distributions.

The single source of the version is ``packages/tensorplay-core/src/tensorplay/_version.py``.
Every distribution declares ``dynamic = ["version", ...]`` in its pyproject and loads this
hook through a three-line ``hatch_build.py`` shim next to its pyproject (hatchling's default
custom-hook path). The hook sets:

* ``version`` -- read from ``_version.py``;
* ``dependencies`` / ``optional-dependencies`` -- taken from the package's
  ``[tool.hatch.metadata.hooks.custom]`` table, where ``{version}`` is replaced by that
  version, so sibling pins read ``"tensorplay-core=={version}"`` and stay in lock-step.

A wheel built from an sdist takes these fields from the sdist's PKG-INFO instead (hatchling
does that by itself and then never calls this hook), so the sdist needs no copy of this file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION_FILE = REPO_ROOT / "packages" / "tensorplay-core" / "src" / "tensorplay" / "_version.py"
_VERSION_RE = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\'][ \t]*$', re.MULTILINE)


def read_version(path: Path = VERSION_FILE) -> str:
    """Return the version string assigned to ``__version__`` in ``_version.py``."""
    match = _VERSION_RE.search(path.read_text(encoding="utf-8"))
    if match is None:
        raise ValueError(f'no `__version__ = "X.Y.Z"` line in {path}')
    return match.group(1)


def _fill(requirements: Any, version: str, where: str) -> list[str]:
    if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
        raise TypeError(f"[tool.hatch.metadata.hooks.custom] {where} must be a list of strings")
    return [r.replace("{version}", version) for r in requirements]


class TensorPlayMetadataHook(MetadataHookInterface):
    PLUGIN_NAME = "tensorplay-version"

    def update(self, metadata: dict[str, Any]) -> None:
        dynamic = metadata.get("dynamic", [])
        version = read_version()
        if "version" in dynamic:
            metadata["version"] = version
        if "dependencies" in dynamic:
            metadata["dependencies"] = _fill(
                self.config.get("dependencies", []), version, "dependencies"
            )
        if "optional-dependencies" in dynamic:
            extras = self.config.get("optional-dependencies", {})
            if not isinstance(extras, dict):
                raise TypeError(
                    "[tool.hatch.metadata.hooks.custom] optional-dependencies must be a table"
                )
            metadata["optional-dependencies"] = {
                name: _fill(reqs, version, f"optional-dependencies.{name}")
                for name, reqs in extras.items()
            }


def get_metadata_hook() -> type[MetadataHookInterface]:
    return TensorPlayMetadataHook
