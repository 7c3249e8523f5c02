"""The loading entry points: build (or find in the cache), load, wrap as ``Module``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tensorplay.utils.cpp_jit import _allocator, _build, _engine
from tensorplay.utils.cpp_jit._build import Functions, Sources
from tensorplay.utils.cpp_jit._module import Module


def load_module(path: str | os.PathLike[str]) -> Module:
    """Load a library built by ``build_inline``/``build`` (possibly in another process).

    Raises:
        RuntimeError: tvm-ffi is not installed.
        FileNotFoundError: ``path`` does not exist.
    """
    tvm_ffi = _engine.engine()
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"cpp_jit.load_module: path must be a file path, got {path!r}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"cpp_jit.load_module: no library at {p}")
    _allocator.ensure_installed()
    return Module(tvm_ffi.load_module(str(p)), p.stem, str(p))


def load_inline(
    name: str,
    cpp_sources: Sources | None = None,
    cuda_sources: Sources | None = None,
    functions: Functions | None = None,
    *,
    extra_cflags: Sequence[str] | None = None,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    build_directory: str | os.PathLike[str] | None = None,
) -> Module:
    """Compile (or reuse the cached build of) source strings and load the library.

    Example::

        mod = cpp_jit.load_inline("myext", cpp_sources=src, functions=["scale_cpu"])
        mod.scale_cpu(x, y)

    Raises what ``build_inline`` raises.
    """
    path = _build.build_inline(
        name,
        cpp_sources,
        cuda_sources,
        functions,
        extra_cflags=extra_cflags,
        extra_cuda_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags,
        extra_include_paths=extra_include_paths,
        build_directory=build_directory,
    )
    return load_module(path)


def load(
    name: str,
    cpp_files: Sequence[str | os.PathLike[str]] | str | None = None,
    cuda_files: Sequence[str | os.PathLike[str]] | str | None = None,
    *,
    extra_cflags: Sequence[str] | None = None,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    build_directory: str | os.PathLike[str] | None = None,
) -> Module:
    """Compile (or reuse) source files and load the library; see ``build``."""
    path = _build.build(
        name,
        cpp_files,
        cuda_files,
        extra_cflags=extra_cflags,
        extra_cuda_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags,
        extra_include_paths=extra_include_paths,
        build_directory=build_directory,
    )
    return load_module(path)


def system_lib(symbol_prefix: str = "") -> Module:
    """Kernels linked into the running executable (registered with
    ``TVMFFIEnvModRegisterSystemLibSymbol``), reached without dynamic loading."""
    tvm_ffi = _engine.engine()
    if not isinstance(symbol_prefix, str):
        raise TypeError(f"cpp_jit.system_lib: symbol_prefix must be a str, got {symbol_prefix!r}")
    _allocator.ensure_installed()
    return Module(tvm_ffi.system_lib(symbol_prefix), "system_lib", None)
