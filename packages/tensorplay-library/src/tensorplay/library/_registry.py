"""The operator registry: qualified name -> ``CustomOpDef``, one per process.

Definitions take a lock (two threads defining the same name: exactly one wins, the
other gets the "already defined" error); lookups are lock-free dict reads. Every op is
also published to core's ``tp.ops`` table.
"""

from __future__ import annotations

import threading
from typing import Any

from tensorplay._extension import register_op_name
from tensorplay.library._names import parse_qualname
from tensorplay.library._op import CustomOpDef

__all__ = ["add", "get_op", "has_op", "resolve", "lock"]

_ops_by_name: dict[str, CustomOpDef] = {}
lock = threading.RLock()


def add(op: CustomOpDef) -> CustomOpDef:
    """Register a freshly made op; ``RuntimeError`` if the name is taken."""
    with lock:
        if op.name in _ops_by_name:
            raise RuntimeError(
                f"operator {op.name} is already defined; pick another name, or add kernels to "
                f"the existing op with tensorplay.library.get_op({op.name!r}).register_kernel(...)"
            )
        _ops_by_name[op.name] = op
        register_op_name(op.namespace, op.opname, op)
    return op


def get_op(name: str) -> CustomOpDef:
    """The operator called ``name`` (``"ns::op"``); ``RuntimeError`` if it is not defined."""
    parse_qualname(name)
    op = _ops_by_name.get(name)
    if op is None:
        raise RuntimeError(
            f"operator {name} is not defined; define it first with "
            f"tensorplay.library.custom_op({name!r}, fn, mutates_args=()) or "
            f"tensorplay.library.define({name!r}, '(Tensor x) -> Tensor')"
        )
    return op


def has_op(name: str) -> bool:
    """Whether an operator called ``name`` is defined."""
    parse_qualname(name)
    return name in _ops_by_name


def resolve(op: Any) -> CustomOpDef:
    """A ``CustomOpDef`` passed as itself or by qualified name."""
    if isinstance(op, CustomOpDef):
        return op
    if isinstance(op, str):
        return get_op(op)
    raise TypeError(
        f"expected a CustomOpDef or a qualified operator name like 'mylib::op', "
        f"got {type(op).__name__}"
    )
