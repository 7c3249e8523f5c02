"""The `tensorplay` that imports is ours, not PyPI's unrelated `tensorplay` 1.1.0."""

from __future__ import annotations

import importlib.metadata as md
import json
import re
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import tensorplay

REPO = Path(__file__).resolve().parents[2]
VERSION_FILE = REPO / "packages" / "tensorplay-core" / "src" / "tensorplay" / "_version.py"
OURS = {
    "tensorplay",
    "tensorplay-core",
    "tensorplay-library",
    "tensorplay-compile",
    "tensorplay-kernels",
    "tensorplay-cppjit",
    "tensorplay-nn",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def repo_version() -> str:
    match = re.search(
        r'^__version__\s*=\s*["\']([^"\']+)["\']', VERSION_FILE.read_text(), re.MULTILINE
    )
    assert match, f"no __version__ line in {VERSION_FILE}"
    return match.group(1)


def test_version_is_the_repo_version() -> None:
    assert tensorplay.__version__ == repo_version()


def test_core_distribution_version_matches() -> None:
    assert md.version("tensorplay-core") == tensorplay.__version__


def test_imported_from_our_source_or_our_wheel() -> None:
    init = Path(tensorplay.__file__).resolve()
    core_src = (REPO / "packages" / "tensorplay-core" / "src").resolve()
    dist = md.distribution("tensorplay-core")
    if init.is_relative_to(core_src):
        # Editable install: tensorplay-core must point at this checkout.
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        assert direct.get("dir_info", {}).get("editable"), "tensorplay-core is not editable"
        assert Path(url2pathname(urlparse(direct["url"]).path)).resolve() == core_src.parent
    else:
        # A wheel install: the file must be listed in tensorplay-core's RECORD.
        owned = {Path(str(dist.locate_file(f))).resolve() for f in dist.files or ()}
        assert init in owned, f"{init} is neither under {core_src} nor from tensorplay-core"


def test_no_foreign_tensorplay_distribution() -> None:
    # The name `tensorplay`, if installed, must be our meta-package at our version.
    try:
        meta = md.distribution("tensorplay")
    except md.PackageNotFoundError:
        meta = None
    if meta is not None:
        assert meta.version == tensorplay.__version__, (
            f"distribution 'tensorplay' {meta.version} is not ours (PyPI's unrelated project?)"
        )
        requires = {_norm(r.split("==")[0]) for r in meta.requires or () if "extra" not in r}
        assert "tensorplay-core" in requires, "distribution 'tensorplay' is not our meta-package"
    # Whatever distribution ships files of the top-level `tensorplay` package must be ours.
    owners = {_norm(d) for d in md.packages_distributions().get("tensorplay", [])}
    assert owners <= OURS, f"foreign distributions provide `tensorplay`: {owners - OURS}"
