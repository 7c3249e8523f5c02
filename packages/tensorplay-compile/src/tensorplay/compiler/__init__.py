"""Compilation for TensorPlay (distribution ``tensorplay-compile``).

``compile`` (also ``tp.compile``) captures a function with ``tensorplay.graph`` on its
first call and hands the graph to a backend: ``"eager"`` (the interpreter) or ``"tvm"``
(pointwise regions lowered to TVM kernels; ``pip install './packages/tensorplay-compile[tvm]'``).
The default is ``"tvm"`` where it can run and ``"eager"`` elsewhere; ``tvm_status()``
says which and why.
``compiled.report()`` shows how every node runs and why when it is not lowered.
"""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.compiler._api import CompiledFunction, compile, config
from tensorplay.compiler._backends import (
    InvalidBackend,
    list_backends,
    lookup_backend,
    register_backend,
)
from tensorplay.compiler._report import Report, ReportRow
from tensorplay.compiler._tvm_env import tvm_status

__all__ = [
    "CompiledFunction",
    "InvalidBackend",
    "Report",
    "ReportRow",
    "compile",
    "config",
    "list_backends",
    "lookup_backend",
    "register_backend",
    "tvm_status",
]
