"""Advanced indexing rows: ``x[idx]`` (``_index``) and ``x[idx] = v`` (``_index_put``) with
tensor, list or mask indices.

``indices`` is a tuple of numpy/CuPy index arrays, slices and None, already checked by
``_indexing.py``; these rows exist so that autograd records advanced indexing.
"""

from __future__ import annotations

import numpy as np

from tensorplay import _meta as M
from tensorplay._dispatch import OPS, OpDef
from tensorplay._factories import zeros
from tensorplay._rows import row_maker
from tensorplay._rows.indexing import add_at, on_host
from tensorplay.autograd._derivatives import zeros_like

ROWS: list[OpDef] = []
op = row_maker(ROWS)


# ``indices`` is a tuple of numpy/CuPy index arrays, slices and None, already checked by
# _indexing.py; these rows exist so that autograd records advanced indexing.


def _index_shape(input, *, indices):
    probe = np.broadcast_to(np.empty((), np.int8), tuple(input.shape))
    return probe[tuple(on_host(i) for i in indices)].shape


def _index_put(xp, a, v, *, indices, accumulate=False):
    out = a.copy()
    if not accumulate:
        out[indices] = v
        return out
    add_at(xp, out, indices, v)
    return out


def _index_put_shape(input, values, *, indices, accumulate=False):
    target = _index_shape(input, indices=indices)
    if (
        M.broadcast_shapes(
            target, tuple(values.shape) if hasattr(values, "shape") else (), op="index_put"
        )
        != target
    ):
        raise RuntimeError(
            f"index_put(): values of shape {list(values.shape)} cannot be "
            f"broadcast to the indexed shape {list(target)}"
        )
    return tuple(input.shape)


def _index_vjp(ctx, grad):
    x = ctx.inputs[0]
    blank = zeros(x.shape, dtype=grad.dtype, device=grad.device)
    return (OPS["_index_put"].fn(blank, grad, indices=ctx.params["indices"], accumulate=True),)


def _index_put_vjp(ctx, grad):
    need_x, need_v = ctx.needs_input_grad
    idx, acc = ctx.params["indices"], ctx.params["accumulate"]
    gx = None
    if need_x:
        # overwritten positions got no gradient through the input (unless accumulated)
        gx = (
            grad
            if acc
            else OPS["_index_put"].fn(
                grad, zeros((), dtype=grad.dtype, device=grad.device), indices=idx
            )
        )
    gv = OPS["_index"].fn(grad, indices=idx) if need_v else None
    return (gx, gv)


def _index_put_jvp(ctx, tx, tv=None):
    if tx is None and tv is None:
        return None
    x, v = ctx.inputs
    tx = zeros_like(x) if tx is None else tx
    tv = zeros((), dtype=x.dtype, device=x.device) if tv is None else tv
    return OPS["_index_put"].fn(
        tx, tv, indices=ctx.params["indices"], accumulate=ctx.params["accumulate"]
    )


op(
    "_index",
    "input, *, indices",
    kind="other",
    kernel=lambda xp, a, indices: a[indices],
    shape=_index_shape,
    promote="first",
    method=False,
    vjp=_index_vjp,
    jvp=lambda ctx, t: None if t is None else OPS["_index"].fn(t, indices=ctx.params["indices"]),
)
op(
    "_index_put",
    "input, values, *, indices, accumulate=False",
    kind="other",
    n_inputs=2,
    kernel=_index_put,
    shape=_index_put_shape,
    promote="first",
    inplace=True,
    method=False,
    vjp=_index_put_vjp,
    jvp=_index_put_jvp,
)
