"""cpp_jit's own native helpers, compiled once per cache into one library.

``_allocator.cc`` (TensorPlay's environment allocator for ``Tensor::FromEnvAlloc``) and
``_guard.cc`` (the catch-all every kernel is called through) share one build: a new
cache pays for one extra compile, not two, and a loaded module costs one library load.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tensorplay.utils.cpp_jit import _build, _engine

_SOURCES = ("_allocator.cc", "_guard.cc")
_FUNCTIONS = ["install", "is_active", "live_blocks", "guard"]

_lock = threading.Lock()
_library: Any = None
_guard: Any = None


def library() -> Any:
    """The loaded helper library (built into the cache on first use)."""
    global _library, _guard
    if _library is None:
        with _lock:
            if _library is None:
                here = Path(__file__).parent
                path = _build.build_inline(
                    "tensorplay_cppjit_support",
                    cpp_sources=[(here / name).read_text() for name in _SOURCES],
                    functions=_FUNCTIONS,
                )
                lib = _engine.engine().load_module(path)
                _guard = lib.get_function("guard")
                _library = lib
    return _library


def guard(fn: Any, qualname: str) -> Any:
    """``fn`` (an engine function) wrapped so that whatever C++ exception it throws
    arrives as a Python exception naming ``qualname``, never as std::terminate."""
    if _guard is None:
        library()
    return _guard(fn, qualname)
