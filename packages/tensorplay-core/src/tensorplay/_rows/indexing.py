"""Indexing rows along a dim: ``gather``, ``scatter``, ``index_select``, ``masked_fill``,
``index_add``, ``index_copy``, ``scatter_reduce``.

Index tensors are checked as torch checks them (dtype, rank, bounds; no wrapping of negative
indices); a 0-d input, index or src counts as 1-d of size 1, as in torch.
"""

from __future__ import annotations

import numpy as np

from tensorplay import _cuda_index, _dtype as D, _meta as M
from tensorplay._device_checks import checked_index, to_host
from tensorplay._dispatch import OPS, OpDef, call
from tensorplay._factories import ones, zeros
from tensorplay._native import NATIVE
from tensorplay._rows import row_maker
from tensorplay._rows.pointwise import times_scalar
from tensorplay._tensor import Tensor
from tensorplay.autograd._derivatives import (
    cat,
    conj,
    ones_like,
    same_op_jvp,
    times,
    where,
    zeros_like,
)
from tensorplay.autograd.grad_mode import is_grad_enabled

ROWS: list[OpDef] = []
op = row_maker(ROWS)


def _check_index(name, index, arg="index"):
    if index.dtype.name not in ("int64", "int32"):
        raise RuntimeError(
            f"{name}(): Expected dtype int32 or int64 for {arg}, got {index.dtype}; "
            f"convert it with {arg}.long()"
        )


def _as_1d(shape) -> tuple:
    """torch's gather/scatter read a 0-d tensor as 1-d of size 1 (``ensure_nonempty``)."""
    return tuple(shape) or (1,)


def _bounds(xp, idx, n, name, d):
    """``idx``, checked against ``[0, n)``: on the host here; on a GPU by a kernel that
    reports a bad index at the next synchronisation (``_device_checks``) and returns the
    index with bad entries made 0, so the op never reads out of bounds meanwhile."""
    # NOTE: no wrapping of negative indices: torch's gather/scatter/index_select refuse them
    if xp is not np:
        return checked_index(idx, n, name, d)
    bad = (idx < 0) | (idx >= n)
    if bool(bad.any()):
        first = int(idx[bad].reshape(-1)[0])
        raise RuntimeError(
            f"{name}(): index {first} is out of bounds for dimension {d} with size {n}"
            + (" (negative indices are not wrapped here)" if first < 0 and -n <= first else "")
        )
    return idx


def on_host(x):
    """A CuPy array's values on the host (a synchronisation); anything else as it is."""
    return to_host(x) if hasattr(x, "get") and not isinstance(x, np.ndarray) else x


# dtypes whose CuPy add.at accumulates on the device with atomics (cupyx.scatter_add):
# int32, uint32, int64, uint64, float16, float32, float64
_DEVICE_ADD_AT = frozenset("iIlLqQefd")


def add_at(xp, target, where, vals) -> None:
    """``target[where] += vals`` with repeated positions accumulating (``np.add.at``): on a
    GPU with atomics where CuPy has them; other dtypes (bool, 8/16-bit integers, complex)
    accumulate on the host, a synchronisation."""
    if xp is np:
        np.add.at(target, where, vals)
    elif target.dtype.char in _DEVICE_ADD_AT:
        xp.add.at(target, where, vals)
    else:
        host = to_host(target)
        np.add.at(host, tuple(on_host(w) for w in where), on_host(vals))
        target[...] = xp.asarray(host)


def _index_rank(name, index, input, what):
    if len(_as_1d(index._shape)) != len(_as_1d(input._shape)):
        raise RuntimeError(
            f"{name}(): Index tensor must have the same number of dimensions as {what} tensor "
            f"(got {index.dim()} and {input.dim()})"
        )


def _gather_shape(input, dim, index):
    _check_index("gather", index)
    d = M.wrap_dim(dim, input.dim(), "gather")
    if index.numel() == 0:  # torch checks no shape for an empty index
        return index._shape
    _index_rank("gather", index, input, "input")
    for i, (m, n) in enumerate(zip(_as_1d(index._shape), _as_1d(input._shape))):
        if i != d and m > n:
            raise RuntimeError(
                f"gather(): Size does not match at dimension {i} expected index "
                f"{list(index._shape)} to be smaller than self "
                f"{list(input._shape)} apart from dimension {d}"
            )
    return index._shape


