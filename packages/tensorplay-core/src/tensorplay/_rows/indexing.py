"""Indexing rows along a dim: ``gather``, ``scatter``, ``index_select``, ``masked_fill``.

Index tensors are checked as torch checks them (dtype, rank, bounds; no wrapping of negative
indices); a 0-d input, index or src counts as 1-d of size 1, as in torch.
"""

from __future__ import annotations

import numpy as np

from tensorplay import _cuda_index, _dtype as D, _meta as M
from tensorplay._device_checks import checked_index, to_host
from tensorplay._dispatch import OpDef
from tensorplay._factories import zeros
from tensorplay._native import NATIVE
from tensorplay._rows import row_maker
from tensorplay.autograd._derivatives import cat, needs, same_op_jvp, where, zeros_like

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


def _scatter_shape(input, dim, index, src=None, *, value=None, reduce=None):
    _check_index("scatter", index)
    d = M.wrap_dim(dim, input.dim(), "scatter")
    if src is None and value is None:
        raise TypeError("scatter(): provide src (a Tensor) or value (a number)")
    if index.numel() == 0:  # nothing is written; torch checks no shape
        return input._shape
    _index_rank("scatter", index, input, "self")
    at = _as_1d(index._shape)
    wrong = any(i != d and m > n for i, (m, n) in enumerate(zip(at, _as_1d(input._shape))))
    src_shape = getattr(src, "_shape", None)
    if src_shape is not None and not wrong:
        if len(_as_1d(src_shape)) < len(at):
            raise IndexError(
                f"scatter(): src of shape {list(src_shape)} has fewer dimensions than "
                f"index {list(index._shape)}"
            )
        wrong = any(m > n for m, n in zip(at, _as_1d(src_shape)))
    if wrong:
        raise RuntimeError(
            f"scatter(): Expected index {list(index._shape)} to be no larger than self "
            f"{list(input._shape)} apart from dimension {d}"
            + (f" and to be no larger size than src {list(src_shape)}" if src_shape else "")
        )
    return input._shape


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
    # an open grid (CuPy's indices() has no sparse=): index i varies along axis i only
    grid = [
        xp.arange(n).reshape((-1,) + (1,) * (idx.ndim - 1 - i)) for i, n in enumerate(idx.shape)
    ]
    grid[d] = idx
    vals = value if src is None else src.reshape(_as_1d(src.shape))[tuple(map(slice, idx.shape))]
    if reduce is None:
        flat[tuple(grid)] = vals
        return out
    if reduce == "add":
        add_at(xp, flat, tuple(grid), vals)
        return out
    if xp is np:
        np.multiply.at(flat, tuple(grid), vals)
        return out
    # CuPy has no multiply.at: accumulate on the host (a synchronisation; torch deprecates
    # reduce="multiply" for scatter_reduce)
    host = to_host(flat)
    np.multiply.at(host, tuple(on_host(g) for g in grid), on_host(vals))
    flat[...] = xp.asarray(host)
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
    gsrc = _pad_to(grad.gather(dim, index), tuple(src.shape)) if needs(ctx)[3] else None
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
        grad.masked_fill(ctx.inputs[1], 0) if needs(ctx)[0] else None,
        None,
        where(ctx.inputs[1], grad, 0.0) if needs(ctx)[2] else None,
    ),
    jvp=lambda ctx, tx, tmask, tv: (
        None
        if tx is None and tv is None
        else where(ctx.inputs[1], 0.0 if tv is None else tv, 0.0 if tx is None else tx)
    ),
)
