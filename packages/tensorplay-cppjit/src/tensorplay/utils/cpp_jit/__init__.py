"""C++/CUDA JIT and AOT for TensorPlay (distribution ``tensorplay-cppjit``).

A thin frontend over the apache-tvm-ffi compile engine: source strings or files are
compiled into a shared library (cached by content) whose exported functions take
TensorPlay tensors zero-copy through DLPack. See ``docs/cpp_jit.md``.

>>> from tensorplay.utils import cpp_jit
>>> cpp_jit.is_available()  # doctest: +SKIP
True
"""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.utils.cpp_jit._build import BuildError, build, build_inline
from tensorplay.utils.cpp_jit._engine import is_available
from tensorplay.utils.cpp_jit._load import load, load_inline, load_module, system_lib
from tensorplay.utils.cpp_jit._module import Kernel, Module

__all__ = [
    "BuildError",
    "Kernel",
    "Module",
    "build",
    "build_inline",
    "is_available",
    "load",
    "load_inline",
    "load_module",
    "system_lib",
]
