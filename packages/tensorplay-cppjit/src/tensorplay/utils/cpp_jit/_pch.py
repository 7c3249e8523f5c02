"""A precompiled header for the preamble every inline build starts with (GCC only).

Parsing tvm-ffi's headers is most of a small extension's compile time (about 2 s of 2.3 s
here). The preamble ``load_inline`` prepends is always the same, so it is compiled once
per cache (and tvm-ffi version) into ``<cache>/pch_<key>/tvm_ffi_preamble.h.gch``, and
inline builds compile with ``-include <that header>``: GCC then loads the ``.gch``
instead of parsing. If the ``.gch`` does not fit the build's flags GCC silently parses the
header text instead, so a mismatch costs time, never correctness. Compilers other than
GCC, and failures to make the header, simply build without it.

GCC trusts a ``.gch`` blindly: a damaged one crashes it (an internal compiler error in
every later build). So the header is used only when its SHA-256 matches the one recorded
when it was made (hashing it costs ~0.1 s, paid only when something is compiled), a
mismatch rebuilds it, and a build that still fails in a way that points at the header
(``build_with``) is retried without it, the header being remade next time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from tensorplay.utils.cpp_jit import _cache, _engine

logger = logging.getLogger("tensorplay.utils.cpp_jit")

# the same lines, in the same order, as tvm_ffi.cpp's load_inline preamble
PREAMBLE = "\n".join(
    [
        "#include <tvm/ffi/container/tensor.h>",
        "#include <tvm/ffi/dtype.h>",
        "#include <tvm/ffi/error.h>",
        "#include <tvm/ffi/extra/c_env_api.h>",
        "#include <tvm/ffi/function.h>",
        "",
    ]
)
HEADER = "tvm_ffi_preamble.h"

_lock = threading.Lock()
_failed = False  # a failed attempt is not retried in this process


@functools.lru_cache(maxsize=4)
def _gcc_version(cxx: str) -> str | None:
    """``cxx --version``'s first line when ``cxx`` is GCC (a new GCC gets a new header)."""
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or "Free Software Foundation" not in out.stdout:
        return None
    return None if "clang" in out.stdout else out.stdout.splitlines()[0]


def _flags() -> list[str]:
    from tvm_ffi import libinfo  # noqa: PLC0415 - the engine is optional

    # what tvm-ffi compiles main.cpp with (flags that change code generation must match)
    finders = ("find_include_path", "find_dlpack_include_path")
    incs = dict.fromkeys(getattr(libinfo, f)() for f in finders if hasattr(libinfo, f))
    return ["-std=c++17", "-fPIC", "-O2", *(f"-I{p}" for p in incs)]


def _location() -> tuple[Path, str, str, list[str]] | None:
    """(folder, key, compiler, flags) of this cache's header, or None without GCC."""
    cxx = os.environ.get("CXX", "c++")
    version = _gcc_version(cxx) if shutil.which(cxx) else None
    if version is None:
        return None
    tvm_ffi = _engine.engine()
    flags = _flags()
    key = _cache.content_key(
        {"pch": PREAMBLE, "flags": flags, "cxx": cxx, "gcc": version, "engine": tvm_ffi.__version__}
    )
    return _cache.cache_root() / f"pch_{key[:16]}", key, cxx, flags


def _verified(folder: Path, key: str) -> bool:
    gch = folder / f"{HEADER}.gch"
    try:
        record = json.loads((folder / _cache.MANIFEST).read_text())
        if record.get("key") != key or (folder / HEADER).read_text() != PREAMBLE:
            return False
        return gch.stat().st_size == record.get("size") and _cache.file_sha256(gch) == record.get(
            "sha256"
        )
    except (OSError, ValueError):  # missing, unreadable or corrupt: not trusted
        return False


def include_flags() -> list[str]:
    """``["-include", header]`` for inline C++ builds, or ``[]`` when no PCH is usable."""
    global _failed
    where = None if _failed else _location()
    if where is None:
        return []
    folder, key, cxx, flags = where
    header = folder / HEADER
    with _lock, _cache.locked(folder):
        if not _verified(folder, key):
            try:
                _make(folder, header, key, cxx, flags)
            except (OSError, subprocess.SubprocessError) as exc:
                _failed = True
                logger.info("cpp_jit: building without a precompiled header (%s)", exc)
                return []
    return ["-include", str(header)]


def discard() -> None:
    """Forget this cache's header: the next build that wants it makes it again."""
    where = _location()
    if where is not None:
        with _lock, _cache.locked(where[0]):
            (where[0] / _cache.MANIFEST).unlink(missing_ok=True)


def build_with(compile_: Callable[[list[str]], str]) -> str:
    """``compile_(pch_flags)`` with the header; if that fails in a way that points at the
    header (GCC crashed, or named the ``.gch``), once more without it, and the header is
    remade by the next build."""
    flags = include_flags()
    if not flags:
        return compile_([])
    try:
        return compile_(flags)
    except RuntimeError as exc:
        log = str(exc)
        if "internal compiler error" not in log and f"{HEADER}.gch" not in log:
            raise
        logger.warning("cpp_jit: the precompiled header failed the build; retrying without it")
        discard()
        return compile_([])


def _make(folder: Path, header: Path, key: str, cxx: str, flags: list[str]) -> None:
    logger.info("cpp_jit: precompiling tvm-ffi's headers once for this cache (a few seconds)")
    header.write_text(PREAMBLE)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gch.")
    os.close(fd)
    try:
        subprocess.run(
            [cxx, *flags, "-x", "c++-header", str(header), "-o", tmp],
            check=True,
            capture_output=True,
            timeout=600,
        )
        gch = folder / f"{HEADER}.gch"
        record = {"key": key, "size": os.stat(tmp).st_size, "sha256": _cache.file_sha256(Path(tmp))}
        os.replace(tmp, gch)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _cache.atomic_write(folder / _cache.MANIFEST, json.dumps(record).encode())