def _gather(xp, a, dim, idx):
    d = M.wrap_dim(dim, a.ndim, "gather")
    if idx.size == 0:
        return xp.empty(idx.shape, a.dtype)
    # reshaped only when 0-d: a reshape costs microseconds of host time on CuPy
    a1 = a if a.ndim else a.reshape(1)
    i1 = idx if idx.ndim else idx.reshape(1)
    if xp is not np:
        r = _cuda_index.gather(a1, d, i1)
        if r is not None:
            return r if idx.ndim else r.reshape(())
    i1 = _bounds(xp, i1, a1.shape[d], "gather", d)
    src = a1[tuple(slice(0, n) if i != d else slice(None) for i, n in enumerate(i1.shape))]
    return xp.take_along_axis(src, i1, axis=d).reshape(idx.shape)


op(
    "gather",
    "input, dim, index",
    n_inputs=3,
    cast=(0,),
    kernel=_gather,
    shape=_gather_shape,
    promote="first",
    out=True,
    # every gathered element sends its gradient back where it came from (added: an index
    # may repeat)
    vjp=lambda ctx, grad: (
        zeros_like(ctx.inputs[0], dtype=grad.dtype).scatter(
            ctx.inputs[1], ctx.inputs[2], grad, reduce="add"
        ),
        None,
        None,
    ),
    jvp=same_op_jvp("gather"),
)


def _scattered_shape(name, input, dim, index, src):
    """The shape of ``name`` (scatter, scatter_reduce) writing ``src`` at ``index`` along
    ``dim`` of ``input``: input's, once the index fits input and src (torch's checks)."""
    _check_index(name, index)
    d = M.wrap_dim(dim, input.dim(), name)
    if index.numel() == 0:  # nothing is written; torch checks no shape
        return input._shape
    _index_rank(name, index, input, "self")
    at = _as_1d(index._shape)
    wrong = any(i != d and m > n for i, (m, n) in enumerate(zip(at, _as_1d(input._shape))))
    src_shape = getattr(src, "_shape", None)
    if src_shape is not None and not wrong:
        if len(_as_1d(src_shape)) < len(at):
            raise IndexError(
                f"{name}(): src of shape {list(src_shape)} has fewer dimensions than "
                f"index {list(index._shape)}"
            )
        wrong = any(m > n for m, n in zip(at, _as_1d(src_shape)))
    if wrong:
        raise RuntimeError(
            f"{name}(): Expected index {list(index._shape)} to be no larger than self "
            f"{list(input._shape)} apart from dimension {d}"
            + (f" and to be no larger size than src {list(src_shape)}" if src_shape else "")
        )
    return input._shape


def _scatter_shape(input, dim, index, src=None, *, value=None, reduce=None):
    if src is None and value is None:
        raise TypeError("scatter(): provide src (a Tensor) or value (a number)")
    return _scattered_shape("scatter", input, dim, index, src)


def _grid(xp, idx, d):
    """The positions ``idx`` writes along ``d``: ``idx`` there, and an open grid (CuPy's
    indices() has no sparse=) along the other axes, where index i varies along axis i only."""
    grid = [
        xp.arange(n).reshape((-1,) + (1,) * (idx.ndim - 1 - i)) for i, n in enumerate(idx.shape)
    ]
    grid[d] = idx
    return tuple(grid)


def _ufunc_at(xp, ufunc: str, target, where, vals) -> None:
    """``target[where] = ufunc(target[where], vals)`` with repeated positions applied in turn
    (numpy's ``ufunc.at``). CuPy has add.at only (``add_at``): the others run on the host,
    a synchronisation."""
    if ufunc == "add":
        add_at(xp, target, where, vals)
    elif xp is np:
        getattr(np, ufunc).at(target, where, vals)
    else:
        host = to_host(target)
        getattr(np, ufunc).at(host, tuple(on_host(w) for w in where), on_host(vals))
        target[...] = xp.asarray(host)


