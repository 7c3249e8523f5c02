"""Shim: TensorPlay's metadata hook (version single source) is tools/build/hatch_version.py."""

from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

_SHARED = Path(__file__).resolve().parents[2] / "tools" / "build" / "hatch_version.py"


def get_metadata_hook():  # type: ignore[no-untyped-def]
    if not _SHARED.is_file():  # an unpacked sdist: hatchling takes the fields from PKG-INFO
        from hatchling.metadata.plugin.interface import MetadataHookInterface

        class FromPkgInfo(MetadataHookInterface):
            def update(self, metadata):  # type: ignore[no-untyped-def]
                raise RuntimeError(f"build from the TensorPlay monorepo ({_SHARED} missing)")

        return FromPkgInfo
    spec = spec_from_file_location("_tensorplay_hatch_version", _SHARED)
    module = module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.get_metadata_hook()
