"""Guards: the Python values a traced graph baked in, checked before its artifact is reused.

Tracing runs the function's Python code once: a global number becomes a constant in a
node (``x * SCALE``), a global tensor a ``get_attr`` constant, a global flag picks a
branch. The artifact is valid only while those values stay what they were, so
``tp.compile`` adds ``Guards.snapshot()`` (a hashable summary of their current values)
to its cache key: a changed value misses the cache and the function is traced again,
like torch.compile's guards.

``collect(fn)`` reads ``fn``'s bytecode (and that of the Python functions it reaches
through globals and closures) for the names it loads. A snapshot compares:

* tensors by identity, shape, dtype, device and ``requires_grad``, not their data: the
  graph reads the tensor itself each time it runs, so in-place updates need no retrace;
* numbers, strings, ``None``, dtypes, devices and tuples/lists/dicts of them by value;
* modules by the attributes the code reads from them (``config.SCALE``);
* functions by identity, and the globals they read are guarded too;
* any other object by identity only (its attributes are not guarded).
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import tensorplay as tp

__all__ = ["Guards", "collect"]

_MISSING = object()  # a name not bound (yet): binding it later must retrace
_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_ATTRS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_BY_ID = frozenset({types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type})
_MAX_ITEMS = 64  # longer containers are compared by identity: a snapshot runs every call


class Guards:
    """Readers of the guarded values; ``snapshot()`` summarises what they read now."""

    def __init__(self, readers: list[Callable[[], Any]]) -> None:
        self._readers = readers

    def __len__(self) -> int:
        return len(self._readers)

    def values(self) -> list[Any]:
        """The guarded values now (an artifact keeps them alive, so no id is reused)."""
        return [read() for read in self._readers]

    def snapshot(self) -> tuple:
        return tuple([_summary(read(), 0) for read in self._readers])


def collect(fn: Callable) -> Guards:
    """Guards on every global, module attribute and closure value ``fn``'s code reads."""
    readers: list[Callable[[], Any]] = []
    seen: set[tuple] = set()
    pending = [fn]
    visited: set[int] = set()
    while pending:  # iterative: helpers may call each other in cycles
        func = _python_function(pending.pop())
        if func is None or id(func) in visited:
            continue
        visited.add(id(func))
        pending.append(getattr(func, "__wrapped__", None))  # what a functools.wraps wrapper calls
        env = func.__globals__
        for name, attr in _global_reads(func.__code__):
            if ("global", id(env), name, attr) in seen:
                continue
            seen.add(("global", id(env), name, attr))
            readers.append(_global_reader(env, name, attr))
            pending.append(readers[-1]())
        for cell in func.__closure__ or ():
            readers.append(_cell_reader(cell))
            pending.append(readers[-1]())
    return Guards(readers)


def _python_function(obj: Any) -> types.FunctionType | None:
    """The plain function behind ``obj`` when it is user code worth reading, else None."""
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, functools.partial):
        obj = obj.func
    if not isinstance(obj, types.FunctionType):
        return None
    if (obj.__module__ or "").split(".")[0] == "tensorplay":
        return None  # our own code: its globals are the library, not the user's settings
    return obj


def _global_reads(code: types.CodeType) -> Iterator[tuple[str, str | None]]:
    """(name, attribute or None) for every global load in ``code`` and its nested code."""
    instructions = list(dis.get_instructions(code))
    for i, ins in enumerate(instructions):
        if ins.opname in _LOADS:
            after = instructions[i + 1] if i + 1 < len(instructions) else None
            yield ins.argval, None
            if after is not None and after.opname in _ATTRS:
                yield ins.argval, after.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # lambdas and comprehensions share the globals
            yield from _global_reads(const)


def _global_reader(env: dict, name: str, attr: str | None) -> Callable[[], Any]:
    if attr is None:
        return lambda: env.get(name, _MISSING)

    def read() -> Any:
        base = env.get(name, _MISSING)
        # only a module's attributes are guarded: reading an object's could run a property
        return getattr(base, attr, _MISSING) if isinstance(base, types.ModuleType) else None

    return read


def _cell_reader(cell: types.CellType) -> Callable[[], Any]:
    def read() -> Any:
        try:
            return cell.cell_contents
        except ValueError:  # a closure variable assigned after the function was made
            return _MISSING

    return read


def _summary(value: Any, depth: int) -> Any:
    """A hashable stand-in for ``value``, equal exactly when a traced graph may be reused."""
    kind = type(value)
    if kind in _BY_ID:  # the usual globals (``tp``, helpers) first: a snapshot runs every call
        return ("id", id(value))
    if isinstance(value, tp.Tensor):
        return ("tensor", id(value), tuple(value.shape), value.dtype, value.device,
                value.requires_grad)  # fmt: skip
    if value is None or kind in (bool, int, str, bytes):
        return (kind, value)
    if kind is float:  # hex: -0.0 differs from 0.0, and nan equals itself
        return (kind, value.hex())
    if kind is complex:
        return (kind, value.real.hex(), value.imag.hex())
    if isinstance(value, (tp.dtype, tp.device)):
        return (kind, value)
    if kind in (tuple, list) and depth < 4 and len(value) <= _MAX_ITEMS:
        return (kind, tuple(_summary(v, depth + 1) for v in value))
    if kind is dict and depth < 4 and len(value) <= _MAX_ITEMS:
        return (kind, tuple((_summary(k, depth + 1), _summary(v, depth + 1))
                            for k, v in value.items()))  # fmt: skip
    return ("id", id(value))
