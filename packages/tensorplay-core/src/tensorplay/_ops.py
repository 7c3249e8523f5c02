"""``tp.ops``: operators registered by ``tensorplay.library``, as ``tp.ops.<namespace>.<op>``.

Core owns the name table so that ``tp.ops`` works without importing the library
distribution; ``tensorplay.library`` is the only writer (``add``, ``remove``). Lookups are plain
dict reads: ``tp.ops.mylib.op`` is the very ``CustomOpDef`` that ``custom_op`` returned.

Installed operator libraries (``tensorplay.oplib``'s wheels) register themselves on first
use: when ``tp.ops.<namespace>`` names a namespace nobody registered, the entry point of that
name in the group ``tensorplay.oplibs`` is loaded and called (it registers the library's
operators), once, and the lookup is retried. Only a miss pays for this; an entry point that
fails raises ``ImportError`` naming its distribution.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "ops",
    "add",
    "remove",
    "lookup",
    "ENTRY_POINT_GROUP",
    "installed_libraries",
    "distribution_version",
]

#: The entry-point group of installed operator libraries: name = the namespace they define,
#: value = a callable that registers their operators.
ENTRY_POINT_GROUP = "tensorplay.oplibs"

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


# ---- installed distributions (importlib.metadata, imported on the first miss only) ----------


def _read_entry_points(group: str) -> list:
    import importlib.metadata  # noqa: PLC0415 - ~15 ms: only a miss (or the report) pays it

    return list(importlib.metadata.entry_points(group=group))


def distribution_version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (None: not installed)
    (tensorplay-oplib checks the apache-tvm-ffi ABI with it)."""
    import importlib.metadata  # noqa: PLC0415

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---- installed operator libraries (entry points) ----------------------------------------------

# Scanning the installed distributions costs milliseconds: done once, on the first miss.
_entry_points: dict[str, list[EntryPoint]] | None = None
_loaded: set[str] = set()  # namespaces whose entry point ran to completion
# Reentrant: an entry point that (indirectly) looks up tp.ops.<its namespace> while it
# registers must get the ordinary "no namespace" answer, not a deadlock.
_load_lock = threading.RLock()


def installed_libraries() -> dict[str, list[EntryPoint]]:
    """Namespace -> the entry points of group ``tensorplay.oplibs`` that claim it."""
    global _entry_points
    with _load_lock:
        if _entry_points is None:
            found: dict[str, list[EntryPoint]] = {}
            for ep in _read_entry_points(ENTRY_POINT_GROUP):
                found.setdefault(ep.name, []).append(ep)
            _entry_points = found
        return _entry_points


def _distribution(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"


def _load_installed(namespace: str) -> bool:
    """Register ``namespace`` from its installed operator library; whether one was found.

    Raises ``ImportError`` (naming the distribution and the entry point) when the library's
    entry point fails, or when two distributions claim the namespace; a later lookup tries
    again, so the error is never swallowed.
    """
    with _load_lock:
        if namespace in _table:
            return True
        if namespace in _loaded:
            return False  # its entry point ran and withdrew everything since (or is running)
        candidates = installed_libraries().get(namespace)
        if not candidates:
            return False
        if len({(ep.value, _distribution(ep)) for ep in candidates}) > 1:
            claims = "; ".join(f"{_distribution(ep)} ({ep.value})" for ep in candidates)
            raise ImportError(
                f"tp.ops.{namespace}: several installed operator libraries define the "
                f"namespace {namespace!r}: {claims}. Uninstall all but one of them"
            )
        ep = candidates[0]
        _loaded.add(namespace)
        try:
            ep.load()()
        except Exception as exc:
            _loaded.discard(namespace)
            raise ImportError(
                f"tp.ops.{namespace}: the operator library installed by {_distribution(ep)} "
                f"failed to load (entry point {ep.name} = {ep.value} in group "
                f"{ENTRY_POINT_GROUP!r}): {type(exc).__name__}: {exc}"
            ) from exc
        return namespace in _table


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
        if namespace.startswith("__") or (
            namespace not in _table and not _load_installed(namespace)
        ):
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
