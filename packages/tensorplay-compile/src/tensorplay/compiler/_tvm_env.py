"""Finding a usable apache-tvm: import, API check, the tilelang hazard, threads, targets.

tilelang bundles its own (older) ``tvm`` and puts it first on ``sys.path`` when it is
imported; a later ``import tvm`` then gets tilelang's copy, which lacks the API this
backend lowers with (``tvm.tirx``, ``tvm.s_tir``, ``tvm.compile``). We never guess:
the module ``import tvm`` returns is checked for that API, and when it is missing the
error says which ``tvm`` was found, where, and (if tilelang is loaded) why.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["TvmStatus", "configure_threads", "load_tvm", "resolve_target", "tvm_status"]

_INSTALL = "pip install 'apache-tvm>=0.25' (or pip install './packages/tensorplay-compile[tvm]')"
# what the lowering uses; tilelang's bundled tvm and pre-0.24 releases lack some of it
_REQUIRED = ("te", "tirx", "s_tir", "compile", "IRModule", "target")


@dataclasses.dataclass(frozen=True)
class TvmStatus:
    """Whether the TVM backend can run here; ``reason`` says why not."""

    available: bool
    reason: str = ""
    version: str = ""
    path: str = ""

    def __bool__(self) -> bool:
        return self.available


def _check(tvm: ModuleType) -> str:
    """Empty when ``tvm`` is a usable apache-tvm, else what is wrong with it."""
    missing = [name for name in _REQUIRED if not hasattr(tvm, name)]
    if not missing and hasattr(tvm.te, "create_prim_func"):
        return ""
    where = getattr(tvm, "__file__", None) or "<unknown location>"
    version = getattr(tvm, "__version__", "unknown")
    msg = (
        f"the 'tvm' module imported from {where} (version {version}) lacks "
        f"{', '.join('tvm.' + m for m in missing) or 'tvm.te.create_prim_func'}, which the TVM "
        "backend needs (apache-tvm >= 0.25)."
    )
    if "tilelang" in sys.modules:
        msg += (
            " tilelang is imported in this process and puts its bundled tvm first on sys.path, "
            "so 'import tvm' does not reach apache-tvm. Run the TVM backend in a process that "
            "does not import tilelang, or use backend='eager'."
        )
    else:
        msg += f" Install a current release: {_INSTALL}."
    return msg


def load_tvm() -> ModuleType:
    """The apache-tvm module, or ``RuntimeError`` saying how to install or fix it."""
    try:
        import tvm  # noqa: PLC0415 - optional dependency, imported on first use only
    except ImportError as e:
        raise RuntimeError(
            f"the TVM backend needs apache-tvm, which is not installed ({e}). "
            f"Install it with: {_INSTALL}; or compile with backend='eager'"
        ) from e
    problem = _check(tvm)
    if problem:
        raise RuntimeError(problem)
    return tvm


def tvm_status() -> TvmStatus:
    """Can ``backend="tvm"`` run in this process? (Imports tvm when it is installed.)"""
    try:
        tvm = load_tvm()
    except RuntimeError as e:
        return TvmStatus(False, str(e))
    return TvmStatus(True, "", getattr(tvm, "__version__", ""), getattr(tvm, "__file__", ""))


# ---- threads -----------------------------------------------------------------------------

_threads = {"configured": None}


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def configure_threads(tvm: ModuleType, num_threads: int | None) -> int:
    """Size TVM's CPU thread pool (default: every core we may run on) and return it.

    NOTE: TVM sizes its pool from TVM_NUM_THREADS when the pool starts, and otherwise
    assumes hyper-threading and takes half the cores (1 of 2 here). So before the first
    kernel runs we set TVM_NUM_THREADS (a user's own setting wins); afterwards
    ``runtime.config_threadpool`` resizes the running pool.
    """
    if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
        raise ValueError(f"tvm option num_threads must be a positive int, got {num_threads!r}")
    want = num_threads or int(os.environ.get("TVM_NUM_THREADS", 0)) or cpu_count()
    if _threads["configured"] is None:
        os.environ.setdefault("TVM_NUM_THREADS", str(max(want, cpu_count())))
    if _threads["configured"] != want:
        tvm.get_global_func("runtime.config_threadpool")(1, want)
        _threads["configured"] = want
    return want


# ---- targets -----------------------------------------------------------------------------


def resolve_target(tvm: ModuleType, target: Any, device_type: str) -> Any:
    """A ``tvm.target.Target`` for ``target`` (default from the inputs' device).

    ``"llvm"`` means this machine's CPU (``mcpu`` from LLVM's host detection), so
    kernels use its vector width (AVX-512 here) instead of generic x86-64.
    """
    if target is None:
        target = "cuda" if device_type == "cuda" else "llvm"
    if isinstance(target, tvm.target.Target):
        return target
    if target == "llvm":
        from tvm.target import codegen  # noqa: PLC0415

        return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    if isinstance(target, (str, dict)):
        return tvm.target.Target(target)
    raise TypeError(f"tvm option target must be a str, dict or tvm Target, got {target!r}")