def _scatter(xp, a, dim, idx, src=None, *, value=None, reduce=None):
    d = M.wrap_dim(dim, a.ndim, "scatter")
    if reduce not in (None, "add", "multiply"):
        raise ValueError(f"reduce argument must be either add or multiply, got {reduce!r}")
    out = a.copy()
    if idx.size == 0:
        return out
    # a 0-d input, index or src is 1-d of size 1 (torch); ``flat`` is a view of ``out``
    flat, idx = out.reshape(_as_1d(a.shape)), idx.reshape(_as_1d(idx.shape))
    if xp is not np and reduce != "multiply" and src is not None:
        if _cuda_index.scatter(flat, d, idx, src.reshape(_as_1d(src.shape)), reduce == "add"):
            return out
    idx = _bounds(xp, idx, flat.shape[d], "scatter", d)
    if xp is np and reduce == "add" and _native_add(flat, d, idx, src):
        return out
    grid = _grid(xp, idx, d)
    vals = value if src is None else src.reshape(_as_1d(src.shape))[tuple(map(slice, idx.shape))]
    if reduce is None:
        flat[grid] = vals
    else:  # torch deprecates reduce="multiply" for scatter_reduce
        _ufunc_at(xp, "add" if reduce == "add" else "multiply", flat, grid, vals)
    return out


_NATIVE_ADD = frozenset("fdil")


def _native_add(flat, d, idx, src) -> bool:
    """``scatter(d, reduce="add")`` in place through ``tensorplay._C.scatter_add`` (numpy's
    add.at costs ~20 ns an element more): for contiguous arrays where the index and src
    have the shape of ``flat`` apart from ``d``; False (nothing done) otherwise."""
    if NATIVE is None or src is None or flat.dtype.char not in _NATIVE_ADD:
        return False
    src = src.reshape(_as_1d(src.shape))
    split = M.split_along(flat.shape, idx.shape, d)
    if src.dtype != flat.dtype or src.shape != idx.shape or split is None:
        return False
    if not (flat.flags.c_contiguous and flat.flags.writeable):
        return False
    outer, k, inner = split
    NATIVE.scatter_add(
        flat, np.ascontiguousarray(idx, np.int64), np.ascontiguousarray(src), outer, k, inner
    )
    return True


def _scatter_reduce_check(ctx):
    if ctx.params["reduce"] == "multiply":
        raise NotImplementedError(
            "the derivative of scatter(reduce='multiply') is not implemented (torch has none)"
        )


def _pad_to(g, shape):
    """``g`` in the leading corner of zeros of ``shape`` (scatter reads only that corner of
    src; a 0-d src is read as 1-d)."""
    if g.dim() != len(shape):
        g = g.reshape(_as_1d(g.shape) if shape else ())
    for d, (m, n) in enumerate(zip(g.shape, shape)):
        if m != n:
            pad = list(g.shape)
            pad[d] = n - m
            g = cat([g, zeros(pad, dtype=g.dtype, device=g.device)], d)
    return g


def _scatter_vjp(ctx, grad):
    _scatter_reduce_check(ctx)
    x, dim, index, src = ctx.inputs
    # plain scatter overwrites: the overwritten elements of x get no gradient
    gx = grad if ctx.params["reduce"] == "add" else grad.scatter(dim, index, value=0)
    gsrc = _pad_to(grad.gather(dim, index), tuple(src.shape)) if ctx.needs_input_grad[3] else None
    return gx, None, None, gsrc


def _scatter_jvp(ctx, tx, _dim, _index, tsrc):
    _scatter_reduce_check(ctx)
    x, dim, index, src = ctx.inputs
    if tx is None and tsrc is None:
        return None
    tx = zeros_like(x) if tx is None else tx
    if src is None:
        return tx.scatter(dim, index, value=0)
    tsrc = zeros_like(src) if tsrc is None else tsrc
    return tx.scatter(dim, index, tsrc, reduce=ctx.params["reduce"])


op(
    "scatter",
    "input, dim, index, src=None, *, value=None, reduce=None",
    n_inputs=4,
    cast=(0, 3),
    kernel=_scatter,
    shape=_scatter_shape,
    promote="first",
    inplace=True,
    vjp=_scatter_vjp,
    jvp=_scatter_jvp,
)


