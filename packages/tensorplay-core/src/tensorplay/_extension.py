"""The internal API of core for TensorPlay's own sibling distributions.

tensorplay-library, -compile, -kernels and -cppjit build on core. What they need beyond
the public API (``tensorplay``, ``tensorplay.capture``, ``tensorplay.autograd``, ...) is
listed here, and only here: they import this module and never a private module of core
(``tensorplay._dispatch``, ``tensorplay.autograd._record``, ...). The import-linter
contracts in pyproject.toml (``[tool.importlinter]``, run by ``tools/lint_imports.py`` in
CI) enforce that, so a reader sees every connection between the distributions in one
place. One exception: each component's ``__init__`` first imports
``tensorplay.utils._require_core``, which must work even when ``tensorplay`` is PyPI's
unrelated package (it names the problem instead of failing here).

The names are internal: they may change in any release, together with the siblings (all
distributions share one version and pin each other exactly).
"""

from __future__ import annotations

from tensorplay import _device_checks, _ops
from tensorplay._device import cupy_or_raise
from tensorplay._dispatch import OPS, OpDef, get_device_kernel, set_device_kernel, state
from tensorplay._dlpack import _FROM_DL as DLPACK_DTYPES, DLTensor
from tensorplay._tensor import alias_of, data_ptr_of
from tensorplay._tensor_op import NO_TENSOR, TensorOp
from tensorplay.utils._python_dispatch import register_dispatch_rule

__all__ = [
    "OPS",
    "OpDef",
    "TensorOp",
    "NO_TENSOR",
    "get_device_kernel",
    "set_device_kernel",
    "dispatch_state",
    "register_dispatch_rule",
    "register_op_name",
    "unregister_op_name",
    "OPLIB_ENTRY_POINT_GROUP",
    "installed_oplibs",
    "distribution_version",
    "DLPACK_DTYPES",
    "DLTensor",
    "data_ptr_of",
    "alias_of",
    "cupy_or_raise",
    "cuda_capturing",
]

# ---- the dispatcher ------------------------------------------------------------------------
# OPS: the op table (name -> OpDef row). get/set_device_kernel: replace a row's kernel on a
# device (tensorplay-kernels routes CUDA ops to its Triton kernels).
# TensorOp: the dispatcher entry with Tensor kernels (tensorplay-library's CustomOpDef
# subclasses it); NO_TENSOR: its kernel slot for calls without a tensor argument.

#: ``dispatch_state.plain`` is the fast-path gate: True while no layer (override or dispatch
#: mode, profiler, autocast, graph capture) needs to see individual calls. Read it on a hot
#: path as an attribute; a layer that must see every call uses ``block()`` / ``unblock()``.
dispatch_state = state

#: ``register_op_name(namespace, name, op)`` publishes ``op`` as ``tp.ops.<namespace>.<name>``.
register_op_name = _ops.add
#: ``unregister_op_name(namespace, name)`` withdraws it (and an emptied namespace).
unregister_op_name = _ops.remove

# ---- installed operator libraries (tensorplay-oplib) -------------------------------------------
#: The entry-point group an op library's wheel declares (``<namespace> = <module>:register``);
#: ``tp.ops.<namespace>`` loads it on first access.
OPLIB_ENTRY_POINT_GROUP = _ops.ENTRY_POINT_GROUP
#: ``installed_oplibs()``: namespace -> the entry points of that group claiming it (each with
#: ``name``, ``value``, ``module``, ``dist.name``, ``dist.version``, ``load()``).
installed_oplibs = _ops.installed_libraries
#: ``distribution_version(name)``: an installed distribution's version, or None; read from
#: its metadata (the apache-tvm-ffi ABI check when a library loads).
distribution_version = _ops.distribution_version

# ---- DLPack ---------------------------------------------------------------------------------
# DLTensor: the ctypes layout of DLPack's DLTensor. DLPACK_DTYPES: (code, bits) -> dtype.

# ---- tensors ---------------------------------------------------------------------------------
# data_ptr_of(t): the address of t's first element (Tensor.data_ptr without the override
# check).
# alias_of(t): a new Tensor object over t's memory and geometry, without autograd history and
# not a view of t (tensorplay-nn's Parameter: an optimizer's in-place update of a parameter
# then takes the same fast path as any tensor that owns its memory).

# ---- CUDA -------------------------------------------------------------------------------------
# cupy_or_raise(): the cupy module, or the error that says how to install it.
# cuda_capturing(): whether a CUDA graph capture is running (on any stream): code that would
# upload host data or synchronise takes its capturable route then (tensorplay-nn's
# multi-tensor optimizer updates).


def cuda_capturing() -> bool:
    return bool(_device_checks._capturing)
