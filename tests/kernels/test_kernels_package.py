"""tensorplay-kernels imports next to core and library and is versioned with them."""

import importlib.metadata as md

import tensorplay


def test_kernels_imports_with_core_version() -> None:
    import tensorplay.kernels as kernels

    assert isinstance(kernels.__all__, list)
    version = tensorplay.__version__
    assert md.version("tensorplay-kernels") == md.version("tensorplay-core") == version
    requires = md.requires("tensorplay-kernels") or []
    assert f"tensorplay-core=={version}" in requires
    assert f"tensorplay-library=={version}" in requires
