"""Joining rows: ``cat`` and ``stack`` (a sequence of tensors in, one out)."""

from __future__ import annotations

from tensorplay import _meta as M
from tensorplay._dispatch import OPS, OpDef, call
from tensorplay._factories import zeros
from tensorplay._rows import row_maker
from tensorplay.autograd._derivatives import zeros_like

ROWS: list[OpDef] = []
op = row_maker(ROWS)


def _cat_shape(tensors, dim=0):
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    shapes = [t._shape for t in tensors if t._shape != (0,)]  # legacy: 1-D empty tensors skip
    if not shapes:
        return (0,)
    ref = shapes[0]
    if not ref:
        raise RuntimeError("cat(): zero-dimensional tensor cannot be concatenated")
    d = M.wrap_dim(dim, len(ref), "cat")
    total = 0
    for i, s in enumerate(shapes):
        if len(s) != len(ref) or any(a != b for j, (a, b) in enumerate(zip(s, ref)) if j != d):
            raise RuntimeError(
                f"cat(): Sizes of tensors must match except in dimension {d}. "
                f"Expected {list(ref)} but got {list(s)} for tensor number {i} in "
                "the list"
            )
        total += s[d]
    return ref[:d] + (total,) + ref[d + 1 :]


def _cat(xp, arrays, dim=0):
    kept = [a for a in arrays if a.shape != (0,)]
    if not kept:  # only legacy 1-D empty tensors: torch returns one, whatever dim says
        return xp.concatenate(arrays)
    return xp.concatenate(kept, axis=M.wrap_dim(dim, kept[0].ndim, "cat"))


def _stack_shape(tensors, dim=0):
    if not tensors:
        raise RuntimeError("stack(): expects a non-empty TensorList")
    ref = tensors[0]._shape
    for i, t in enumerate(tensors):
        if t._shape != ref:
            raise RuntimeError(
                f"stack(): stack expects each tensor to be equal size, but got "
                f"{list(ref)} at entry 0 and {list(t._shape)} at entry {i}"
            )
    d = M.wrap_dim(dim, len(ref) + 1, "stack")
    return ref[:d] + (len(tensors),) + ref[d:]


def _stack(xp, arrays, dim=0):
    return xp.stack(arrays, axis=M.wrap_dim(dim, arrays[0].ndim + 1, "stack"))


def _cat_vjp(ctx, grad):
    # each input's slice of the gradient; legacy 1-D empty inputs (skipped by cat) get an
    # empty gradient
    tensors = ctx.inputs[0]
    if all(tuple(t.shape) == (0,) for t in tensors):  # then dim was never read
        return tuple(zeros(0, dtype=grad.dtype, device=grad.device) for _ in tensors)
    grads, start = [], 0
    d = M.wrap_dim(ctx.params["dim"], grad.dim(), "cat")
    for t in tensors:
        if tuple(t.shape) == (0,) and grad.dim() != 1:
            grads.append(zeros(0, dtype=grad.dtype, device=grad.device))
            continue
        grads.append(grad.narrow(d, start, t.shape[d]))
        start += t.shape[d]
    return tuple(grads)


def _seq_jvp(name):
    """cat/stack of the tangents (zeros for inputs without one)."""

    def jvp(ctx, *tangents):
        if all(t is None for t in tangents):
            return None
        ts = [zeros_like(x) if t is None else t for x, t in zip(ctx.inputs[0], tangents)]
        return call(OPS[name], (ts,), ctx.params)

    return jvp


op(
    "cat",
    "tensors, dim=0",
    n_inputs="seq",
    kernel=_cat,
    shape=_cat_shape,
    method=False,
    out=True,
    vjp=_cat_vjp,
    jvp=_seq_jvp("cat"),
)
op(
    "stack",
    "tensors, dim=0",
    n_inputs="seq",
    kernel=_stack,
    shape=_stack_shape,
    method=False,
    out=True,
    vjp=lambda ctx, grad: grad.unbind(M.wrap_dim(ctx.params["dim"], grad.dim(), "stack")),
    jvp=_seq_jvp("stack"),
)
