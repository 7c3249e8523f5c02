"""tensorplay-compile (graph + compiler) imports next to core and is versioned with it."""

import importlib.metadata as md

import tensorplay


def test_graph_and_compiler_import_with_core_version() -> None:
    import tensorplay.compiler as compiler
    import tensorplay.graph as graph

    assert isinstance(graph.__all__, list)
    assert isinstance(compiler.__all__, list)
    assert md.version("tensorplay-compile") == md.version("tensorplay-core")
    assert md.version("tensorplay-compile") == tensorplay.__version__
    assert f"tensorplay-core=={tensorplay.__version__}" in (md.requires("tensorplay-compile") or [])
