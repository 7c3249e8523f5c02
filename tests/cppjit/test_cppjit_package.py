"""tensorplay-cppjit adds tensorplay.utils.cpp_jit to core's tensorplay.utils."""

import importlib.metadata as md


def test_cpp_jit_imports_with_core_version() -> None:
    import tensorplay.utils
    import tensorplay.utils.cpp_jit as cpp_jit

    assert isinstance(cpp_jit.__all__, list)
    # core still owns tensorplay.utils; cpp_jit is found through its extended __path__
    assert tensorplay.utils.__file__ is not None
    assert (
        md.version("tensorplay-cppjit") == md.version("tensorplay-core") == tensorplay.__version__
    )
    assert f"tensorplay-core=={tensorplay.__version__}" in (md.requires("tensorplay-cppjit") or [])
