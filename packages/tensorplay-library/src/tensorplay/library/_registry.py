"""The operator registry: qualified name -> ``CustomOpDef``, one per process.

Definitions take a lock (two threads defining the same name: exactly one wins, the
other gets the "already defined" error); lookups are lock-free dict reads. Every op is
also published to core's ``tp.ops`` table: ``tp.ops.ns.foo`` is the op itself while
``ns::foo`` has only the default overload, else the ``OpOverloadPacket`` of its
overloads. ``remove`` withdraws an op (a destroyed ``Library``).
"""

from __future__ import annotations

import threading
from typing import Any

from tensorplay._extension import register_op_name, unregister_op_name
from tensorplay.library._names import parse_opname
from tensorplay.library._op import CustomOpDef
from tensorplay.library._overloads import OpOverload, OpOverloadPacket
from tensorplay.library._schema import check_schema, mutated_names

__all__ = ["add", "remove", "define_op", "get_op", "has_op", "resolve", "lock"]

_ops_by_name: dict[str, CustomOpDef] = {}
# "ns::foo" -> {overload name ("default" for "ns::foo") -> op}, in definition order
_overloads: dict[str, dict[str, CustomOpDef]] = {}
_packets: dict[str, OpOverloadPacket] = {}  # "ns::foo" -> its packet, while it has one
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
        packet = op._qualified_op_name
        _overloads[packet] = {**_overloads.get(packet, {}), op.overload_name or "default": op}
        _publish(op.namespace, op.opname)
    return op


def remove(op: CustomOpDef) -> None:
    """Withdraw ``op``: unknown to ``get_op``, gone from ``tp.ops``, and every later call
    of it raises. Removing an op that is not registered (any more) changes nothing."""
    with lock:
        if _ops_by_name.get(op.name) is not op:
            return
        del _ops_by_name[op.name]
        packet = op._qualified_op_name
        rest = {k: v for k, v in _overloads[packet].items() if v is not op}
        if rest:
            _overloads[packet] = rest
        else:
            del _overloads[packet]
        _publish(op.namespace, op.opname)
        op._retire()


def _publish(namespace: str, opname: str) -> None:
    """Point ``tp.ops.<namespace>.<opname>`` at what the overloads of that name make it."""
    qualname = f"{namespace}::{opname}"
    overloads = _overloads.get(qualname)
    if not overloads:
        _packets.pop(qualname, None)
        unregister_op_name(namespace, opname)
    elif list(overloads) == ["default"]:
        _packets.pop(qualname, None)
        register_op_name(namespace, opname, overloads["default"])
    else:
        packet = _packets.get(qualname)
        if packet is None:
            packet = _packets[qualname] = OpOverloadPacket(namespace, opname)
        packet.set_overloads(overloads)
        register_op_name(namespace, opname, packet)


def define_op(qualname: str, schema: str | None, *, exist_ok: bool) -> CustomOpDef:
    """Create a kernel-less op (``define``, ``Library.define``); ``qualname`` may name an
    overload (``"ns::foo.Tensor"``). With ``exist_ok`` an existing op is returned unless
    ``schema`` would change it."""
    namespace, opname, overload = parse_opname(qualname, defining=True)
    parsed = check_schema(qualname, schema)
    mutates = () if parsed is None else mutated_names(qualname, parsed)
    with lock:
        op = _ops_by_name.get(qualname)
        if exist_ok and op is not None:
            if parsed is None or (
                op._parsed is not None and op._parsed.signature() == parsed.signature()
            ):
                return op
            raise RuntimeError(
                f"define: operator {qualname} is already defined with schema {op.schema!r}; "
                f"defining it again with {schema!r} would change its signature. An operator is "
                f"defined once: keep the first schema, pick another name (e.g. "
                f"'{namespace}::{opname}_v2') or add an overload (e.g. "
                f"'{namespace}::{opname}.Scalar')"
            )
        op = CustomOpDef(namespace, opname, None, mutates, None, schema, overload=overload)
        return add(op)


def get_op(name: str) -> CustomOpDef:
    """The operator called ``name`` (``"ns::op"`` or ``"ns::op.overload"``);
    ``RuntimeError`` if it is not defined."""
    namespace, opname, overload = parse_opname(name)
    key = f"{namespace}::{opname}" + (f".{overload}" if overload else "")
    op = _ops_by_name.get(key)
    if op is None:
        named = [n for n in _overloads.get(f"{namespace}::{opname}", {}) if n != "default"]
        if named and not overload:
            raise RuntimeError(
                f"operator {name} has no default overload; name one of its overloads "
                f"{named}, e.g. '{namespace}::{opname}.{named[0]}'"
            )
        raise RuntimeError(
            f"operator {name} is not defined; define it first with "
            f"tensorplay.library.custom_op({name!r}, fn, mutates_args=()) or "
            f"tensorplay.library.define({name!r}, '(Tensor x) -> Tensor')"
        )
    return op


def has_op(name: str) -> bool:
    """Whether an operator called ``name`` (``"ns::op"``, ``"ns::op.overload"``) is defined."""
    namespace, opname, overload = parse_opname(name)
    return f"{namespace}::{opname}" + (f".{overload}" if overload else "") in _ops_by_name


def resolve(op: Any) -> CustomOpDef:
    """A ``CustomOpDef`` passed as itself, as an ``OpOverload`` or by qualified name."""
    if isinstance(op, CustomOpDef):
        return op
    if isinstance(op, OpOverload):
        return op._op
    if isinstance(op, str):
        return get_op(op)
    if isinstance(op, OpOverloadPacket):
        raise TypeError(
            f"{op!r} stands for several overloads {op.overloads()}; pass one of them, e.g. "
            f"tp.ops.{op}.{op.overloads()[0]}"
        )
    raise TypeError(
        f"expected a CustomOpDef or a qualified operator name like 'mylib::op' (or an "
        f"OpOverload such as tp.ops.mylib.op.default), got {type(op).__name__}"
    )
