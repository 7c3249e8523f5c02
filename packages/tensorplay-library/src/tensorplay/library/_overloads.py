"""Overloads: ``tp.ops.ns.foo.Tensor`` (an ``OpOverload``) and ``tp.ops.ns.foo`` when it
has named overloads (an ``OpOverloadPacket``, which picks one by the argument types).

Each overload is its own operator (a ``CustomOpDef`` named ``"ns::foo.Tensor"``, with its
own schema, kernels and formulas); these classes only name and select them. An operator
with just the default overload is its own packet: ``tp.ops.ns.foo`` is the
``CustomOpDef`` itself and ``tp.ops.ns.foo.default`` its ``OpOverload``.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
from typing import TYPE_CHECKING, Any

import tensorplay
from tensorplay import Tensor, device as _Device, dtype as _DType
from tensorplay.capture import Proxy
from tensorplay.library._schema import Schema

if TYPE_CHECKING:
    from tensorplay.library._op import CustomOpDef

__all__ = ["OpOverload", "OpOverloadPacket", "mismatch"]


class OpOverload:
    """One overload of an operator: ``tp.ops.ns.foo.default``, ``tp.ops.ns.foo.Tensor``.

    Calling it calls the operator (``CustomOpDef``) it stands for; ``_schema`` is the
    parsed schema (``.name``, ``.overload_name``, ``.arguments``, ``.returns``) and
    ``name()`` the qualified name with the overload (``"ns::foo.Tensor"``), as in PyTorch.
    Registration functions (``register_kernel``, ``opcheck``, ...) accept it in place of
    the operator.
    """

    __slots__ = ("_op", "__name__", "__qualname__")

    def __init__(self, op: CustomOpDef):
        self._op = op
        self.__name__ = f"{op.opname}.{self._overloadname}"
        self.__qualname__ = op.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._op(*args, **kwargs)

    @property
    def _schema(self) -> Schema:
        return self._op._function_schema()

    @property
    def _overloadname(self) -> str:
        return self._op.overload_name or "default"

    @property
    def _opname(self) -> str:
        return self._op.opname

    @property
    def namespace(self) -> str:
        return self._op.namespace

    @property
    def overloadpacket(self) -> Any:
        """``tp.ops.<namespace>.<name>``: the packet this overload belongs to."""
        return getattr(getattr(tensorplay.ops, self._op.namespace), self._op.opname)

    def name(self) -> str:
        """``"ns::foo.Tensor"``; ``"ns::foo"`` for the default overload."""
        return self._op.name

    def __repr__(self) -> str:
        op = self._op
        return f"<OpOverload(op='{op.namespace}.{op.opname}', overload='{self._overloadname}')>"

    def __str__(self) -> str:
        return f"{self._op.namespace}.{self.__name__}"


class OpOverloadPacket:
    """``tp.ops.ns.foo`` for an operator with named overloads (``foo.Tensor``,
    ``foo.Scalar``, and possibly the default ``foo``).

    Attribute access gives an overload (``.Tensor``, ``.default``); ``overloads()`` lists
    their names in definition order. A call runs the first overload, in definition order,
    whose schema accepts the arguments (count, names, keyword-only-ness, types), as
    PyTorch does; no match is a ``TypeError`` saying why each overload was refused.
    """

    def __init__(self, namespace: str, name: str):
        self._namespace, self._name = namespace, name
        self.__name__ = name
        self._qualified_op_name = f"{namespace}::{name}"
        self._overloads: dict[str, CustomOpDef] = {}
        # (argument types, keyword names) -> overload; replaced whole when the overloads
        # change, so a reader never sees a stale entry
        self._chosen: dict[tuple, CustomOpDef] = {}

    def set_overloads(self, overloads: dict[str, CustomOpDef]) -> None:
        """Publish the overloads (the registry calls this under its lock)."""
        self._overloads = dict(overloads)
        self._chosen = {}

    def overloads(self) -> list[str]:
        return list(self._overloads)

    def __getattr__(self, name: str) -> OpOverload:
        if name.startswith("__"):
            raise AttributeError(name)
        op = self._overloads.get(name)
        if op is None:
            raise AttributeError(
                f"tp.ops.{self._namespace}.{self._name} has no overload {name!r} (overloads: "
                f"{self.overloads()}); define it with Library({self._namespace!r}, "
                f"'FRAGMENT').define('{self._name}.{name}(Tensor x) -> Tensor')"
            )
        return op._opoverload

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._overloads})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve(args, kwargs)(*args, **kwargs)

    def _resolve(self, args: tuple, kwargs: dict) -> CustomOpDef:
        key = _type_key(args, kwargs)
        chosen = self._chosen
        op = chosen.get(key) if key is not None else None
        if op is not None:
            return op
        refusals = []
        for candidate in self._overloads.values():
            reason = mismatch(candidate, args, kwargs)
            if reason is None:
                # an overload whose signature is still unknown (no schema, no kernel yet)
                # accepted without looking: do not remember that choice
                known = candidate._parsed is not None or candidate._signature_fn is not None
                if key is not None and known:
                    chosen[key] = candidate
                return candidate
            refusals.append(f"  {candidate.name}: {reason}")
        got = ", ".join(
            [type(a).__name__ for a in args]
            + [f"{k}={type(v).__name__}" for k, v in kwargs.items()]
        )
        raise TypeError(
            f"tp.ops.{self._namespace}.{self._name}: no overload accepts ({got}):\n"
            + "\n".join(refusals)
            + f"\nPass arguments one of them accepts, or call an overload directly, e.g. "
            f"tp.ops.{self._namespace}.{self._name}.{next(iter(self._overloads), 'default')}(...)"
        )

    def __repr__(self) -> str:
        return f"<OpOverloadPacket(op='{self._namespace}.{self._name}')>"

    def __str__(self) -> str:
        return f"{self._namespace}.{self._name}"


def _type_key(args: tuple, kwargs: dict) -> tuple | None:
    """What overload resolution depends on, or None when an argument is a container
    (then the element types matter too, and the call is resolved afresh)."""
    types = tuple(map(type, args)) + tuple(map(type, kwargs.values()))
    if list in types or tuple in types or dict in types:
        return None
    return types + tuple(kwargs)


def mismatch(op: CustomOpDef, args: tuple, kwargs: dict) -> str | None:
    """Why ``op`` cannot take ``(*args, **kwargs)``, or None if it can: bound against its
    schema, with types checked; an op whose schema is unknown is bound against its
    kernel's signature only."""
    try:
        schema = op._function_schema()
    except (RuntimeError, ValueError):
        params = op._params
        if params is None:
            return None
        try:
            inspect.Signature(params).bind(*args, **kwargs)
        except TypeError as e:
            return str(e)
        return None
    if op._params is not None and any(a.name is None for a in schema.arguments):
        # a schema written without names ("(Tensor, SymInt) -> Tensor"): keywords bind by
        # the kernel's parameter names, as the kernel call itself would
        kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        names = [p.name for p in op._params if p.kind not in kinds]
        named = [
            dataclasses.replace(a, name=names[i]) if a.name is None and i < len(names) else a
            for i, a in enumerate(schema.arguments)
        ]
        schema = dataclasses.replace(schema, arguments=tuple(named))
    return _bind(schema, args, kwargs)


