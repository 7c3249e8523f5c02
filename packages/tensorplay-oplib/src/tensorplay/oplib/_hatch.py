"""Hatch plugins ``tensorplay-oplib``: a project's op library built into its wheel.

A user's ``pyproject.toml``::

    [build-system]
    requires = ["hatchling>=1.26", "tensorplay-oplib"]
    build-backend = "hatchling.build"

    [project]
    name = "my-ops"
    version = "0.1.0"
    dynamic = ["entry-points"]          # declared by the metadata hook below

    [tool.hatch.metadata.hooks.tensorplay-oplib]

    [tool.hatch.build.targets.wheel.hooks.tensorplay-oplib]
    schema = "ops.yaml"                 # required
    sources = ["kernels.cc", "kernels.cu"]   # unless the YAML lists them (.cu: CUDA)
    check = false                       # opcheck every operator after building
    cuda = "auto"                       # "on": CUDA kernels required, "off": skipped

``pip wheel .`` then compiles the kernels (``build``), puts the built package
``_tensorplay_oplib_<namespace>/`` into a platform wheel (``py3-none-<platform>``) that
requires the ``tensorplay-oplib`` it was built with, and the metadata hook declares the
entry point ``<namespace> = _tensorplay_oplib_<namespace>:register`` in the group
``tensorplay.oplibs`` that ``tp.ops.<namespace>`` loads.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.metadata.plugin.interface import MetadataHookInterface
from hatchling.plugin import hookimpl

from tensorplay._extension import OPLIB_ENTRY_POINT_GROUP
from tensorplay.oplib._build import build
from tensorplay.oplib._spec import LibrarySpec
from tensorplay.oplib._wheel import entry_point, platform_tag, requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: hatchling depends on tomli there
    import tomli as tomllib

__all__ = ["OplibBuildHook", "OplibMetadataHook"]

PLUGIN = "tensorplay-oplib"
_TABLE = f"[tool.hatch.build.targets.wheel.hooks.{PLUGIN}]"


def _schema_path(root: str, config: dict[str, Any]) -> Path:
    schema = config.get("schema")
    if not isinstance(schema, str) or not schema:
        raise ValueError(f'{_TABLE}: set schema = "ops.yaml" (the op library\'s YAML file)')
    path = Path(root) / schema
    if not path.is_file():
        raise FileNotFoundError(f"{_TABLE}: schema = {schema!r}: no such file {path}")
    return path


def _sources(config: dict[str, Any]) -> dict[str, list[str]] | None:
    value = config.get("sources")
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and all(isinstance(f, str) for f in value):
        return {
            "cuda": [f for f in value if f.endswith(".cu")],
            "cpp": [f for f in value if not f.endswith(".cu")],
        }
    raise TypeError(f"{_TABLE}: sources must be a list of file names, got {value!r}")


class OplibBuildHook(BuildHookInterface):
    """Builds the op library and adds it to the wheel (see the module docstring)."""

    PLUGIN_NAME = PLUGIN

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return  # an sdist carries the YAML and the sources as they are
        schema = _schema_path(self.root, self.config)
        cuda = self.config.get("cuda", "auto")
        check = self.config.get("check", False)
        if not isinstance(check, bool):
            raise TypeError(f"{_TABLE}: check must be true or false, got {check!r}")
        self._tmp = tempfile.mkdtemp(prefix="tensorplay-oplib-")
        package = build(schema, self._tmp, check=check, cuda=cuda, sources=_sources(self.config))
        included = "force_include_editable" if version == "editable" else "force_include"
        build_data[included][str(package)] = package.name
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{platform_tag()}"
        build_data["dependencies"].append(requirement())

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


class OplibMetadataHook(MetadataHookInterface):
    """Declares the library's entry point (its namespace, read from the YAML file)."""

    PLUGIN_NAME = PLUGIN

    def update(self, metadata: dict[str, Any]) -> None:
        if "entry-points" not in metadata.get("dynamic", []):
            raise ValueError(
                f'[project] dynamic must list "entry-points": the {PLUGIN} metadata hook '
                "declares the op library's entry point (group tensorplay.oplibs)"
            )
        pyproject = tomllib.loads((Path(self.root) / "pyproject.toml").read_text("utf-8"))
        hooks = pyproject.get("tool", {}).get("hatch", {}).get("build", {}).get("targets", {})
        config = hooks.get("wheel", {}).get("hooks", {}).get(PLUGIN)
        if config is None:
            raise ValueError(f"{_TABLE} is missing: it names the op library's schema file")
        namespace = LibrarySpec.from_yaml(_schema_path(self.root, config)).namespace
        metadata["entry-points"] = {OPLIB_ENTRY_POINT_GROUP: {namespace: entry_point(namespace)}}


@hookimpl
def hatch_register_build_hook() -> type[BuildHookInterface]:
    return OplibBuildHook


@hookimpl
def hatch_register_metadata_hook() -> type[MetadataHookInterface]:
    return OplibMetadataHook
