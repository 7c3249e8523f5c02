"""``Library(ns, kind)``: PyTorch's schema-first way to define operators and add kernels.

``"DEF"`` defines the namespace's operators (one DEF library per namespace),
``"IMPL"`` only adds kernels, ``"FRAGMENT"`` extends a namespace from several places.
A library remembers what it defined and registered, so ``_destroy()`` (what
``_scoped_library`` runs on exit) withdraws all of it: tests can define a name, drop it,
and define it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tensorplay.library import _registry
from tensorplay.library._names import device_keys, parse_opname, schema_qualname
from tensorplay.library._op import CustomOpDef
from tensorplay.library._schema import parse_schema

__all__ = ["Library", "_scoped_library"]

_KINDS = ("DEF", "IMPL", "FRAGMENT")
_def_namespaces: set[str] = set()
_def_lock = threading.Lock()


class Library:
    """Operators of one namespace, defined from schema strings.

    ::

        lib = Library("mylib", "DEF")
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, device_type="CPU")

    ``dispatch_key`` (PyTorch's third argument) is the key ``impl`` uses when its own
    ``dispatch_key`` is empty, e.g. ``Library("mylib", "IMPL", "CPU")``. Registrations
    last for the process unless ``_destroy()`` withdraws them (a library that is garbage
    collected keeps its operators, unlike PyTorch's).
    """

    def __init__(self, namespace: str, kind: str = "DEF", dispatch_key: str = ""):
        if not isinstance(namespace, str) or not namespace.isidentifier():
            raise ValueError(
                f"Library: namespace must be a Python identifier like 'mylib', got {namespace!r}"
            )
        if kind not in _KINDS:
            raise ValueError(f"Library({namespace!r}): kind must be one of {_KINDS}, got {kind!r}")
        if dispatch_key != "" and not _is_meta(dispatch_key):
            device_keys(f"Library({namespace!r}, {kind!r}): dispatch_key", dispatch_key)
        if kind == "DEF":
            with _def_lock:
                if namespace in _def_namespaces:
                    raise RuntimeError(
                        f"Library({namespace!r}, 'DEF'): the namespace already has a DEF "
                        f"library; use Library({namespace!r}, 'FRAGMENT') to define more "
                        "operators in it"
                    )
                _def_namespaces.add(namespace)
        self.ns, self.kind, self.dispatch_key = namespace, kind, dispatch_key
        self._defined: list[CustomOpDef] = []  # ops this library created
        # (op, slot, key, what this library put there, what it replaced): see _register
        self._registered: list[tuple[CustomOpDef, str, str | None, Any, Any]] = []
        self._removers: list[Callable[[], None]] = []  # other registrations' undo functions
        self._destroyed = False

    def __repr__(self) -> str:
        return f"Library(kind={self.kind}, ns={self.ns})"

    def _qualify(self, name: str) -> str:
        if "::" not in name:
            name = f"{self.ns}::{name}"
        namespace, _, _ = parse_opname(name)
        if namespace != self.ns:
            raise ValueError(
                f"{self!r}: operator {name!r} is outside namespace {self.ns!r}; use "
                f"Library({namespace!r}, ...) for it"
            )
        return name

    def _check_alive(self, what: str) -> None:
        if self._destroyed:
            raise RuntimeError(
                f"{self!r}.{what}: the library was destroyed (its _scoped_library block "
                f"ended) and withdrew its operators; create a new Library({self.ns!r}, ...)"
            )

    def define(self, schema: str, *, alias_analysis: str = "", tags: Any = ()) -> None:
        """Define an operator from ``"name(Tensor x) -> Tensor"`` (or ``"ns::name(...)"``).

        ``"name.overload(...)"`` defines an overload: ``"foo.Tensor(Tensor x) -> Tensor"``
        and ``"foo.Scalar(Tensor x, float s) -> Tensor"`` make ``tp.ops.ns.foo`` an
        ``OpOverloadPacket`` that picks one by the argument types.

        The schema is parsed (a malformed one is a ``ValueError`` naming the position) and
        kept verbatim (``op.schema``); arguments marked ``Tensor(a!)`` become the op's
        ``mutates_args``. Defining an existing operator is a ``RuntimeError``, except in a
        ``FRAGMENT`` library with the same schema.
        """
        if not isinstance(schema, str) or "(" not in schema:
            raise ValueError(
                f"{self!r}.define: expected a schema like 'my_op(Tensor x) -> Tensor', "
                f"got {schema!r}"
            )
        parse_schema(schema, where=f"{self!r}.define")  # errors point into the text as given
        head, signature = schema_qualname(schema)
        self._define(self._qualify(head), signature)

    def _define(self, qualname: str, schema: str | None) -> CustomOpDef:
        """Define ``qualname`` (already in this namespace) as this library's operator."""
        self._check_alive("define")
        if self.kind == "IMPL":
            raise RuntimeError(
                f"{self!r}.define({qualname!r}): IMPL libraries only add kernels; define "
                f"operators with Library({self.ns!r}, 'DEF') or 'FRAGMENT'"
            )
        with _registry.lock:
            existed = _registry.has_op(qualname)
            if existed and self.kind != "FRAGMENT":
                raise RuntimeError(
                    f"{self!r}.define: operator {qualname} is already defined; define it once, "
                    "or extend the namespace with a FRAGMENT library"
                )
            op = _registry.define_op(qualname, schema, exist_ok=True)
            if not existed:
                self._defined.append(op)
        return op

    def impl(
        self,
        op_name: str,
        fn: Callable[..., Any] | None = None,
        dispatch_key: str = "",
        *,
        device_type: str = "CompositeExplicitAutograd",
        allow_override: bool = True,
    ) -> Any:
        """Register ``fn`` as the kernel of ``op_name`` (``"foo"`` or an overload,
        ``"foo.Tensor"``) for the first non-empty of ``dispatch_key``, the library's
        ``dispatch_key`` and ``device_type`` (``"CPU"``, ``"CUDA"``, a composite spelling,
        or ``"Meta"`` for the fake kernel). ``dispatch_key`` may be passed positionally,
        as in PyTorch: ``lib.impl("foo", fn, "CPU")``. Usable directly or as a decorator;
        withdrawn by ``_destroy()``."""
        self._check_alive("impl")
        op = _registry.get_op(self._qualify(op_name))
        key = dispatch_key or self.dispatch_key or device_type

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            if _is_meta(key):
                return self._register(
                    op,
                    "fake",
                    (None,),
                    lambda: op.register_fake(func, allow_override=allow_override),
                )
            keys = device_keys(op.name, key)
            return self._register(op, "kernel", keys, lambda: op.register_kernel(key, func))

        return register if fn is None else register(fn)

    def _register(
        self, op: CustomOpDef, slot: str, keys: tuple, register: Callable[[], Any]
    ) -> Any:
        """Run ``register`` (a registration in ``op``'s ``slot`` for each of ``keys``) and
        remember what it replaced, so ``_destroy()`` can put that back."""
        self._check_alive("register")
        with op._lock:
            before = [op._registration(slot, key) for key in keys]
            result = register()
            for key, previous in zip(keys, before):
                self._registered.append((op, slot, key, op._registration(slot, key), previous))
        return result

    def fallback(self, kind: Any = None, *args: Any, **kwargs: Any) -> None:
        """Not supported: TensorPlay has no per-key fallthrough table."""
        raise NotImplementedError(
            f"{self!r}.fallback: TensorPlay's dispatcher has no per-dispatch-key fallback "
            "table; register kernels per operator with Library.impl or register_kernel"
        )

    def _destroy(self) -> None:
        """Withdraw everything this library defined and registered (idempotent).

        Its operators leave the registry and ``tp.ops`` (holding one and calling it raises);
        on other operators, each kernel/fake/formula it registered is replaced by what was
        there before, unless something registered over it since. A DEF library frees its
        namespace for another DEF library.
        """
        with _registry.lock:
            if self._destroyed:
                return
            self._destroyed = True
            for remove in reversed(self._removers):
                remove()
            self._removers.clear()
            for op, slot, key, mine, previous in reversed(self._registered):
                op._restore(slot, key, mine, previous)
            for op in reversed(self._defined):
                _registry.remove(op)
            self._registered.clear()
            self._defined.clear()
        if self.kind == "DEF":
            with _def_lock:
                _def_namespaces.discard(self.ns)


@contextmanager
def _scoped_library(ns: str, kind: str, dispatch_key: str = "") -> Iterator[Library]:
    """A ``Library`` that withdraws everything it defined and registered when the block
    ends (PyTorch's ``torch.library._scoped_library``), so tests can reuse names::

        with _scoped_library("mylib", "FRAGMENT") as lib:
            lib.define("twice(Tensor x) -> Tensor")
            lib.impl("twice", lambda x: x * 2)
            ...  # tp.ops.mylib.twice exists here only
    """
    lib = Library(ns, kind, dispatch_key)
    try:
        yield lib
    finally:
        lib._destroy()


def _is_meta(key: Any) -> bool:
    return isinstance(key, str) and key.lower() == "meta"