def _bind(schema: Schema, args: tuple, kwargs: dict) -> str | None:
    arguments = schema.arguments
    positional = [a for a in arguments if not a.kwarg_only]
    if len(args) > len(positional):
        return f"takes at most {len(positional)} positional argument(s), got {len(args)}"
    named = {a.name: a for a in arguments if a.name is not None}
    for k in kwargs:
        if k not in named:
            return f"has no argument named {k!r} (arguments: {list(named)})"
    for i, (arg, value) in enumerate(zip(positional, args)):
        if arg.name in kwargs:
            return f"got argument {arg.name!r} both by position and by keyword"
        if not _accepts(arg.type, value):
            return f"argument {arg.name or i!r} expects {arg.type}, got {type(value).__name__}"
    for i, arg in enumerate(arguments[len(args) :], start=len(args)):
        if arg.name in kwargs:
            value = kwargs[arg.name]
            if not _accepts(arg.type, value):
                return f"argument {arg.name!r} expects {arg.type}, got {type(value).__name__}"
        elif arg.default is None:
            return f"missing argument {arg.name or i!r} ({arg.type})"
    return None


def _accepts(type_text: str, value: Any) -> bool:
    """Whether ``value`` may be passed for a schema type (``"Tensor?"``, ``"int[2]"``)."""
    if type_text.endswith("?"):
        return value is None or _accepts(type_text[:-1], value)
    if type_text.endswith("]"):
        base, size = type_text[:-1].rsplit("[", 1)
        if isinstance(value, (list, tuple)):
            return all(_accepts(base, v) for v in value)
        return bool(size) and base in ("int", "SymInt") and _accepts(base, value)  # int[2] = 3
    check = _CHECKS.get(type_text)
    return True if check is None else check(value)


def _is_tensor(value: Any) -> bool:
    # an object taking part in __tensorplay_function__ (a capture proxy, a tensor-like
    # wrapper) stands for a tensor, as __torch_function__ objects do for torch's matching
    return isinstance(value, Tensor) or hasattr(type(value), "__tensorplay_function__")


def _number(kind: type) -> Any:
    # a capture proxy may stand for a symbolic number too
    return lambda v: isinstance(v, (kind, Proxy)) and not isinstance(v, Tensor)


# Types we do not model (Layout, MemoryFormat, Generator, Stream, Any, ...) accept any value.
_CHECKS = {
    "Tensor": _is_tensor,
    "int": _number(numbers.Integral),
    "SymInt": _number(numbers.Integral),
    "float": _number(numbers.Real),
    "complex": _number(numbers.Complex),
    "Scalar": _number(numbers.Complex),
    "bool": lambda v: isinstance(v, (bool, Proxy)),
    "str": lambda v: isinstance(v, str),
    "ScalarType": lambda v: isinstance(v, _DType),
    "Device": lambda v: isinstance(v, (str, _Device)),
}
