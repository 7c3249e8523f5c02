"""View rows: ``view``, ``reshape``, ``permute``, ``transpose``, ``expand``, ``narrow``,
``as_strided``, ``unbind``, ``split``... Their meta rule is the view's geometry
(``tensorplay._views``); they have no kernel. Gradients are the inverse view where there is
one, else scattered through the positions the view reads.
"""

from __future__ import annotations

import math

from tensorplay import _meta as M, _views as V
from tensorplay._dispatch import OpDef
from tensorplay._factories import ones, zeros
from tensorplay._rows import row_maker
from tensorplay._tensor import strides_of
from tensorplay.autograd._derivatives import (
    cat,
    positions_rule,
    same_op_jvp,
    stack,
    storage_cells,
)

ROWS: list[OpDef] = []
op = row_maker(ROWS)


def _may_overlap(shape, stride) -> bool:
    """False when no two elements can share memory: each stride, smallest first, steps
    past everything the smaller dimensions reach (stride 0, as from expand, overlaps)."""
    reach = 0
    for st, n in sorted((st, n) for n, st in zip(shape, stride) if n > 1):
        if st <= reach:
            return True
        reach += (n - 1) * st
    return False


def _as_strided_vjp(ctx, grad):
    # torch's as_strided_backward: each view element's gradient goes to (is added into)
    # the storage cell it reads; each element of x then takes its cell's gradient, an
    # equal share of it when elements of x share a cell
    x = ctx.inputs[0]
    if x.numel() == 0 or grad.numel() == 0:
        return (zeros(x.shape, dtype=grad.dtype, device=grad.device),)
    x_cells, view_cells, n = storage_cells(x, ctx.params)
    store = zeros(n, dtype=grad.dtype, device=grad.device)
    gx = store.scatter(0, view_cells, grad.reshape(-1), reduce="add").index_select(0, x_cells)
    if _may_overlap(x._shape, strides_of(x)):
        each = ones(x_cells.shape, dtype=grad.dtype, device=grad.device)
        gx = gx / store.scatter(0, x_cells, each, reduce="add").index_select(0, x_cells)
    return (gx.reshape(x.shape),)


def _as_strided_jvp(ctx, t):
    # the tangent of each storage cell is that of the element of x there (0 where x has none)
    if t is None:
        return None
    x, size = ctx.inputs[0], tuple(ctx.params["size"])
    if x.numel() == 0 or math.prod(size) == 0:
        return zeros(size, dtype=t.dtype, device=t.device)
    x_cells, view_cells, n = storage_cells(x, ctx.params)
    store = zeros(n, dtype=t.dtype, device=t.device).scatter(0, x_cells, t.reshape(-1))
    return store.index_select(0, view_cells).reshape(size)


def view_op(name, params, geometry, **kw):
    return op(name, params, kind="view", shape=geometry, promote="first", **kw)


def _reshape_back(ctx, grad):
    return (grad.reshape(ctx.inputs[0].shape),)


def _inverse_permutation(ctx, grad):
    dims = ctx.params["dims"]
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    axes = [M.wrap_dim(d, grad.dim(), "permute") for d in dims]
    return (grad.permute(*sorted(range(len(axes)), key=axes.__getitem__)),)


_RESHAPE = {
    "vjp": _reshape_back,
    "jvp": lambda ctx, t: None if t is None else t.reshape(ctx.out.shape),
}


def _same_view(name, vjp):
    return {"vjp": vjp, "jvp": same_op_jvp(name)}


view_op("view", "input, *shape", V.view, **_RESHAPE)
view_op("reshape", "input, *shape", V.reshape, **_RESHAPE)
view_op("permute", "input, *dims", V.permute, **_same_view("permute", _inverse_permutation))
view_op(
    "transpose",
    "input, dim0, dim1",
    V.transpose,
    **_same_view(
        "transpose",
        lambda ctx, grad: (grad.transpose(ctx.params["dim0"], ctx.params["dim1"]),),
    ),
)
view_op("t", "input", V.t_, **_same_view("t", lambda ctx, grad: (grad.t(),)))
# expand: the gradient comes back expanded; autograd sums it down to the input's shape
view_op("expand", "input, *sizes", V.expand, **_same_view("expand", lambda ctx, grad: (grad,)))
view_op(
    "expand_as",
    "input, other",
    V.expand_as,
    n_inputs=1,
    **_same_view("expand_as", lambda ctx, grad: (grad,)),
)
view_op("squeeze", "input, dim=None", V.squeeze, **_RESHAPE)
view_op("unsqueeze", "input, dim", V.unsqueeze, **_RESHAPE)
view_op("flatten", "input, start_dim=0, end_dim=-1", V.flatten, **_RESHAPE)
view_op("unflatten", "input, dim, sizes", V.unflatten, **_RESHAPE)
view_op("narrow", "input, dim, start, length", V.narrow, **positions_rule("narrow"))
view_op("select", "input, dim, index", V.select, **positions_rule("select"))
view_op(
    "as_strided",
    "input, size, stride, storage_offset=None",
    V.as_strided,
    vjp=_as_strided_vjp,
    jvp=_as_strided_jvp,
)
view_op(
    "movedim",
    "input, source, destination",
    V.movedim,
    **_same_view(
        "movedim",
        lambda ctx, grad: (grad.movedim(ctx.params["destination"], ctx.params["source"]),),
    ),
)
view_op("diagonal", "input, offset=0, dim1=0, dim2=1", V.diagonal, **positions_rule("diagonal"))
view_op(
    "unbind",
    "input, dim=0",
    V.unbind,
    multi=True,
    **_same_view("unbind", lambda ctx, grads: (stack(grads, ctx.params["dim"]),)),
)
view_op(
    "split",
    "input, split_size_or_sections, dim=0",
    V.split,
    multi=True,
    **_same_view("split", lambda ctx, grads: (cat(grads, ctx.params["dim"]),)),
)
view_op(
    "chunk",
    "input, chunks, dim=0",
    V.chunk,
    multi=True,
    **_same_view("chunk", lambda ctx, grads: (cat(grads, ctx.params["dim"]),)),
)
