"""``Library(ns, kind)``: PyTorch's schema-first way to define operators and add kernels.

``"DEF"`` defines the namespace's operators (one DEF library per namespace),
``"IMPL"`` only adds kernels, ``"FRAGMENT"`` extends a namespace from several places.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tensorplay.library import _registry
from tensorplay.library._api import define_op
from tensorplay.library._names import parse_qualname, schema_qualname
from tensorplay.library._schema import parse_schema

__all__ = ["Library"]

_KINDS = ("DEF", "IMPL", "FRAGMENT")
_def_namespaces: set[str] = set()
_def_lock = threading.Lock()


class Library:
    """Operators of one namespace, defined from schema strings.

    ::

        lib = Library("mylib", "DEF")
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, device_type="CPU")
    """

    def __init__(self, namespace: str, kind: str = "DEF"):
        if not isinstance(namespace, str) or not namespace.isidentifier():
            raise ValueError(
                f"Library: namespace must be a Python identifier like 'mylib', got {namespace!r}"
            )
        if kind not in _KINDS:
            raise ValueError(f"Library({namespace!r}): kind must be one of {_KINDS}, got {kind!r}")
        if kind == "DEF":
            with _def_lock:
                if namespace in _def_namespaces:
                    raise RuntimeError(
                        f"Library({namespace!r}, 'DEF'): the namespace already has a DEF "
                        f"library; use Library({namespace!r}, 'FRAGMENT') to define more "
                        "operators in it"
                    )
                _def_namespaces.add(namespace)
        self.ns, self.kind = namespace, kind

    def __repr__(self) -> str:
        return f"Library(kind={self.kind}, ns={self.ns})"

    def _qualify(self, name: str) -> str:
        if "::" not in name:
            return f"{self.ns}::{name}"
        namespace, _ = parse_qualname(name)
        if namespace != self.ns:
            raise ValueError(
                f"{self!r}: operator {name!r} is outside namespace {self.ns!r}; use "
                f"Library({namespace!r}, ...) for it"
            )
        return name

    def define(self, schema: str, *, alias_analysis: str = "", tags: Any = ()) -> None:
        """Define an operator from ``"name(Tensor x) -> Tensor"`` (or ``"ns::name(...)"``).

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
        qualname = self._qualify(head)
        if self.kind == "IMPL":
            raise RuntimeError(
                f"{self!r}.define({schema!r}): IMPL libraries only add kernels; define "
                f"operators with Library({self.ns!r}, 'DEF') or 'FRAGMENT'"
            )
        with _registry.lock:
            if _registry.has_op(qualname) and self.kind != "FRAGMENT":
                raise RuntimeError(
                    f"{self!r}.define: operator {qualname} is already defined; define it once, "
                    "or extend the namespace with a FRAGMENT library"
                )
            define_op(qualname, signature, exist_ok=True)

    def impl(
        self,
        op_name: str,
        fn: Callable[..., Any] | None = None,
        *,
        device_type: str = "CompositeExplicitAutograd",
        dispatch_key: str = "",
        allow_override: bool = True,
    ) -> Any:
        """Register ``fn`` as the kernel of ``op_name`` for ``dispatch_key`` (if given) or
        ``device_type`` (``"CPU"``, ``"CUDA"``, a composite spelling, or ``"Meta"`` for the
        fake kernel). Usable directly or as a decorator."""
        op = _registry.get_op(self._qualify(op_name))
        key = dispatch_key or device_type

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            if isinstance(key, str) and key.lower() == "meta":
                return op.register_fake(func, allow_override=allow_override)
            return op.register_kernel(key, func)

        return register if fn is None else register(fn)

    def fallback(self, kind: Any = None, *args: Any, **kwargs: Any) -> None:
        """Not supported: TensorPlay has no per-key fallthrough table."""
        raise NotImplementedError(
            f"{self!r}.fallback: TensorPlay's dispatcher has no per-dispatch-key fallback "
            "table; register kernels per operator with Library.impl or register_kernel"
        )