def _index_select_shape(input, dim, index):
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    _check_index("index_select", index)
    d = M.wrap_dim(dim, input.dim(), "index_select")
    n = index.numel()
    if not input._shape:
        if n != 1:
            raise RuntimeError(
                f"index_select(): Index to scalar can have only 1 value, got {n} value(s)"
            )
        return ()
    return input._shape[:d] + (n,) + input._shape[d + 1 :]


def _index_select(xp, a, dim, idx):
    d = M.wrap_dim(dim, a.ndim, "index_select")
    if xp is not np:
        r = _cuda_index.index_select(a, d, idx)
        if r is not None:
            return r
    idx = _bounds(xp, idx, a.shape[d] if a.ndim else 1, "index_select", d)
    if a.ndim == 0:
        return a.copy()
    return xp.take(a, idx.reshape(-1), axis=d)


op(
    "index_select",
    "input, dim, index",
    n_inputs=3,
    cast=(0,),
    kernel=_index_select,
    shape=_index_select_shape,
    promote="first",
    out=True,
    vjp=lambda ctx, grad: (_index_select_vjp(*ctx.inputs, grad), None, None),
    jvp=same_op_jvp("index_select"),
)


def _index_select_vjp(x, dim, index, grad):
    # added back along dim at the selected positions (an index may repeat)
    if x.dim() == 0:
        return grad
    d = M.wrap_dim(dim, x.dim(), "index_select")
    along = [1] * x.dim()
    along[d] = -1
    index = index.long().reshape(along).expand(*grad.shape)
    return zeros_like(x, dtype=grad.dtype).scatter(d, index, grad, reduce="add")


def _masked_fill_shape(input, mask, value):
    if mask.dtype is not D.bool:
        raise RuntimeError(f"masked_fill(): expected mask dtype to be Bool but got {mask.dtype}")
    if hasattr(value, "_shape") and value.dim() != 0:
        raise RuntimeError(
            f"masked_fill(): only supports a 0-dimensional value tensor, but got "
            f"tensor with {value.dim()} dimension(s)."
        )
    shape = M.broadcast_shapes(input._shape, mask._shape, op="masked_fill")
    if shape != input._shape:
        raise RuntimeError(
            f"masked_fill(): mask of shape {list(mask._shape)} cannot broadcast to "
            f"input of shape {list(input._shape)}"
        )
    return shape


op(
    "masked_fill",
    "input, mask, value",
    n_inputs=3,
    cast=(0, 2),
    promote="first",
    kernel=lambda xp, a, m, v: xp.where(m, v, a),
    scalar_check="ihfc",
    shape=_masked_fill_shape,
    inplace=True,
    vjp=lambda ctx, grad: (
        grad.masked_fill(ctx.inputs[1], 0) if ctx.needs_input_grad[0] else None,
        None,
        where(ctx.inputs[1], grad, 0.0) if ctx.needs_input_grad[2] else None,
    ),
    jvp=lambda ctx, tx, tmask, tv: (
        None
        if tx is None and tv is None
        else where(ctx.inputs[1], 0.0 if tv is None else tv, 0.0 if tx is None else tx)
    ),
)


# ---- index_add, index_copy: slices written at the positions an index vector names -------------


