"""Sorting and rearranging rows: ``sort``, ``argsort``, ``topk``, ``tril``/``triu``,
``repeat``, ``flip``, ``roll``, ``diag_embed``/``diag``, ``repeat_interleave``, and the rows
whose result shape depends on the values: ``nonzero``, ``argwhere``, ``unique``,
``masked_select`` (and ``repeat_interleave`` with a tensor of repeats).

Sorts follow torch: NaN is the largest value (last ascending, first descending) and ties
keep their input order. Every sort here is stable: ``stable=False`` promises no order among
ties in torch, so the stable order is one of the valid answers.

torch returns a named ``(values, indices)`` pair from ``sort``/``topk``, a tuple of index
tensors from ``nonzero(as_tuple=True)`` and the outputs its flags ask for from ``unique``;
the dispatcher returns a row's tensors. Those rows are ``Finished`` (``tensorplay._rows``): their
public function turns the dispatcher's result into torch's return type.

Data-dependent shapes are read on the host (on CUDA after ``host_sync``, which refuses
inside a CUDA graph capture). A meta tensor has no values: those rows refuse it, as torch
does, except an empty one, whose result shape needs no values (torch refuses that too).
"""

from __future__ import annotations

import operator
from collections import namedtuple

import numpy as np

from tensorplay import _dtype as D, _meta as M
from tensorplay._device import META
from tensorplay._device_checks import host_sync
from tensorplay._dispatch import OPS, OpDef
from tensorplay._factories import arange, zeros
from tensorplay._rows import finished_maker, row_maker, values_jvp
from tensorplay._rows.indexing import on_host
from tensorplay._tensor import Tensor
from tensorplay.autograd._derivatives import same_op_jvp, zeros_like

ROWS: list[OpDef] = []
op = row_maker(ROWS)
finished = finished_maker(ROWS)

# torch.return_types.sort / torch.return_types.topk
Sort = namedtuple("Sort", ["values", "indices"])
TopK = namedtuple("TopK", ["values", "indices"])


# ---- argument checks (shape rules run them before any kernel, on meta tensors too) -----------


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def _as_int(name, arg, value) -> int:
    """``value`` as an int; like torch, a bool or a float is refused (a 0-d integer tensor or
    a numpy integer is read)."""
    if not _is_bool(value):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{name}(): argument '{arg}' must be int, not {type(value).__name__}")


def _as_ints(name, arg, value) -> tuple:
    """An int or a list/tuple of ints (torch's int list) as a tuple of ints."""
    if not isinstance(value, (list, tuple)):
        return (_as_int(name, arg, value),)
    for i, v in enumerate(value):
        if _is_bool(v) or not hasattr(v, "__index__"):
            raise TypeError(
                f"{name}(): argument '{arg}' must be a tuple of ints, but found element of "
                f"type {type(v).__name__} at pos {i}"
            )
    return tuple(operator.index(v) for v in value)


def _check_bool(name, arg, value, *, none_ok=False) -> None:
    if not (_is_bool(value) or (none_ok and value is None)):
        raise TypeError(
            f"{name}(): argument '{arg}' must be bool, not {type(value).__name__} "
            f"(pass {arg}=True or {arg}=False)"
        )


def _no_dims(name, dim) -> IndexError:
    # torch's rule for these ops: a 0-d tensor has no dimension to name (most dim ops read
    # it as 1-d and accept 0 / -1)
    return IndexError(f"{name}(): Dimension specified as {dim} but tensor has no dimensions")


def _values_needed(name, input, known):
    """The shape of a data-dependent result: on a meta tensor, ``known`` (the shape for no
    elements) when it is empty, else refused as torch refuses it. On other devices the
    kernel decides it from the values; the dispatcher reads a shape rule's answer only for
    meta tensors and in-place writes, which these rows do not have."""
    if input.device is not META:
        return None
    if input.numel() == 0:
        return known
    raise NotImplementedError(
        f"{name}(): the result's shape depends on the tensor's values, which a meta tensor "
        "does not have (torch refuses it too); call it on a tensor with data"
    )


