"""The op libraries installed in this environment, read from their metadata only.

Found through the entry-point group of op libraries (core's, ``tensorplay._extension``'s
``OPLIB_ENTRY_POINT_GROUP``: what ``tp.ops.<namespace>`` loads on first access), scanned
once per process as that seam scans it; each library's ``oplib.json`` is read from its
package folder, located without importing the package and without opening its shared
libraries.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

from tensorplay._extension import installed_oplibs

__all__ = ["installed"]


def installed() -> list[dict[str, Any]]:
    """One dict per installed library: ``namespace``, ``distribution``, ``version``,
    ``entry_point``, and from its metadata ``tensorplay_version``, ``ops`` (name ->
    devices with a kernel), ``not_built``; ``error`` instead when the metadata cannot be
    read."""
    found = []
    entry_points = [ep for eps in installed_oplibs().values() for ep in eps]
    for ep in sorted(entry_points, key=lambda e: e.name):
        dist = ep.dist
        info: dict[str, Any] = {
            "namespace": ep.name,
            "distribution": dist.name if dist is not None else None,
            "version": dist.version if dist is not None else None,
            "entry_point": ep.value,
        }
        try:
            meta = _metadata(ep.module)
        except (OSError, ValueError) as exc:
            info["error"] = f"{type(exc).__name__}: {exc}"
        else:
            info["tensorplay_version"] = meta.get("tensorplay_version")
            info["ops"] = {op["schema"].split("(")[0]: op.get("devices", []) for op in meta["ops"]}
            info["not_built"] = meta.get("not_built", {})
        found.append(info)
    return found


def _metadata(module: str) -> dict[str, Any]:
    spec = importlib.util.find_spec(module) if "." not in module else None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package {module!r} of the entry point is not installed")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "oplib.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)