def _index_args(name, input, dim, index, source) -> None:
    """torch's checks of index_add/index_copy, with torch's error kinds (which differ between
    the two): an index vector, a source of input's dtype holding one slice (input's shape
    without ``dim``) per index. index_copy also takes a 0-d source or input as one slice."""
    copy = name == "index_copy"
    for arg, t in (("index", index), ("source", source)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}(): argument '{arg}' must be Tensor, not {type(t).__name__}")
    d = M.wrap_dim(dim, input.dim(), name)
    if index.dim() > 1:
        raise IndexError(
            f"{name}(): Index is supposed to be a vector (of dimension 1 or 0), but got dim: "
            f"{index.dim()} (size {list(index._shape)})"
        )
    if copy and index.dtype is not D.int64:
        raise RuntimeError(
            f"{name}(): Expected a long tensor for index, but got {index.dtype}; convert it "
            "with index.long()"
        )
    _check_index(name, index)
    if source.dtype is not input.dtype:
        raise RuntimeError(
            f"{name}(): self ({input.dtype.name}) and source ({source.dtype.name}) must have "
            f"the same scalar type; convert source with .to({input.dtype})"
        )
    n, scalars = index.numel(), copy and (source.dim() == 0 or input.dim() == 0)
    if copy and source.dim() == 0 and n != 1:
        raise IndexError(
            f"{name}(): When source is scalar, index should have one element (got {n})"
        )
    if copy and not scalars and source.dim() != input.dim():
        raise IndexError(
            f"{name}(): When source and destination are not scalars, their dimensionality must "
            f"match. Source dimensionality ({source.dim()}), destination dimensionality "
            f"({input.dim()})"
        )
    if not (copy and source.dim() == 0):
        slices = source._shape[d] if source._shape else 1
        if n != slices:
            # torch's kinds: index_copy's check is an IndexError, index_add's a RuntimeError
            # (an IndexError for a 0-d source, whose size(dim) torch's message asks for)
            raise (IndexError if copy or not source._shape else RuntimeError)(
                f"{name}(): Number of indices ({n}) should be equal to source.size(dim): "
                f"({slices}), for dim: {d}"
            )
    src, dst = list(source._shape), list(input._shape)
    ranks_differ = len(src) != len(dst) and not scalars
    if ranks_differ or src[:d] + src[d + 1 :] != dst[:d] + dst[d + 1 :]:
        raise RuntimeError(
            f"{name}(): source tensor shape must match self tensor shape, excluding the "
            f"specified dimension. Got self.shape = {dst} source.shape = {src}"
        )


def _index_add_shape(input, dim, index, source, *, alpha=1):
    _index_args("index_add", input, dim, index, source)
    return input._shape


def _index_add_dtype(d, params):
    compute, out = M.same(d, params)
    # torch converts alpha with an overflow check (an integer input truncates alpha=2.5 to 2)
    D.check_fits("index_add", params.get("alpha", 1), compute)
    return compute, out


def _along(xp, a, dim, idx, source, name):
    """(a copy of ``a`` viewed as at least 1-d, the positions ``idx`` names along ``dim``
    (checked), ``source`` at least 1-d): a 0-d input, index or source counts as 1-d."""
    out = a.copy()
    flat = out.reshape(_as_1d(a.shape))
    d = M.wrap_dim(dim, flat.ndim, name)
    idx = _bounds(xp, idx.reshape(-1), flat.shape[d], name, d)
    return out, flat, (slice(None),) * d + (idx,), source.reshape(_as_1d(source.shape))


def _index_add(xp, a, dim, idx, source, *, alpha=1):
    out, flat, where, src = _along(xp, a, dim, idx, source, "index_add")
    if alpha != 1:
        src = times_scalar(src, alpha)
    add_at(xp, flat, where, src)
    return out


def _index_copy(xp, a, dim, idx, source):
    out, flat, where, src = _along(xp, a, dim, idx, source, "index_copy")
    flat[where] = src  # a repeated index keeps one of its slices (which one: unspecified)
    return out


def _linear_in_input_and_source(name):
    """The jvp of index_add/index_copy, linear in (input, source) together."""

    def jvp(ctx, tx, _dim, _index, tsrc):
        if tx is None and tsrc is None:
            return None
        x, dim, index, source = ctx.inputs
        tx = zeros_like(x) if tx is None else tx
        tsrc = zeros_like(source) if tsrc is None else tsrc
        return call(OPS[name], (tx, dim, index, tsrc), ctx.params)

    return jvp


def _index_add_vjp(ctx, grad):
    _, dim, index, _ = ctx.inputs
    alpha = ctx.params["alpha"]
    gsrc = None
    if ctx.needs_input_grad[3]:
        gsrc = grad.index_select(dim, index)
        gsrc = gsrc if alpha == 1 else gsrc * conj(alpha)
    return grad, None, None, gsrc


def _index_copy_vjp(ctx, grad):
    _, dim, index, source = ctx.inputs
    # the copied-over slices of input got no gradient through it
    gx = (
        grad.index_copy(dim, index, zeros_like(source, dtype=grad.dtype))
        if ctx.needs_input_grad[0]
        else None
    )
    gsrc = grad.index_select(dim, index) if ctx.needs_input_grad[3] else None
    return gx, None, None, gsrc


