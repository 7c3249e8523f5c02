"""Copy rows: ``clone``, ``contiguous_copy`` (``contiguous()``, ``reshape`` when no view
fits) and ``_to_copy`` (``to(dtype)``): a new tensor with the input's values."""

from __future__ import annotations

from tensorplay._dispatch import OPS, OpDef
from tensorplay._rows import row_maker
from tensorplay.autograd._derivatives import same_op_jvp

ROWS: list[OpDef] = []
op = row_maker(ROWS)


def _same_shape(input, *args, **kwargs):
    return input._shape


op(
    "clone",
    "input, *, memory_format=None",
    kernel=lambda xp, a, memory_format=None: a.copy(),
    shape=_same_shape,
    promote="first",
    vjp=lambda ctx, grad: (grad,),
    jvp=same_op_jvp("clone"),
)
op(
    "contiguous_copy",
    "input",
    kernel=lambda xp, a: a.copy(order="C"),
    shape=_same_shape,
    promote="first",
    method=False,
    vjp=lambda ctx, grad: (grad,),
    jvp=same_op_jvp("contiguous_copy"),
)


def _to_dtype_rule(d, params):
    return d, params["dtype"]


op(
    "_to_copy",
    "input, dtype",
    kind="other",
    kernel=lambda xp, a, dtype: a,  # the dispatcher casts the result to ``dtype``
    shape=_same_shape,
    dtype=_to_dtype_rule,
    promote="first",
    method=False,
    vjp=lambda ctx, grad: (grad,),  # fit_grad casts the gradient back to the input's dtype
    jvp=lambda ctx, t: None if t is None else OPS["_to_copy"].fn(t, ctx.params["dtype"]),
)