# ---- sort, argsort, topk ---------------------------------------------------------------------


def _sort_key(xp, a):
    # as uint8, bool sorts in the same order on every array module (CuPy sorts no bool)
    return a.view(xp.uint8) if a.dtype == np.bool_ else a


def _order(xp, a, d: int, descending: bool):
    """Indices that sort ``a`` along axis ``d``: stable, NaN the largest value (numpy and
    CuPy put NaN last in an ascending sort, as torch does)."""
    key = _sort_key(xp, a)
    if not descending:
        return xp.argsort(key, axis=d, kind="stable")
    # descending and stable: the ascending order of the reversed slice, reversed; equal
    # elements then keep their input order, and NaN comes first
    up = xp.argsort(xp.flip(key, axis=d), axis=d, kind="stable")
    return (key.shape[d] - 1) - xp.flip(up, axis=d)


def _sort_args(name, input, dim, descending, stable) -> None:
    M.wrap_dim(dim, input.dim(), name)
    _check_bool(name, "descending", descending)
    _check_bool(name, "stable", stable, none_ok=True)


def _sort_shape(input, dim=-1, descending=False, *, stable=False):
    _sort_args("sort", input, dim, descending, stable)
    return (input._shape, input._shape)


def _argsort_shape(input, dim=-1, descending=False, *, stable=False):
    _sort_args("argsort", input, dim, descending, stable)
    return input._shape


def _sort(xp, a, dim=-1, descending=False, *, stable=False):
    if a.ndim == 0:
        return a.copy(), xp.zeros((), xp.int64)
    d = M.wrap_dim(dim, a.ndim, "sort")
    idx = _order(xp, a, d, descending)
    return xp.take_along_axis(a, idx, axis=d), idx


def _argsort(xp, a, dim=-1, descending=False, *, stable=False):
    if a.ndim == 0:
        return xp.zeros((), xp.int64)
    return _order(xp, a, M.wrap_dim(dim, a.ndim, "argsort"), descending)