op(
    "index_add",
    "input, dim, index, source, *, alpha=1",
    kind="other",
    n_inputs=4,
    cast=(0, 3),
    kernel=_index_add,
    shape=_index_add_shape,
    dtype=_index_add_dtype,
    promote="first",
    out=True,
    inplace=True,
    doc="index_add(input, dim, index, source, *, alpha=1): input with alpha * source[i] added "
    "to the slice index[i] along dim (a repeated index adds up).",
    vjp=_index_add_vjp,
    jvp=_linear_in_input_and_source("index_add"),
)
op(
    "index_copy",
    "input, dim, index, source",
    kind="other",
    n_inputs=4,
    cast=(0, 3),
    kernel=_index_copy,
    shape=lambda input, dim, index, source: (
        _index_args("index_copy", input, dim, index, source) or input._shape
    ),
    promote="first",
    out=True,
    inplace=True,
    doc="index_copy(input, dim, index, source): input with source[i] copied into the slice "
    "index[i] along dim.",
    vjp=_index_copy_vjp,
    jvp=_linear_in_input_and_source("index_copy"),
)


# ---- scatter_reduce ----------------------------------------------------------------------------

_SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce_shape(input, dim, index, src, reduce, *, include_self=True):
    name = "scatter_reduce"
    if not isinstance(src, Tensor):
        raise TypeError(f"{name}(): argument 'src' must be Tensor, not {type(src).__name__}")
    if reduce not in _SCATTER_REDUCTIONS:
        raise RuntimeError(
            f"{name}(): reduce argument must be either sum, prod, mean, amax or amin, got "
            f"{reduce!r}"
        )
    if not isinstance(include_self, bool):
        raise TypeError(
            f"{name}(): argument 'include_self' must be bool, not {type(include_self).__name__}"
        )
    if src.dtype is not input.dtype:
        raise RuntimeError(
            f"{name}(): Expected self.dtype to be equal to src.dtype (got {input.dtype.name} "
            f"and {src.dtype.name}); convert src with .to({input.dtype})"
        )
    if (reduce == "mean" and input.dtype is D.bool) or (
        reduce[1:] in ("max", "min") and input.dtype.is_complex
    ):
        raise NotImplementedError(
            f"{name}(): reduce={reduce!r} is not supported for {input.dtype} tensors (as in torch)"
        )
    return _scattered_shape(name, input, dim, index, src)


