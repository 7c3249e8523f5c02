"""tensorplay-library imports next to tensorplay-core and is versioned with it."""

import importlib.metadata as md

import tensorplay


def test_library_imports_with_core_version() -> None:
    import tensorplay.library as library

    assert isinstance(library.__all__, list)
    assert md.version("tensorplay-library") == md.version("tensorplay-core")
    assert md.version("tensorplay-library") == tensorplay.__version__
    assert f"tensorplay-core=={tensorplay.__version__}" in (md.requires("tensorplay-library") or [])
