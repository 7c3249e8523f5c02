"""A precompiled header for the preamble every inline build starts with (GCC only).

Parsing tvm-ffi's headers is most of a small extension's compile time (about 2 s of 2.3 s
here). The preamble ``load_inline`` prepends is always the same, so it is compiled once
per cache (and tvm-ffi version) into ``<cache>/pch_<key>/tvm_ffi_preamble.h.gch``, and
inline builds compile with ``-include <that header>``: GCC then loads the ``.gch``
instead of parsing. If the ``.gch`` does not fit the build's flags GCC silently parses the
header text instead, so a mismatch costs time, never correctness. Compilers other than
GCC, and failures to make the header, simply build without it.
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
def _is_gcc(cxx: str) -> bool:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return (
        out.returncode == 0
        and "Free Software Foundation" in out.stdout
        and "clang" not in out.stdout
    )


def _flags() -> list[str]:
    from tvm_ffi import libinfo  # noqa: PLC0415 - the engine is optional

    # what tvm-ffi compiles main.cpp with (flags that change code generation must match)
    finders = ("find_include_path", "find_dlpack_include_path")
    incs = dict.fromkeys(getattr(libinfo, f)() for f in finders if hasattr(libinfo, f))
    return ["-std=c++17", "-fPIC", "-O2", *(f"-I{p}" for p in incs)]


def _verified(folder: Path, key: str) -> bool:
    gch = folder / f"{HEADER}.gch"
    try:
        record = json.loads((folder / _cache.MANIFEST).read_text())
        st = gch.stat()
    except (OSError, ValueError):
        return False
    # size and mtime (not a hash of ~70 MB on every build): the folder is private (0700)
    return (
        record.get("key") == key
        and record.get("size") == st.st_size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def include_flags() -> list[str]:
    """``["-include", header]`` for inline C++ builds, or ``[]`` when no PCH is usable."""
    global _failed
    cxx = os.environ.get("CXX", "c++")
    if _failed or not shutil.which(cxx) or not _is_gcc(cxx):
        return []
    tvm_ffi = _engine.engine()
    flags = _flags()
    key = _cache.content_key(
        {"pch": PREAMBLE, "flags": flags, "cxx": cxx, "engine": tvm_ffi.__version__}
    )
    folder = _cache.cache_root() / f"pch_{key[:16]}"
    header = folder / HEADER
    if _verified(folder, key):
        return ["-include", str(header)]
    with _lock, _cache.locked(folder):
        if not _verified(folder, key):
            try:
                _make(folder, header, key, cxx, flags)
            except (OSError, subprocess.SubprocessError) as exc:
                _failed = True
                logger.info("cpp_jit: building without a precompiled header (%s)", exc)
                return []
    return ["-include", str(header)]


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
        os.replace(tmp, gch)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    st = gch.stat()
    record = {"key": key, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    (folder / _cache.MANIFEST).write_text(json.dumps(record))