def _identity(dtype, reduce):
    """The value that leaves ``reduce`` unchanged: what include_self=False puts first."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big = reduce == "amin"
    if dtype.kind == "b":
        return big
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if big else info.min
    return np.inf if big else -np.inf


def _scatter_reduce(xp, a, dim, idx, src, reduce, *, include_self=True):
    out = a.copy()
    if idx.size == 0:
        return out
    flat, idx = out.reshape(_as_1d(a.shape)), idx.reshape(_as_1d(idx.shape))
    d = M.wrap_dim(dim, flat.ndim, "scatter_reduce")
    grid = _grid(xp, _bounds(xp, idx, flat.shape[d], "scatter_reduce", d), d)
    vals = src.reshape(_as_1d(src.shape))[tuple(map(slice, idx.shape))]
    if not include_self:
        flat[grid] = _identity(flat.dtype, reduce)
    ufunc = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum"}
    _ufunc_at(xp, ufunc.get(reduce, "minimum"), flat, grid, vals)
    if reduce == "mean":
        count_dtype = flat.dtype if flat.dtype.kind in "fc" else np.int64
        count = xp.full(flat.shape, int(include_self), count_dtype)
        add_at(xp, count, grid, xp.ones(idx.shape, count_dtype))
        count = xp.maximum(count, 1)  # untouched, include_self=False: the input as it was
        # torch rounds an integer mean down
        flat[...] = flat // count if flat.dtype.kind in "iu" else flat / count
    return out


def _corner(t, shape):
    """The part of ``t`` that a scatter of an index of ``shape`` reads: its leading corner."""
    return t[tuple(slice(0, n) for n in shape)] if t.dim() else t


def _scatter_reduce_partials(ctx):
    """(d out / d input, d out / d src at each index position), elementwise: how each element
    enters the reduction of its slot (torch's scatter_reduce_backward, case by case)."""
    x, dim, index, src = ctx.inputs
    reduce, include_self = ctx.params["reduce"], ctx.params["include_self"]
    read = _corner(src, index.shape)
    one = ones(index.shape, dtype=x.dtype, device=x.device)
    written = zeros_like(x, dtype=D.bool).scatter(dim, index, value=True)
    own = ones_like(written) if include_self else ~written  # where the input takes part
    if reduce == "sum":
        return own, one
    if reduce == "mean":
        count = own.to(x.dtype).scatter(dim, index, one, reduce="add")
        share = 1 / where(count == 0, 1, count)
        return share.masked_fill(~own, 0), share.gather(dim, index)
    out = ctx.out
    if reduce in ("amax", "amin"):
        # ties share the gradient evenly, as amax's does
        at_x = own & (x == out)
        at_src = read == out.gather(dim, index)
        ties = at_x.to(x.dtype).scatter(dim, index, at_src.to(x.dtype), reduce="add")
        return at_x / ties, at_src / ties.gather(dim, index)
    # prod: the product of the others, computed without dividing by a zero
    nonzero_x = x.masked_fill(x == 0, 1)
    others_x = nonzero_x.scatter_reduce(dim, index, src, "prod", include_self=include_self)
    zero = read == 0
    zeros_in_slot = zeros_like(x).scatter(dim, index, zero.to(x.dtype), reduce="add")
    lone_zero = zero & (zeros_in_slot.gather(dim, index) == 1)
    others_src = x.scatter_reduce(
        dim, index, read.masked_fill(lone_zero, 1), "prod", include_self=include_self
    ).gather(dim, index)
    d_src = where(lone_zero, others_src, out.gather(dim, index) / read.masked_fill(zero, 1))
    return where(own, others_x / nonzero_x, 0), d_src


def _scatter_reduce_vjp(ctx, grad):
    x, dim, index, src = ctx.inputs
    if ctx.params["reduce"] == "prod" and is_grad_enabled() and ctx.needs_input_grad[3]:
        zero = (_corner(src, index.shape) == 0).to(D.int64)
        in_slot = zeros_like(x, dtype=D.int64).scatter(dim, index, zero, reduce="add")
        if bool((in_slot > 1).any()):
            # the partials above are right then, their own derivatives are not
            raise NotImplementedError(
                "scatter_reduce(): double backward is not supported for src when more than one "
                "zero of src is reduced into the same position with reduce='prod' (as in torch)"
            )
    d_x, d_src = _scatter_reduce_partials(ctx)
    gx = times(grad, conj(d_x)) if ctx.needs_input_grad[0] else None
    gsrc = None
    if ctx.needs_input_grad[3]:
        gsrc = _pad_to(times(grad.gather(dim, index), conj(d_src)), tuple(src.shape))
    return gx, None, None, gsrc


def _scatter_reduce_jvp(ctx, tx, _dim, _index, tsrc):
    if tx is None and tsrc is None:
        return None
    x, dim, index, _ = ctx.inputs
    d_x, d_src = _scatter_reduce_partials(ctx)
    base = zeros_like(x) if tx is None else times(tx, d_x)
    if tsrc is None:
        return base
    return base.scatter(dim, index, times(_corner(tsrc, index.shape), d_src), reduce="add")


op(
    "scatter_reduce",
    "input, dim, index, src, reduce, *, include_self=True",
    kind="other",
    n_inputs=4,
    cast=(0, 3),
    kernel=_scatter_reduce,
    shape=_scatter_reduce_shape,
    promote="first",
    out=True,
    inplace=True,
    doc="scatter_reduce(input, dim, index, src, reduce, *, include_self=True): each src "
    "element reduced (sum, prod, mean, amax or amin) into the slot its index names along dim; "
    "include_self=False leaves the input's value out of the slots that are written.",
    vjp=_scatter_reduce_vjp,
    jvp=_scatter_reduce_jvp,
)
