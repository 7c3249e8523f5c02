"""The compile engine (apache-tvm-ffi) as an optional dependency, and the tools it needs.

Nothing here imports ``tvm_ffi`` at module import time: ``import tensorplay.utils.cpp_jit``
stays cheap, and a machine without the engine still imports it and gets
``is_available() == False`` plus a clear error from every loader.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType

INSTALL_HINT = (
    "tensorplay.utils.cpp_jit needs the tvm-ffi compile engine (PyPI: apache-tvm-ffi). "
    "Install it with `pip install apache-tvm-ffi ninja` (or reinstall tensorplay-cppjit, "
    "which depends on both)"
)

_lock = threading.Lock()
_engine: ModuleType | None = None
_import_error: BaseException | None = None


def _import() -> ModuleType | None:
    global _engine, _import_error
    with _lock:
        if _engine is None and _import_error is None:
            try:
                import tvm_ffi  # noqa: PLC0415 - optional and slow (it imports torch if present)
                import tvm_ffi.cpp  # noqa: PLC0415, F401
            except Exception as exc:  # a broken install counts as absent, with its reason
                _import_error = exc
            else:
                _engine = tvm_ffi
    return _engine


def is_available() -> bool:
    """Whether the tvm-ffi engine imports (``cpp_jit``'s loaders need it)."""
    return _import() is not None


def engine() -> ModuleType:
    """The ``tvm_ffi`` module; ``RuntimeError`` naming tvm-ffi and how to install it if absent."""
    mod = _import()
    if mod is None:
        raise RuntimeError(f"{INSTALL_HINT}. Import failed with: {_import_error!r}")
    return mod


def ensure_ninja() -> None:
    """Put the ``ninja`` PyPI package's executable on PATH when none is there already.

    tvm-ffi runs ``ninja`` by name. The ``ninja`` wheel (a dependency of tensorplay-cppjit)
    installs it next to the interpreter's scripts, which is not on PATH when a venv's
    python is run by path without activating the venv.
    """
    if shutil.which("ninja"):
        return
    candidates = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    try:
        import ninja  # noqa: PLC0415 - the PyPI package knows where its binary lives

        candidates.insert(0, Path(ninja.BIN_DIR))
    except (ImportError, AttributeError):
        pass
    for folder in candidates:
        if (folder / "ninja").is_file():
            os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
            return
    raise RuntimeError(
        "cpp_jit builds run `ninja`, which is not on PATH and not installed next to this "
        f"Python ({sys.executable}); install it with `pip install ninja`"
    )
