"""Finding a usable apache-tvm: import, version, API check, the tilelang hazard, threads, targets.

``tvm_status()`` is the one answer to "can the TVM backend run here, and if not, why and
what fixes it": ``tp.compile``'s default backend asks it to choose between ``"tvm"`` and
``"eager"``, and ``backend="tvm"`` raises its reason (``load_tvm``).

A ``tvm`` that imports is usable when its version is in ``SUPPORTED`` (the range the
``[tvm]`` extra installs and the tests run with) and it has the API the lowering uses.
tilelang bundles its own (older) ``tvm`` and puts it first on ``sys.path`` when it is
imported; a later ``import tvm`` then gets tilelang's copy, which lacks that API
(``tvm.tirx``, ``tvm.s_tir``, ``tvm.compile``). We never guess: the module ``import
tvm`` returns is checked, and when it is not usable the reason says which ``tvm`` was
found, where, and (if tilelang is loaded) why.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from types import ModuleType
from typing import Any

__all__ = [
    "SUPPORTED",
    "TvmStatus",
    "configure_threads",
    "load_tvm",
    "resolve_target",
    "tvm_status",
]

# NOTE: the same range as the [tvm] extra in packages/tensorplay-compile/pyproject.toml
# (a test compares them). Releases below lack the API the lowering uses; releases from the
# upper bound on are untested (TVM 0.x changes that API between minor releases).
SUPPORTED = "apache-tvm>=0.26,<0.28"
_LOWEST, _BELOW = (0, 26), (0, 28)
INSTALL = f"pip install '{SUPPORTED}' (or pip install './packages/tensorplay-compile[tvm]')"
# what the lowering uses; tilelang's bundled tvm and older releases lack some of it
_REQUIRED = ("te", "tirx", "s_tir", "compile", "IRModule", "target")


@dataclasses.dataclass(frozen=True)
class TvmStatus:
    """Whether the TVM backend can run here; else ``reason`` says why and ``fix`` what to do.

    ``version`` and ``path`` describe the ``tvm`` module found (empty when none imports).
    """

    available: bool
    reason: str = ""
    fix: str = ""
    version: str = ""
    path: str = ""

    def __bool__(self) -> bool:
        return self.available

    def __str__(self) -> str:
        if self.available:
            return f"usable (apache-tvm {self.version}, {self.path})"
        return f"not usable: {self.reason}. {self.fix}"


def _version_tuple(version: str) -> tuple[int, ...] | None:
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else None


def _check(tvm: ModuleType) -> TvmStatus:
    """The status of the imported module ``tvm``: its API first, then its version."""
    where = getattr(tvm, "__file__", None) or "<unknown location>"
    version = str(getattr(tvm, "__version__", "unknown"))
    missing = [name for name in _REQUIRED if not hasattr(tvm, name)]
    if missing or not hasattr(tvm.te, "create_prim_func"):
        reason = (
            f"the 'tvm' module imported from {where} (version {version}) lacks "
            f"{', '.join('tvm.' + m for m in missing) or 'tvm.te.create_prim_func'}, which "
            f"the TVM backend needs ({SUPPORTED})"
        )
        if "tilelang" in sys.modules:
            reason += (
                "; tilelang is imported in this process and puts its bundled tvm first on "
                "sys.path, so 'import tvm' does not reach apache-tvm"
            )
            fix = "Run the TVM backend in a process that does not import tilelang."
        else:
            fix = f"Install a supported release: {INSTALL}."
        return TvmStatus(False, reason, fix, version, where)
    parsed = _version_tuple(version)
    if parsed is None or not _LOWEST <= parsed[:2] < _BELOW:
        reason = (
            f"apache-tvm {version} is installed ({where}), but the TVM backend supports "
            f"{SUPPORTED} only"
        )
        return TvmStatus(False, reason, f"Install a supported release: {INSTALL}.", version, where)
    return TvmStatus(True, version=version, path=where)


def tvm_status() -> TvmStatus:
    """Can ``backend="tvm"`` run in this process? (Imports tvm when it is installed.)"""
    return _probe()[0]


def load_tvm() -> ModuleType:
    """The apache-tvm module, or ``RuntimeError`` saying what is wrong and how to fix it."""
    status, tvm = _probe()
    if tvm is None:
        raise RuntimeError(
            f"the TVM backend cannot run: {status.reason}. {status.fix} Or compile with "
            "backend='eager', or leave backend unset to use TVM only where it can run."
        )
    return tvm


def _probe() -> tuple[TvmStatus, ModuleType | None]:
    """The status, and the tvm module when it is usable."""
    try:
        import tvm  # noqa: PLC0415 - optional dependency, imported on first use only
    except Exception as e:  # noqa: BLE001 - a broken install is a status, not a crash
        if isinstance(e, ModuleNotFoundError) and e.name == "tvm":
            return TvmStatus(False, "apache-tvm is not installed", f"Install it: {INSTALL}."), None
        # installed but broken, e.g. a libtvm_runtime built against another apache-tvm-ffi
        reason = f"apache-tvm is installed but 'import tvm' fails ({type(e).__name__}: {e})"
        return TvmStatus(False, reason, f"Reinstall a supported release: {INSTALL}."), None
    status = _check(tvm)
    return status, (tvm if status else None)


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
        # tvm is optional: its submodules are imported only once load_tvm() has found it
        from tvm.target import codegen  # noqa: PLC0415

        return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    if isinstance(target, (str, dict)):
        return tvm.target.Target(target)
    raise TypeError(f"tvm option target must be a str, dict or tvm Target, got {target!r}")
