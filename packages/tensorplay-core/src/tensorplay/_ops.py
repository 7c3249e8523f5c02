"""``tp.ops``: operators registered by ``tensorplay.library``, as ``tp.ops.<namespace>.<op>``.

Core owns the name table so that ``tp.ops`` works without importing the library
distribution; ``tensorplay.library`` is the only writer (``add``, ``remove``). Lookups are plain
dict reads: ``tp.ops.mylib.op`` is the very ``CustomOpDef`` that ``custom_op`` returned.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ops", "add", "remove", "lookup"]

# namespace -> {op name -> operator}; replaced copy-on-write under the lock, so a reader
# never sees a dict that another thread is resizing.
_table: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def add(namespace: str, name: str, op: Any) -> None:
    """Publish ``op`` as ``tp.ops.<namespace>.<name>`` (called by ``tensorplay.library``)."""
    global _table
    with _lock:
        table = dict(_table)
        ops_of_ns = dict(table.get(namespace, {}))
        ops_of_ns[name] = op
        table[namespace] = ops_of_ns
        _table = table


def remove(namespace: str, name: str) -> None:
    """Withdraw ``tp.ops.<namespace>.<name>`` (and the namespace once it is empty); called by
    ``tensorplay.library`` when a library is destroyed. A missing name changes nothing."""
    global _table
    with _lock:
        if name not in _table.get(namespace, {}):
            return
        table = dict(_table)
        ops_of_ns = {k: v for k, v in table[namespace].items() if k != name}
        if ops_of_ns:
            table[namespace] = ops_of_ns
        else:
            del table[namespace]
        _table = table


def lookup(namespace: str, name: str) -> Any | None:
    """The operator ``namespace::name``, or None."""
    return _table.get(namespace, {}).get(name)


class _Namespace:
    """``tp.ops.<namespace>``: attribute access returns the registered operator."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, name: str) -> Any:
        op = _table.get(self._name, {}).get(name)
        if op is None:
            known = sorted(_table.get(self._name, {}))
            raise AttributeError(
                f"tp.ops.{self._name} has no operator {name!r} (registered: {known}); "
                f"define it with tensorplay.library.custom_op('{self._name}::{name}', ...)"
            )
        return op

    def __dir__(self) -> list[str]:
        return sorted(_table.get(self._name, {}))

    def __repr__(self) -> str:
        return f"<tp.ops namespace {self._name!r}>"


class _Ops:
    """``tp.ops``: one attribute per namespace that has registered operators."""

    __slots__ = ()

    def __getattr__(self, namespace: str) -> _Namespace:
        ns = _namespaces.get(namespace)
        if ns is not None and namespace in _table:
            return ns
        if namespace.startswith("__") or namespace not in _table:
            raise AttributeError(
                f"tp.ops has no namespace {namespace!r} (namespaces: {sorted(_table)}); "
                f"operators appear here once defined, e.g. with "
                f"tensorplay.library.custom_op('{namespace}::my_op', ...)"
            )
        return _namespaces.setdefault(namespace, _Namespace(namespace))

    def __dir__(self) -> list[str]:
        return sorted(_table)

    def __repr__(self) -> str:
        return "<tp.ops: operators registered by tensorplay.library>"


_namespaces: dict[str, _Namespace] = {}  # one object per namespace, made on first access
ops = _Ops()
