"""The loading entry points: build (or find in the cache), load, wrap as ``Module``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tensorplay.utils.cpp_jit import _allocator, _build, _engine
from tensorplay.utils.cpp_jit._build import Functions, Sources
from tensorplay.utils.cpp_jit._module import Module, ReadOnly, read_only_spec


def load_module(path: str | os.PathLike[str], *, read_only: ReadOnly | None = None) -> Module:
    """Load a library built by ``build_inline``/``build`` (possibly in another process).

    ``read_only`` declares the tensor arguments kernels only read (see ``load_inline``).

    Raises:
        RuntimeError: tvm-ffi is not installed.
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``read_only`` names a function the library does not export.
    """
    tvm_ffi = _engine.engine()
    spec = read_only_spec(read_only)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"cpp_jit.load_module: path must be a file path, got {path!r}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"cpp_jit.load_module: no library at {p}")
    _allocator.ensure_installed()
    return Module(tvm_ffi.load_module(str(p)), p.stem, str(p), spec)


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
    read_only: ReadOnly | None = None,
) -> Module:
    """Compile (or reuse the cached build of) source strings and load the library.

    ``read_only`` maps a function name to the positions of the tensor arguments its
    kernel only reads. Every other tensor argument is treated as written: it is refused
    when its elements share memory (expanded) or, under grad mode, when it requires grad,
    and its version counter is bumped after the call.

    Example::

        mod = cpp_jit.load_inline(
            "myext", cpp_sources=src, functions=["scale_cpu"], read_only={"scale_cpu": [0]}
        )
        mod.scale_cpu(x, y)  # reads x, writes y

    Raises what ``build_inline`` raises; ``ValueError``/``TypeError`` for a malformed
    ``read_only`` (before compiling).
    """
    spec = read_only_spec(read_only)
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
    return load_module(path, read_only=spec)


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
    read_only: ReadOnly | None = None,
) -> Module:
    """Compile (or reuse) source files and load the library; see ``build``, and
    ``load_inline`` for ``read_only``."""
    spec = read_only_spec(read_only)
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
    return load_module(path, read_only=spec)


def system_lib(symbol_prefix: str = "", *, read_only: ReadOnly | None = None) -> Module:
    """Kernels linked into the running executable (registered with
    ``TVMFFIEnvModRegisterSystemLibSymbol``), reached without dynamic loading; a
    ``Module`` like the others (``implements_function``, ``read_only`` as in ``load_inline``)."""
    tvm_ffi = _engine.engine()
    spec = read_only_spec(read_only)
    if not isinstance(symbol_prefix, str):
        raise TypeError(f"cpp_jit.system_lib: symbol_prefix must be a str, got {symbol_prefix!r}")
    _allocator.ensure_installed()
    return Module(tvm_ffi.system_lib(symbol_prefix), "system_lib", None, spec)
