"""The public functions: defining operators (``custom_op`` and friends, ``define``) and
the top-level ``register_*`` / ``impl`` / ``get_kernel`` that take an op or its name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tensorplay._extension import OPS, register_dispatch_rule
from tensorplay.library import _registry
from tensorplay.library._library import Library
from tensorplay.library._names import (
    AGNOSTIC,
    check_mutates_args,
    device_keys,
    dispatch_key as _dispatch_key,
    parse_qualname,
    schema_qualname,
)
from tensorplay.library._op import CustomOpDef
from tensorplay.library._schema import check_schema, parse_schema

__all__ = [
    "TritonOpDef",
    "TileLangOpDef",
    "custom_op",
    "triton_op",
    "tile_lang_op",
    "define",
    "impl",
    "impl_abstract",
    "get_kernel",
    "register_kernel",
    "register_fake",
    "register_autograd",
    "register_vmap",
    "register_autocast",
]


class TritonOpDef(CustomOpDef):
    """An operator whose kernels launch Triton kernels (through ``wrap_triton``)."""

    _kind = "triton_op"
    is_triton_op = True


class TileLangOpDef(CustomOpDef):
    """An operator whose kernels launch TileLang kernels (through ``wrap_tilelang``)."""

    _kind = "tile_lang_op"
    is_tile_lang_op = True


def _definer(cls: type[CustomOpDef], name, fn, mutates_args, device_types, schema):
    namespace, opname = parse_qualname(name)
    mutates = check_mutates_args(name, mutates_args)
    check_schema(name, schema)  # validate before the decorator is applied
    device_keys(name, device_types)

    def define_op(func: Callable[..., Any]) -> CustomOpDef:
        if not callable(func):
            raise TypeError(f"{name}: the operator body must be callable, got {func!r}")
        op = cls(namespace, opname, func, mutates, device_types, schema)
        return _registry.add(op)

    return define_op if fn is None else define_op(fn)


def custom_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: Sequence[str] = (),
    device_types: Any = None,
    schema: str | None = None,
) -> Any:
    """Define the operator ``name`` (``"namespace::name"``) with ``fn`` as its body.

    Args:
        name: qualified name, e.g. ``"mylib::scaled"``.
        fn: the body; omit it to use ``custom_op(...)`` as a decorator.
        mutates_args: names of the arguments the body writes in place.
        device_types: None (the body serves every device) or the device type(s) it serves.
        schema: optional schema string, e.g. ``"(Tensor x, float a=1.0) -> Tensor"``; it
            must parse, have one argument per parameter of ``fn`` (same names where it
            names them) and mark exactly ``mutates_args`` as ``Tensor(a!)``. Kept
            verbatim (``op.schema``).

    Returns the ``CustomOpDef`` (or a decorator producing it)::

        @custom_op("mylib::scaled", mutates_args=())
        def scaled(x):
            return x * 2

    Raises ``ValueError`` for a malformed name or schema (naming the position) or a
    schema that disagrees with ``fn``/``mutates_args``, ``TypeError`` for a bad
    ``mutates_args``, ``RuntimeError`` if ``name`` is already defined.
    """
    return _definer(CustomOpDef, name, fn, mutates_args, device_types, schema)


def triton_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: Sequence[str] = (),
    device_types: Any = None,
    schema: str | None = None,
) -> Any:
    """Like ``custom_op``, for a body that launches Triton kernels through ``wrap_triton``;
    captured as one opaque node (the compiler never traces into the launches)."""
    return _definer(TritonOpDef, name, fn, mutates_args, device_types, schema)


def tile_lang_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: Sequence[str] = (),
    device_types: Any = None,
    schema: str | None = None,
) -> Any:
    """Like ``custom_op``, for a body that launches TileLang kernels through
    ``wrap_tilelang``; captured as one opaque node."""
    return _definer(TileLangOpDef, name, fn, mutates_args, device_types, schema)


def define(qualname: str, schema: str | None = None, *, lib: Any = None, tags: Any = ()) -> None:
    """Create the operator ``qualname`` without a kernel, if it does not exist yet.

    ``qualname`` may be a full ``"ns::op(Tensor x) -> Tensor"`` string, and may name an
    overload (``"ns::op.Tensor"``). Kernels are attached afterwards with ``impl`` /
    ``register_kernel``; arguments marked ``Tensor(a!)`` become the op's
    ``mutates_args``. Defining an existing operator again with the same schema (or none)
    changes nothing; with another schema it is a ``RuntimeError``. A malformed schema is
    a ``ValueError`` naming the position. With ``lib`` (a ``Library`` of the op's
    namespace) the definition follows that library's rules and ``lib._destroy()``
    withdraws it.
    """
    if not isinstance(qualname, str):
        raise TypeError(f"define: qualname must be a str, got {type(qualname).__name__}")
    _check_lib(lib, "define")
    if "(" in qualname:
        if schema is not None:
            raise ValueError(
                f"define({qualname!r}, {schema!r}): the schema is given twice; pass either a "
                "full 'ns::op(...) -> ...' string or a name and a schema"
            )
        parse_schema(qualname, where="define")  # errors point into the text as given
        qualname, schema = schema_qualname(qualname)
    if lib is not None:
        lib._define(lib._qualify(qualname), schema)
    else:
        _registry.define_op(qualname, schema, exist_ok=True)


def impl(
    qualname: Any, types: Any, func: Callable[..., Any] | None = None, /, *, lib: Any = None
) -> Any:
    """Register ``func`` for ``types`` (``"CPU"``/``"CUDA"``, a composite spelling for the
    device-agnostic slot, or ``"Meta"`` for the fake kernel); decorator or direct. With
    ``lib``, ``lib._destroy()`` withdraws the registration."""
    if isinstance(types, str) and types.lower() == "meta":
        return register_fake(qualname, func, lib=lib)
    return register_kernel(qualname, types, func, lib=lib)


def impl_abstract(
    qualname: Any, func: Callable[..., Any] | None = None, /, *, lib: Any = None
) -> Any:
    """The older name of ``register_fake``."""
    return register_fake(qualname, func, lib=lib)


def get_kernel(op: Any, dispatch_key: str) -> Callable[..., Any]:
    """The kernel registered for ``dispatch_key``: ``"cpu"``/``"cuda"`` give the concrete
    kernel (no fallback), ``"default"``/``"composite"``/Composite spellings the
    device-agnostic one. ``LookupError`` when it is missing or disabled."""
    op = _registry.resolve(op)
    key = _dispatch_key(op.name, dispatch_key)
    kernel = op._kernel(key)
    if kernel is None:
        state = "disabled" if key in op._disabled_here() else "registered"
        slot = "device-agnostic" if key == AGNOSTIC else repr(key)
        raise LookupError(
            f"{op.name} has no {slot} kernel {state} (registered: {op._registered()}); "
            f"register one via {op.name}.register_kernel"
            f"({'None' if key == AGNOSTIC else repr(key)})"
        )
    return kernel


# The top-level register_* take the op (a CustomOpDef, an OpOverload or a qualified name)
# first; with lib=, the registration is tied to that Library: its _destroy() withdraws it.


def register_kernel(
    op: Any, device_types: Any = None, func: Callable[..., Any] | None = None, /, *, lib: Any = None
) -> Any:
    """``op.register_kernel(device_types, func)`` for an op or its qualified name."""
    target = _registry.resolve(op)
    keys = device_keys(target.name, device_types)
    return _tied(
        lib,
        "register_kernel",
        target,
        "kernel",
        keys,
        func,
        lambda f: target.register_kernel(device_types, f),
    )


def register_fake(
    op: Any,
    func: Callable[..., Any] | None = None,
    /,
    *,
    lib: Any = None,
    allow_override: bool = True,
) -> Any:
    """``op.register_fake(func)`` for an op or its qualified name."""
    target = _registry.resolve(op)
    return _tied(
        lib,
        "register_fake",
        target,
        "fake",
        (None,),
        func,
        lambda f: target.register_fake(f, allow_override=allow_override),
    )


def register_autograd(
    op: Any,
    backward: Callable[..., Any],
    /,
    *,
    setup_context: Callable[..., Any] | None = None,
    lib: Any = None,
) -> None:
    """``op.register_autograd(backward, setup_context=...)`` for an op or its name."""
    target = _registry.resolve(op)
    _tied(
        lib,
        "register_autograd",
        target,
        "autograd",
        (None,),
        backward,
        lambda f: target.register_autograd(f, setup_context=setup_context),
        decorator=False,
    )


def register_vmap(op: Any, func: Callable[..., Any] | None = None, /, *, lib: Any = None) -> Any:
    """``op.register_vmap(func)`` for an op or its qualified name."""
    target = _registry.resolve(op)
    return _tied(lib, "register_vmap", target, "vmap", (None,), func, target.register_vmap)


def register_autocast(op: Any, device_type: str, cast_inputs: Any, /, *, lib: Any = None) -> None:
    """``op.register_autocast(device_type, cast_inputs)`` for an op or its name."""
    target = _registry.resolve(op)
    keys = device_keys(target.name, device_type)
    _tied(
        lib,
        "register_autocast",
        target,
        "autocast",
        keys,
        cast_inputs,
        lambda dtype: target.register_autocast(device_type, dtype),
        decorator=False,
    )


def register_tensorplay_dispatch(
    op: Any, dispatch_class: type, func: Callable[..., Any] | None = None, /, *, lib: Any = None
) -> Any:
    """Teach ``dispatch_class`` (a dispatch mode class, or a Tensor subclass defining
    ``__tensorplay_dispatch__``) what to do with ``op``: ``func(mode_or_class, op_handle,
    types, args, kwargs)`` runs where its ``__tensorplay_dispatch__`` would have (PyTorch's
    ``torch.library.register_torch_dispatch``). ``op`` is a custom op, its name, or the name
    of a built-in op (``"mul"``). Used as a decorator when ``func`` is omitted; with ``lib``
    the rule is withdrawn when the library is destroyed."""
    _check_lib(lib, "register_tensorplay_dispatch")
    if isinstance(op, str) and "::" not in op:
        if op not in OPS:
            raise ValueError(
                f"register_tensorplay_dispatch(op): {op!r} is neither a built-in op nor "
                "'namespace::name' of a custom op"
            )
        name = op
    else:
        name = _registry.resolve(op).name

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        remove = register_dispatch_rule(name, dispatch_class, fn)
        if lib is not None:
            lib._check_alive("register_tensorplay_dispatch")
            lib._removers.append(remove)
        return fn

    return register if func is None else register(func)


def _tied(
    lib: Any,
    what: str,
    op: CustomOpDef,
    slot: str,
    keys: tuple,
    value: Any,
    register: Callable[[Any], Any],
    *,
    decorator: bool = True,
) -> Any:
    """``register(value)`` now, or (with ``decorator``) a decorator doing it when
    ``value`` is None; through ``lib`` (whose ``_destroy()`` then withdraws it) when one
    is given."""
    _check_lib(lib, what)

    def run(v: Any) -> Any:
        if lib is None:
            return register(v)
        return lib._register(op, slot, keys, lambda: register(v))

    return run if decorator and value is None else run(value)


def _check_lib(lib: Any, what: str) -> None:
    if lib is not None and not isinstance(lib, Library):
        raise TypeError(
            f"{what}: lib must be None or a tensorplay.library.Library (e.g. the one "
            f"_scoped_library yields), got {type(lib).__name__}"
        )