def _topk_shape(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    d = M.wrap_dim(dim, input.dim(), "topk")
    k = _as_int("topk", "k", k)
    _check_bool("topk", "largest", largest)
    _check_bool("topk", "sorted", sorted)
    shape = input._shape
    n = shape[d] if shape else 1  # a 0-d tensor counts as one element
    if not 0 <= k <= n:
        raise RuntimeError(
            f"topk(): selected index k out of range: k={k}, but dimension {dim} has "
            f"{n} element(s); pass 0 <= k <= {n}"
        )
    out = shape[:d] + (k,) + shape[d + 1 :] if shape else ()
    return (out, out)


def _topk(xp, a, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    # torch keeps a 0-d input whole, for k = 0 too
    if a.ndim == 0:
        return a.copy(), xp.zeros((), xp.int64)
    d = M.wrap_dim(dim, a.ndim, "topk")
    # the k first of a full stable sort: ties resolved by input order, NaN the largest; the
    # result is sorted whatever ``sorted`` says (torch leaves that order unspecified)
    idx = _order(xp, a, d, largest)[(slice(None),) * d + (slice(0, operator.index(k)),)]
    return xp.take_along_axis(a, idx, axis=d), idx


def _sort_positions(x, params):
    """The indices sort chose (recomputed by the same stable sort: autograd keeps only the
    differentiable values output)."""
    return OPS["argsort"].fn(x, params["dim"], params["descending"], stable=True)


def _topk_positions(x, params):
    idx = OPS["argsort"].fn(x, params["dim"], params["largest"], stable=True)
    return idx.narrow(params["dim"], 0, operator.index(params["k"]))


def _gathered_rule(positions):
    """sort/topk: each value's gradient goes back to the element it came from; its tangent
    is that element's."""

    def vjp(ctx, grad):
        x, g = ctx.inputs[0], grad[0]
        if x.dim() == 0:
            return (g,)
        idx = positions(x, ctx.params)
        return (zeros_like(x, dtype=g.dtype).scatter(ctx.params["dim"], idx, g),)

    return {"vjp": vjp, "jvp": values_jvp}


def _values_and_indices(d, params):
    return M.same(d, params)[0], (d, D.int64)


finished(
    "sort",
    "input, dim=-1, descending=False, *, stable=False",
    lambda result, **_: Sort(*result),
    kind="other",
    kernel=_sort,
    shape=_sort_shape,
    dtype=_values_and_indices,
    multi=True,
    allow="bif",
    doc="sort(input, dim=-1, descending=False, *, stable=False) -> (values, indices): the "
    "elements along dim in order (NaN the largest; ties keep their input order).",
    **_gathered_rule(_sort_positions),
)
op(
    "argsort",
    "input, dim=-1, descending=False, *, stable=False",
    kind="other",
    kernel=_argsort,
    shape=_argsort_shape,
    dtype=M.to_int64,
    allow="bif",
)
finished(
    "topk",
    "input, k, dim=-1, largest=True, sorted=True",
    lambda result, **_: TopK(*result),
    kind="other",
    kernel=_topk,
    shape=_topk_shape,
    dtype=_values_and_indices,
    multi=True,
    allow="if",  # torch refuses bool (and complex) topk
    doc="topk(input, k, dim=-1, largest=True, sorted=True) -> (values, indices): the k "
    "largest (smallest) elements along dim, in order.",
    **_gathered_rule(_topk_positions),
)


# ---- tril, triu ------------------------------------------------------------------------------


def _triangle_shape(name):
    def shape(input, diagonal=0):
        if input.dim() < 2:
            raise RuntimeError(
                f"{name}(): input tensor must have at least 2 dimensions, got a "
                f"{input.dim()}-d tensor (a batch of matrices is (..., rows, columns))"
            )
        _as_int(name, "diagonal", diagonal)
        return input._shape

    return shape


def _triangle(lower: bool):
    def kernel(xp, a, diagonal=0):
        n, m = a.shape[-2:]
        k = operator.index(diagonal)
        keep = xp.tri(n, m, k, dtype=bool) if lower else ~xp.tri(n, m, k - 1, dtype=bool)
        return xp.where(keep, a, xp.zeros((), a.dtype))

    return kernel


for _name, _lower in (("tril", True), ("triu", False)):
    op(
        _name,
        "input, diagonal=0",
        kind="other",
        kernel=_triangle(_lower),
        shape=_triangle_shape(_name),
        inplace=True,
        out=True,
        vjp=lambda ctx, grad, _n=_name: (getattr(grad, _n)(ctx.params["diagonal"]),),
        jvp=same_op_jvp(_name),
    )


# ---- repeat, flip, roll ----------------------------------------------------------------------


def _repeats(repeats: tuple, ndim: int) -> tuple:
    """``x.repeat(2, 1)`` and ``x.repeat((2, 1))`` as the tuple ``(2, 1)``, checked."""
    if len(repeats) == 1 and isinstance(repeats[0], (list, tuple)):
        repeats = tuple(repeats[0])
    elif not repeats:
        raise TypeError("repeat(): missing the repeats: pass one int per dimension, e.g. (2, 1)")
    reps = _as_ints("repeat", "repeats", repeats)
    if len(reps) < ndim:
        raise RuntimeError(
            "repeat(): Number of dimensions of repeat dims can not be smaller than number of "
            f"dimensions of tensor (got {len(reps)} for a {ndim}-d tensor)"
        )
    return reps


def _repeat_shape(input, repeats):
    reps = _repeats(repeats, input.dim())
    padded = (1,) * (len(reps) - input.dim()) + input._shape
    out = tuple(r * n for r, n in zip(reps, padded))
    if any(n < 0 for n in out):
        raise RuntimeError(
            f"repeat(): Trying to create tensor with negative dimension {min(out)}: "
            f"{list(out)}; repeats must be >= 0"
        )
    return out


def _repeat(xp, a, repeats):
    # a negative repeat passed the shape rule only along a dimension of size 0
    return xp.tile(a, tuple(max(r, 0) for r in _repeats(repeats, a.ndim)))


def _repeat_vjp(ctx, grad):
    # each copy of the input sends its gradient back: split every dimension into (repeat,
    # size) and sum over the repeats
    shape = tuple(ctx.inputs[0].shape)
    reps = _repeats(ctx.params["repeats"], len(shape))
    padded = (1,) * (len(reps) - len(shape)) + shape
    if not reps:
        return (grad,)
    split = [n for pair in zip(reps, padded) for n in pair]
    summed = grad.reshape(*split).sum(dim=tuple(range(0, len(split), 2)))
    return (summed.reshape(shape),)


def _flip_axes(ndim: int, dims) -> tuple:
    axes = tuple(M.wrap_dim(d, ndim, "flip") for d in _as_ints("flip", "dims", dims))
    for i, d in enumerate(axes):
        if d in axes[:i]:
            raise RuntimeError(f"flip(): dim {d} appears multiple times in the list of dims")
    return axes


def _flip_shape(input, dims):
    _flip_axes(input.dim(), dims)
    return input._shape


def _flip(xp, a, dims):
    axes = _flip_axes(a.ndim, dims)
    if a.ndim == 0 or not axes:
        return a.copy()
    return xp.flip(a, axis=axes).copy()  # xp.flip is a view of the input


def _roll_args(ndim: int, shifts, dims):
    """(shifts, axes), axes None for a roll of the flattened tensor (dims None or empty)."""
    shifts = _as_ints("roll", "shifts", shifts)
    dims = () if dims is None else _as_ints("roll", "dims", dims)
    if not shifts:
        raise RuntimeError("roll(): `shifts` required")
    if len(shifts) != max(len(dims), 1):
        raise RuntimeError(
            f"roll(): shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)} "
            "(one shift per dim; one shift alone when dims is None)"
        )
    if not dims:
        return shifts, None
    if ndim == 0:
        raise _no_dims("roll", dims[0])
    return shifts, tuple(M.wrap_dim(d, ndim, "roll") for d in dims)


def _roll_shape(input, shifts, dims=None):
    _roll_args(input.dim(), shifts, dims)
    return input._shape


def _roll(xp, a, shifts, dims=None):
    shifts, axes = _roll_args(a.ndim, shifts, dims)
    if a.size == 0:
        return a.copy()
    if axes is None:
        return xp.roll(a, shifts[0])  # along the flattened tensor, shape kept
    return xp.roll(a, shifts, axis=axes)


def _negated(shifts):
    if isinstance(shifts, (list, tuple)):
        return tuple(-operator.index(s) for s in shifts)
    return -operator.index(shifts)


# NOTE: torch has no torch.repeat (only Tensor.repeat); every row is also tp.<name>, so
# tp.repeat(x, 2, 1) exists here as well.
op(
    "repeat",
    "input, *repeats",
    kind="other",
    kernel=_repeat,
    shape=_repeat_shape,
    vjp=_repeat_vjp,
    jvp=same_op_jvp("repeat"),
)
op(
    "flip",
    "input, dims",
    kind="other",
    kernel=_flip,
    shape=_flip_shape,
    vjp=lambda ctx, grad: (grad.flip(ctx.params["dims"]),),
    jvp=same_op_jvp("flip"),
)
op(
    "roll",
    "input, shifts, dims=None",
    kind="other",
    kernel=_roll,
    shape=_roll_shape,
    vjp=lambda ctx, grad: (grad.roll(_negated(ctx.params["shifts"]), ctx.params["dims"]),),
    jvp=same_op_jvp("roll"),
)


# ---- nonzero, argwhere, unique: shapes that depend on the values -----------------------------


def _positions(name):
    def kernel(xp, a, *, as_tuple=False):
        if xp is not np:
            host_sync(f"{name}() (its shape depends on the values)")
        if a.ndim == 0:  # one position with no coordinates, or none
            return xp.zeros((int(a != 0), 0), xp.int64)
        return xp.argwhere(a)

    return kernel


def _nonzero_shape(input, *, as_tuple=False):
    _check_bool("nonzero", "as_tuple", as_tuple)
    return _values_needed("nonzero", input, (0, input.dim()))


def _nonzero_finish(result, input, as_tuple=False):
    if not as_tuple:
        return result
    if input.dim() == 0:  # torch reads a 0-d tensor as 1-d here: position 0, or none
        return (zeros(result.shape[0], dtype=D.int64, device=result.device),)
    return result.t().contiguous().unbind(0)  # one contiguous index tensor per dimension


def _unique_shape(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    for arg, value in (
        ("sorted", sorted),
        ("return_inverse", return_inverse),
        ("return_counts", return_counts),
    ):
        _check_bool("unique", arg, value)
    shape = input._shape
    if dim is None:
        return _values_needed("unique", input, ((0,), shape, (0,)))
    if not shape:
        raise _no_dims("unique", dim)
    d = M.wrap_dim(dim, len(shape), "unique")
    if input.numel() == 0 and any(n == 0 for i, n in enumerate(shape) if i != d):
        raise RuntimeError(
            "unique(): There are 0 sized dimensions, and they aren't selected, so unique "
            f"cannot be applied (shape {list(shape)}, dim={dim})"
        )
    return _values_needed("unique", input, (shape, (0,), (0,)))


def _first_of_runs(xp, differs, n: int):
    """True where a run of equal sorted elements (or slices) starts."""
    new = xp.ones(n, dtype=bool)
    new[1:] = differs
    return new


def _unique(xp, a, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    # always sorted, as torch's CPU kernel (sorted=False promises no order)
    if xp is not np:
        host_sync("unique() (its shape depends on the values)")
    if dim is None:
        flat = a.reshape(-1)
        order = xp.argsort(_sort_key(xp, flat), kind="stable")
        ranked = flat[order]
        # NaN != NaN: every NaN is its own value, as in torch; -0.0 == 0.0 are one
        new = _first_of_runs(xp, ranked[1:] != ranked[:-1], flat.size)
        values = ranked[new]
        inverse_shape = a.shape
    else:
        d = M.wrap_dim(dim, a.ndim, "unique")
        moved = xp.moveaxis(a, d, 0)
        n = moved.shape[0]
        if n == 0:
            return a.copy(), xp.zeros(0, xp.int64), xp.zeros(0, xp.int64)
        rows = moved.reshape(n, -1)
        # slices in lexicographic order: lexsort's last key is the primary one
        order = xp.lexsort(_sort_key(xp, rows).T[::-1])
        ranked = rows[order]
        new = _first_of_runs(xp, (ranked[1:] != ranked[:-1]).any(axis=1), n)
        values = xp.moveaxis(ranked[new].reshape((-1,) + moved.shape[1:]), 0, d)
        inverse_shape = (n,)
    inverse = xp.empty(order.shape, xp.int64)
    inverse[order] = xp.cumsum(new) - 1
    starts = xp.flatnonzero(new)
    counts = xp.diff(xp.concatenate([starts, xp.full(1, new.size, starts.dtype)]))
    return values, inverse.reshape(inverse_shape), counts


def _unique_finish(result, input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    values, inverse, counts = result
    picked = (values,) + (inverse,) * bool(return_inverse) + (counts,) * bool(return_counts)
    return picked if len(picked) > 1 else values


def _no_derivative(ctx, grad):
    raise NotImplementedError(
        "the derivative for 'unique' is not implemented (torch has none either); detach() "
        "the input, or compute what needs a gradient from the inverse indices"
    )


def _no_forward_derivative(ctx, t):
    raise NotImplementedError(
        "Trying to use forward AD with unique, which does not support it (torch has no "
        "forward derivative for unique either); detach() the input first"
    )


finished(
    "nonzero",
    "input, *, as_tuple=False",
    _nonzero_finish,
    kind="other",
    kernel=_positions("nonzero"),
    shape=_nonzero_shape,
    dtype=M.to_int64,
    out=True,
    doc="nonzero(input, *, as_tuple=False) -> Tensor or tuple of Tensors: the positions of "
    "the nonzero elements, (n, input.dim()), or one index tensor per dimension.",
)
op(
    "argwhere",
    "input",
    kind="other",
    kernel=_positions("argwhere"),
    shape=lambda input: _values_needed("argwhere", input, (0, input.dim())),
    dtype=M.to_int64,
)
finished(
    "unique",
    "input, sorted=True, return_inverse=False, return_counts=False, dim=None",
    _unique_finish,
    kind="other",
    kernel=_unique,
    shape=_unique_shape,
    dtype=lambda d, params: (M.same(d, params)[0], (d, D.int64, D.int64)),
    multi=True,
    allow="bif",
    doc="unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None): "
    "the distinct elements (or slices along dim) in ascending order, then the inverse "
    "indices and counts when asked for.",
    vjp=_no_derivative,
    jvp=_no_forward_derivative,
)


# ---- diag_embed, diag ------------------------------------------------------------------------


def _diagonal_length(rows: int, cols: int, k: int) -> int:
    return max(0, min(rows, cols - k) if k >= 0 else min(rows + k, cols))


def _embed_dims(input, offset, dim1, dim2):
    """diag_embed's (offset, dim1, dim2), checked, with the dims wrapped for the result."""
    k = _as_int("diag_embed", "offset", offset)
    nd = input.dim() + 1
    d1, d2 = M.wrap_dim(dim1, nd, "diag_embed"), M.wrap_dim(dim2, nd, "diag_embed")
    if d1 == d2:
        raise RuntimeError(
            f"diag_embed(): diagonal dimensions cannot be identical {dim1}, {dim2}; name two "
            "different dimensions of the result"
        )
    return k, d1, d2


def _diag_embed_shape(input, offset=0, dim1=-2, dim2=-1):
    k, d1, d2 = _embed_dims(input, offset, dim1, dim2)
    n = input._shape[-1] + abs(k)
    rest = iter(input._shape[:-1])
    return tuple(n if i in (d1, d2) else next(rest) for i in range(input.dim() + 1))


def _diag_embed(xp, a, offset=0, dim1=-2, dim2=-1):
    k = operator.index(offset)
    nd = a.ndim + 1
    d1, d2 = M.wrap_dim(dim1, nd, "diag_embed"), M.wrap_dim(dim2, nd, "diag_embed")
    n = a.shape[-1]
    out = xp.zeros(a.shape[:-1] + (n + abs(k), n + abs(k)), a.dtype)
    i = xp.arange(n)
    out[..., i + max(-k, 0), i + max(k, 0)] = a
    # the (rows, columns) pair moves to (dim1, dim2); the batch dims keep their order
    return xp.ascontiguousarray(xp.moveaxis(out, (-2, -1), (d1, d2)))


op(
    "diag_embed",
    "input, offset=0, dim1=-2, dim2=-1",
    kind="other",
    kernel=_diag_embed,
    shape=_diag_embed_shape,
    vjp=lambda ctx, grad: (
        grad.diagonal(ctx.params["offset"], ctx.params["dim1"], ctx.params["dim2"]),
    ),
    jvp=same_op_jvp("diag_embed"),
)


def _diag_shape(input, diagonal=0):
    k = _as_int("diag", "diagonal", diagonal)
    if input.dim() == 1:
        return (input._shape[0] + abs(k),) * 2
    if input.dim() == 2:
        return (_diagonal_length(*input._shape, k),)
    raise RuntimeError(
        f"diag(): Supports 1D or 2D tensors. Got {input.dim()}D (diag_embed builds batches of "
        "diagonal matrices, diagonal reads batches of diagonals)"
    )


def _diag(xp, a, diagonal=0):
    if a.ndim == 1:
        return _diag_embed(xp, a, diagonal, 0, 1)
    return xp.diagonal(a, operator.index(diagonal)).copy()  # xp.diagonal is a (read-only) view


def _diag_vjp(ctx, grad):
    x, k = ctx.inputs[0], ctx.params["diagonal"]
    if x.dim() == 1:
        return (grad.diagonal(k),)
    # the gradient of a matrix's diagonal goes back to the positions it was read from
    read = arange(x.numel(), device=grad.device).reshape(x.shape).diagonal(k).reshape(-1)
    flat = zeros(x.numel(), dtype=grad.dtype, device=grad.device)
    return (flat.scatter(0, read, grad.reshape(-1)).reshape(x.shape),)


op(
    "diag",
    "input, diagonal=0",
    kind="other",
    kernel=_diag,
    shape=_diag_shape,
    out=True,
    vjp=_diag_vjp,
    jvp=same_op_jvp("diag"),
)


# ---- repeat_interleave -----------------------------------------------------------------------


def _check_counts(counts, what="repeats") -> None:
    if counts.dtype.name not in ("int32", "int64"):
        raise NotImplementedError(
            f"repeat_interleave(): {what} must be an int32 or int64 tensor, got {counts.dtype} "
            f"(as in torch); convert it with {what}.long()"
        )


def _interleave_shape(input, repeats=None, dim=None, *, output_size=None):
    name = "repeat_interleave"
    if output_size is not None:
        output_size = _as_int(name, "output_size", output_size)
    if repeats is None:  # repeat_interleave(counts): the indices 0, 1, ... repeated
        _check_counts(input, "the repeats tensor")
        if input.dim() != 1:
            raise RuntimeError(
                f"{name}(): repeat_interleave only accept 1D vector as repeat, got a "
                f"{input.dim()}-d tensor"
            )
        return (output_size,) if output_size is not None else _values_needed(name, input, (0,))
    if dim is None:
        n, shape, d = input.numel(), (), 0
    elif input.dim() == 0:
        raise _no_dims(name, dim)
    else:
        d = M.wrap_dim(dim, input.dim(), name)
        n, shape = input._shape[d], input._shape
    if isinstance(repeats, Tensor):
        _check_counts(repeats)
        if repeats.dim() > 1:
            raise RuntimeError(f"{name}(): repeats must be 0-dim or 1-dim tensor")
        if repeats.numel() not in (1, n):
            raise RuntimeError(
                f"{name}(): repeats must have the same size as input along dim, but got "
                f"repeats.size(0) = {repeats.numel()} and input.size({d}) = {n}"
            )
        length = output_size
    else:
        r = _as_int(name, "repeats", repeats)
        if r < 0:
            raise RuntimeError(f"{name}(): Repeats must be non-negative, got {r}")
        length = r * n
        if output_size is not None and output_size != length:
            raise RuntimeError(
                f"{name}(): Invalid output_size, expected {length} but got {output_size}"
            )
    if length is None:
        return _values_needed(name, repeats, shape[:d] + (0,) + shape[d + 1 :])
    return shape[:d] + (length,) + shape[d + 1 :] if shape else (length,)


def _interleave(xp, a, repeats=None, dim=None, *, output_size=None):
    if repeats is None:
        a, repeats, d = xp.arange(a.shape[0], dtype=a.dtype), a, 0
    elif dim is None:
        a, d = a.reshape(-1), 0
    else:
        d = M.wrap_dim(dim, a.ndim, "repeat_interleave")
    if not hasattr(repeats, "shape"):
        return xp.repeat(a, operator.index(repeats), axis=d)
    counts = xp.broadcast_to(xp.asarray(repeats).reshape(-1), (a.shape[d],))
    if xp is np or output_size is None:
        if xp is not np:
            host_sync("repeat_interleave() (its shape depends on the repeats)")
        host = on_host(counts)
        if bool((host < 0).any()):
            raise RuntimeError("repeats can not be negative")
        total = int(host.sum())
        if output_size is not None and output_size != total:
            raise RuntimeError(f"output_size={output_size} but the repeats sum to {total}")
    else:
        # NOTE: output_size on CUDA spares the synchronisation, unchecked, as in torch
        total = operator.index(output_size)
    # the element each output position reads: where its position falls in the running sums
    idx = xp.searchsorted(xp.cumsum(counts), xp.arange(total), side="right")
    return xp.take(a, idx, axis=d)


def _interleave_vjp(ctx, grad):
    x, repeats = ctx.inputs
    dim = ctx.params["dim"]
    flat = dim is None
    d = 0 if flat else M.wrap_dim(dim, x.dim(), "repeat_interleave")
    n = x.numel() if flat else x.shape[d]
    # each input element's copies send their gradients back to it
    idx = OPS["repeat_interleave"].fn(
        arange(n, device=grad.device), repeats, output_size=ctx.params["output_size"]
    )
    g = grad.reshape(-1) if flat else grad
    summed = zeros_like(x, dtype=grad.dtype).reshape(-1 if flat else x.shape)
    return (summed.index_add(d, idx, g).reshape(x.shape), None)


op(
    "repeat_interleave",
    "input, repeats=None, dim=None, *, output_size=None",
    kind="other",
    n_inputs=2,
    cast=(0,),
    kernel=_interleave,
    shape=_interleave_shape,
    promote="first",
    doc="repeat_interleave(input, repeats, dim=None, *, output_size=None): each element "
    "(or slice along dim) repeated; repeats is an int or a tensor of counts, one per element "
    "or one for all. Tensor repeats are read on the host (the result's size depends on "
    "them) unless output_size is given on CUDA. repeat_interleave(counts) gives "
    "0, 1, 2, ... each repeated counts[i] times.",
    vjp=_interleave_vjp,
    jvp=same_op_jvp("repeat_interleave"),
)


# ---- masked_select: a shape that depends on the mask ------------------------------------------


def _masked_select_shape(input, mask):
    if not isinstance(mask, Tensor):
        raise TypeError(
            f"masked_select(): argument 'mask' must be Tensor, not {type(mask).__name__}"
        )
    if mask.dtype is not D.bool:
        raise RuntimeError(
            f"masked_select(): expected BoolTensor for mask, got {mask.dtype}; compare to get "
            "one (mask != 0)"
        )
    shape = M.broadcast_shapes(input._shape, mask._shape, op="masked_select")
    if 0 in shape:  # nothing to select, whatever the mask holds
        return (0,)
    return _values_needed("masked_select", mask, (0,))


def _masked_select(xp, a, m):
    # the mask is read on the host: the result has one element per True
    if xp is not np:
        host_sync("masked_select() (its shape depends on the mask)")
    shape = np.broadcast_shapes(a.shape, m.shape)
    return xp.broadcast_to(a, shape)[xp.broadcast_to(m, shape)]


def _masked_select_vjp(ctx, grad):
    x, mask = ctx.inputs
    shape = M.broadcast_shapes(x._shape, mask._shape)
    # each selected element's gradient goes back where it was read (then summed over the
    # dimensions x was broadcast along, by autograd)
    g = zeros(shape, dtype=grad.dtype, device=grad.device)
    g[mask.expand(*shape)] = grad
    return g, None


op(
    "masked_select",
    "input, mask",
    kind="other",
    n_inputs=2,
    cast=(0,),
    kernel=_masked_select,
    shape=_masked_select_shape,
    promote="first",
    out=True,
    doc="masked_select(input, mask) -> 1-d Tensor: the elements of input where the bool mask "
    "(broadcast with it) is True, in order. The mask is read on the host (on CUDA a "
    "synchronisation): the result's size depends on it.",
    vjp=_masked_select_vjp,
    jvp=same_op_jvp("masked_select"),
)
