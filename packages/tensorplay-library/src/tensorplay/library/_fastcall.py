"""A ``__call__`` generated with the body's own signature, for the fast path.

``CustomOpDef.__call__(self, *args, **kwargs)`` is the readable reference. Packing and
re-spreading ``*args, **kwargs`` and scanning the arguments cost about 0.2 µs of a
~0.3 µs call, so for a body with a plain signature each op gets its own subclass whose
``__call__`` is generated from that signature, e.g. for ``def scaled(x, factor=2.0)``::

    def __call__(__tp_op, x, factor=__tp_d0):
        if __tp_st.plain and type(x) is __tp_T and type(factor) in __tp_NP:
            if not (x.requires_grad or type(factor) is __tp_T and factor.requires_grad):
                __tp_k = __tp_op._table.get(x.device.type)
                if __tp_k is not None:
                    __tp_r = __tp_k(x, factor)
                    if (  # for an op with mutates_args: False
                        type(__tp_r) is __tp_T
                        and __tp_r._storage is not x._storage
                        and (type(factor) is not __tp_T or __tp_r._storage is not factor._storage)
                    ):
                        return __tp_r
                    return __tp_op._finish((x, factor), {}, __tp_r)
            else:
                return __tp_apply(__tp_op, (x, factor), {})
        return __tp_op._call_general((x, factor), {})

Python binds the arguments. Only calls whose arguments are all plain values (the first
a ``Tensor``, the others tensors, numbers, strings, None or dtypes) take the fast path:
such arguments can be neither capture proxies nor ``__tensorplay_function__``
overrides, so neither needs a check, and only a ``Tensor`` can require grad (then the
autograd layer, ``_autograd.apply``, runs the kernel on detached inputs). The common
result, one tensor in new memory from a non-mutating op, is checked inline; anything
else goes through ``_finish``. Everything else (lists, subclasses, proxies) takes
the general path. Arguments reach kernels bound to the signature (positional
parameters positionally, keyword-only ones by keyword). Bodies with
``*args``/``**kwargs`` keep the reference ``__call__``.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from tensorplay import Tensor

if TYPE_CHECKING:
    from tensorplay.library._op import CustomOpDef

__all__ = ["specialise"]

_PREFIX = "__tp_"


def specialise(op: CustomOpDef, params: tuple[inspect.Parameter, ...]) -> None:
    """Give ``op`` a class of its own whose ``__call__`` has the signature ``params``."""
    if not params or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return
    if params[0].kind is params[0].KEYWORD_ONLY or any(p.name.startswith(_PREFIX) for p in params):
        return
    from tensorplay.library import _autograd, _op  # noqa: PLC0415 - they import this module

    env: dict = {
        "__tp_st": _op._state,
        "__tp_T": Tensor,
        "__tp_NP": _op._PLAIN_TYPES,
        "__tp_apply": _autograd.apply,
    }
    sig, positional, keyword = [], [], []
    star_added = False
    for i, p in enumerate(params):
        text = p.name
        if p.default is not p.empty:
            env[f"__tp_d{i}"] = p.default
            text += f"=__tp_d{i}"
        if p.kind is p.KEYWORD_ONLY:
            if not star_added:
                sig.append("*")
                star_added = True
            keyword.append(p.name)
        else:
            positional.append(p.name)
        sig.append(text)
    if any(p.kind is p.POSITIONAL_ONLY for p in params):
        last = max(i for i, p in enumerate(params) if p.kind is p.POSITIONAL_ONLY)
        sig.insert(last + 1, "/")
    first = positional[0]
    args = "(" + "".join(f"{n}, " for n in positional) + ")"
    kwargs = "{" + ", ".join(f"{n!r}: {n}" for n in keyword) + "}"
    forward = ", ".join(positional + [f"{n}={n}" for n in keyword])
    others = positional[1:] + keyword
    plain_args = "".join(f" and type({n}) in __tp_NP" for n in others)
    wants_grad = " or ".join(
        [f"{first}.requires_grad"] + [f"type({n}) is __tp_T and {n}.requires_grad" for n in others]
    )
    # a mutating op always goes through _finish (its arguments' versions are bumped)
    fresh = (
        "False"
        if op.mutates_args
        else " and ".join(
            [f"type(__tp_r) is __tp_T and __tp_r._storage is not {first}._storage"]
            + [f"(type({n}) is not __tp_T or __tp_r._storage is not {n}._storage)" for n in others]
        )
    )
    src = f"""
def __call__(__tp_op, {", ".join(sig)}):
    if __tp_st.plain and type({first}) is __tp_T{plain_args}:
        if not ({wants_grad}):
            __tp_k = __tp_op._table.get({first}.device.type)
            if __tp_k is not None:
                __tp_r = __tp_k({forward})
                if {fresh}:
                    return __tp_r
                return __tp_op._finish({args}, {kwargs}, __tp_r)
        else:
            return __tp_apply(__tp_op, {args}, {kwargs})
    return __tp_op._call_general({args}, {kwargs})
"""
    exec(compile(src, f"<tensorplay custom op {op.name}>", "exec"), env)  # noqa: S102
    call = env["__call__"]
    call.__qualname__ = f"{op.name}.__call__"
    base = type(op)
    op.__class__ = type(base.__name__, (base,), {"__call__": call, "__slots__": ()})
