"""Samples and numpy references of the ``sorting`` family's rows (merged into
``optable_samples``'s ``_NAMED`` and ``REF`` at the end of that module).

The references order elements with Python's own stable sort (NaN the largest), not with the
numpy sort the kernels use, so a shared mistake cannot hide.
"""

from __future__ import annotations

import math

import numpy as np
import optable_samples as S

import tensorplay as tp

_s, make = S._s, S.make


# ---- inputs ----------------------------------------------------------------------------------


def _special(dt) -> bool:
    """Ties and non-finite values, for every dtype but float64: the derivative tests
    differentiate float64 samples, and a tie is a kink of sort/topk (NaN has no slope).
    tests/core/test_sorting_ops.py checks float64 ties and NaN against torch."""
    return dt is not tp.float64


def _ties(dt):
    return tp.tensor([[1, 0, 1, 0, 1], [2, 2, 0, 0, 1]]).to(dt)


def _nonfinite(dt):
    inf, nan = math.inf, math.nan
    return tp.tensor([[2.0, nan, 1.0, nan], [-inf, -0.0, 0.0, inf]], dtype=dt)


def _sparse(shape, dt, rng, layout="contiguous"):
    """Values with about half of them zero (nonzero/argwhere have something to skip)."""
    shape = tuple(shape)
    if layout == "transposed":
        return _sparse(shape[::-1], dt, rng).t()
    if layout == "stepped":
        return _sparse(shape[:-1] + (2 * shape[-1],), dt, rng)[..., ::2]
    v = S.values(shape, dt, rng)
    return tp.tensor(np.where(rng.random(shape) < 0.5, v, np.zeros((), v.dtype)), dtype=dt)


def _repeated(shape, dt, rng):
    """Values drawn from few distinct ones (unique has something to merge)."""
    v = S.values(shape, dt, rng)
    return tp.tensor(np.round(v) if dt.category >= 2 else v, dtype=dt)


# ---- samples ---------------------------------------------------------------------------------


def _sort(row, dt, rng):
    yield _s("vector", make((7,), dt, rng))
    yield _s("dim0_descending", make((3, 4), dt, rng, "transposed"), 0, True)
    yield _s("stepped_stable", make((2, 3, 4), dt, rng, "stepped"), -2, stable=True)
    yield _s("expanded", make((3, 4), dt, rng, "expanded"), 1, descending=True, stable=True)
    yield _s("0d", make((), dt, rng), 0)
    yield _s("empty", make((0, 3), dt, rng), 1)
    yield _s("empty_dim", make((2, 0), dt, rng))
    if _special(dt):
        yield _s("ties", _ties(dt))
        yield _s("ties_descending", _ties(dt), descending=True, stable=True)
        yield _s("ties_dim0", _ties(dt), 0, True)
        if dt.category == 2:
            yield _s("nonfinite", _nonfinite(dt))
            yield _s("nonfinite_descending", _nonfinite(dt), descending=True)
            yield _s("nonfinite_dim0", _nonfinite(dt), 0, True, stable=True)


def _topk(row, dt, rng):
    yield _s("vector", make((7,), dt, rng), 3)
    yield _s("dim0_smallest", make((3, 4), dt, rng, "transposed"), 2, 0, False)
    yield _s("unsorted", make((2, 3, 4), dt, rng, "stepped"), 4, -1, True, False)
    yield _s("expanded", make((3, 4), dt, rng, "expanded"), 3, dim=1, largest=False)
    yield _s("all", make((3, 4), dt, rng), 4)
    yield _s("k0", make((3, 4), dt, rng), 0)
    yield _s("0d", make((), dt, rng), 1)
    yield _s("0d_k0", make((), dt, rng), 0)
    yield _s("empty", make((0, 3), dt, rng), 2)
    if _special(dt):
        yield _s("ties", _ties(dt), 3)
        yield _s("ties_smallest", _ties(dt), 3, largest=False)
        if dt.category == 2:
            yield _s("nonfinite", _nonfinite(dt), 3)
            yield _s("nonfinite_smallest", _nonfinite(dt), 3, largest=False)
            yield _s("nonfinite_dim0", _nonfinite(dt), 1, 0)


def _triangle(row, dt, rng):
    yield _s("matrix", make((3, 4), dt, rng))
    yield _s("above", make((3, 4), dt, rng, "transposed"), 1)
    yield _s("batch_below", make((2, 3, 4), dt, rng, "stepped"), -1)
    yield _s("expanded_far", make((4, 3), dt, rng, "expanded"), 5)
    yield _s("far_below", make((3, 3), dt, rng), -4)
    yield _s("empty", make((0, 3), dt, rng))


def _repeat(row, dt, rng):
    yield _s("rows", make((2, 3), dt, rng), 2, 1)
    yield _s("tuple_lead", make((2, 3), dt, rng, "transposed"), (2, 1, 2))
    yield _s("expanded", make((3, 4), dt, rng, "expanded"), 1, 2)
    yield _s("0d", make((), dt, rng), 2, 3)
    yield _s("0d_none", make((), dt, rng), ())
    yield _s("zero", make((2, 3), dt, rng), 0, 2)
    yield _s("empty", make((0, 3), dt, rng), 2, 2)


def _flip(row, dt, rng):
    yield _s("two", make((2, 3, 4), dt, rng), (0, 2))
    yield _s("last", make((3, 4), dt, rng, "transposed"), [-1])
    yield _s("stepped", make((3, 4), dt, rng, "stepped"), (1, 0))
    yield _s("expanded", make((3, 4), dt, rng, "expanded"), (0,))
    yield _s("none", make((3, 4), dt, rng), ())
    yield _s("0d", make((), dt, rng), (0,))
    yield _s("empty", make((0, 3), dt, rng), (0, 1))


def _roll(row, dt, rng):
    yield _s("flat", make((3, 4), dt, rng), 1)
    yield _s("dim", make((3, 4), dt, rng, "transposed"), -5, 1)
    yield _s("dims", make((2, 3, 4), dt, rng, "stepped"), (1, -2), (0, 2))
    yield _s("same_dim_twice", make((3, 4), dt, rng), (1, 2), (1, 1))
    yield _s("flat_empty_dims", make((3, 4), dt, rng), 5, ())
    yield _s("expanded", make((3, 4), dt, rng, "expanded"), 2, 0)
    yield _s("0d", make((), dt, rng), 2)
    yield _s("empty", make((0, 3), dt, rng), 1, 0)


def _nonzero(row, dt, rng):
    # data-dependent shapes: only empty inputs have a meta result (meta=True)
    yield _s("matrix", _sparse((3, 4), dt, rng), meta=False)
    yield _s("transposed", _sparse((3, 4), dt, rng, "transposed"), meta=False)
    yield _s("stepped_3d", _sparse((2, 3, 4), dt, rng, "stepped"), meta=False)
    yield _s("0d", make((), dt, rng, domain="nonzero"), meta=False)
    yield _s("empty", make((0, 3), dt, rng))
    if row.name == "nonzero":
        yield _s("as_tuple", _sparse((3, 4), dt, rng), as_tuple=True, meta=False)
        yield _s("0d_as_tuple", make((), dt, rng, domain="nonzero"), as_tuple=True, meta=False)
        yield _s("0d_zero_as_tuple", tp.zeros((), dtype=dt), as_tuple=True, meta=False)
        yield _s("empty_as_tuple", make((2, 0), dt, rng), as_tuple=True)
    if dt.category == 2:
        yield _s("nonfinite", _nonfinite(dt), meta=False)


def _unique(row, dt, rng):
    # every sample asks for an extra output: the generated tests compare tuples for
    # multi-output rows (the plain call returning one tensor is in test_sorting_ops.py)
    both = {"return_inverse": True, "return_counts": True}
    yield _s("flat", _repeated((3, 4), dt, rng), **both, meta=False)
    yield _s("positional", _repeated((6,), dt, rng), True, True, meta=False)
    yield _s(
        "counts_unsorted", _repeated((2, 5), dt, rng), sorted=False, return_counts=True, meta=False
    )
    rows = S.values((3, 4), dt, rng)[[0, 2, 0, 1, 2]]
    yield _s("dim0", tp.tensor(rows, dtype=dt), dim=0, **both, meta=False)
    yield _s("dim_last", tp.tensor(rows, dtype=dt).t(), dim=-1, **both, meta=False)
    yield _s("0d", make((), dt, rng), return_inverse=True, meta=False)
    yield _s("empty", make((2, 0, 3), dt, rng), **both)
    yield _s("empty_dim", make((0, 3), dt, rng), dim=0, **both)
    if dt.category == 2:
        nan = tp.tensor([2.0, math.nan, 1.0, math.nan, 2.0, -math.inf], dtype=dt)
        yield _s("nan", nan, **both, meta=False)


def _diag_embed(row, dt, rng):
    yield _s("vector", make((4,), dt, rng))
    yield _s("batch_above", make((2, 3), dt, rng, "transposed"), 1)
    yield _s("dims_swapped", make((2, 3), dt, rng), -1, 2, 0)
    yield _s("middle", make((2, 3, 2), dt, rng, "stepped"), 0, 0, 2)
    yield _s("empty", make((0, 3), dt, rng))
    yield _s("empty_diagonal", make((2, 0), dt, rng), 2)


def _diag(row, dt, rng):
    yield _s("vector", make((3,), dt, rng))
    yield _s("vector_above", make((3,), dt, rng, "stepped"), 2)
    yield _s("vector_below", make((2,), dt, rng), -1)
    yield _s("matrix", make((3, 4), dt, rng))
    yield _s("matrix_above", make((3, 4), dt, rng, "transposed"), 1)
    yield _s("matrix_below", make((4, 3), dt, rng), -2)
    yield _s("matrix_outside", make((3, 4), dt, rng), 5)
    yield _s("empty", make((0,), dt, rng))


def _repeat_interleave(row, dt, rng):
    # tensor repeats fix the result's shape only with output_size (meta needs it)
    yield _s("flat", make((2, 3), dt, rng), 2)
    yield _s("dim0_counts", make((2, 3), dt, rng, "transposed"), tp.tensor([1, 2]), 0, meta=False)
    counts32 = tp.tensor([2, 0, 1], dtype=tp.int32)
    yield _s("dim_last_counts", make((2, 3), dt, rng, "stepped"), counts32, -1, meta=False)
    yield _s("one_count", make((2, 3), dt, rng), tp.tensor(2), 1, meta=False)
    yield _s("flat_counts", make((2, 2), dt, rng), tp.tensor([1, 0, 2, 1]), meta=False)
    yield _s("output_size", make((2, 3), dt, rng), tp.tensor([1, 2]), 0, output_size=3)
    yield _s("int_dim", make((3, 2), dt, rng, "expanded"), 3, 1)
    yield _s("0d", make((), dt, rng), 3)
    yield _s("empty", make((0, 3), dt, rng), 2, 0)
    yield _s("counts_only", tp.tensor([1, 3, 0, 2]), meta=False)


def _masked_select(row, dt, rng):
    bools = tp.bool
    yield _s("same", make((3, 4), dt, rng), make((3, 4), bools, rng), meta=False)
    yield _s(
        "broadcast_mask", make((3, 4), dt, rng, "transposed"), make((1, 4), bools, rng), meta=False
    )
    yield _s("broadcast_input", make((4,), dt, rng), make((3, 4), bools, rng), meta=False)
    yield _s("0d", make((), dt, rng), tp.tensor(True), meta=False)
    yield _s("empty", make((0, 3), dt, rng), make((3,), bools, rng))


NAMED: dict = {
    "sort": _sort,
    "argsort": _sort,
    "topk": _topk,
    "tril": _triangle,
    "triu": _triangle,
    "repeat": _repeat,
    "flip": _flip,
    "roll": _roll,
    "nonzero": _nonzero,
    "argwhere": _nonzero,
    "unique": _unique,
    "diag_embed": _diag_embed,
    "diag": _diag,
    "repeat_interleave": _repeat_interleave,
    "masked_select": _masked_select,
}


# ---- references ------------------------------------------------------------------------------


def _positions(x, dim, descending):
    """Indices that sort ``x`` along ``dim``: Python's stable sort, NaN the largest."""
    x = np.asarray(x)
    if x.ndim == 0:
        return np.zeros((), np.int64)
    moved = np.moveaxis(x, dim, -1)
    out = np.empty(moved.shape, np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = moved[pos].tolist()

        def key(i, row=row):
            v = row[i]
            nan = v != v
            if descending:
                return (not nan, 0 if nan else -v)
            return (nan, 0 if nan else v)

        out[pos] = sorted(range(len(row)), key=key)
    return np.moveaxis(out, -1, dim)


def _sort_ref(x, dim=-1, descending=False, stable=False):
    idx = _positions(x, dim, descending)
    if np.ndim(x) == 0:
        return x.copy(), idx
    return np.take_along_axis(x, idx, axis=dim), idx


def _topk_ref(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    if np.ndim(x) == 0:
        return x.copy(), np.zeros((), np.int64)
    idx = np.take(_positions(x, dim, largest), range(k), axis=dim)
    return np.take_along_axis(x, idx, axis=dim), idx


def _repeat_ref(x, *repeats):
    reps = repeats[0] if len(repeats) == 1 and isinstance(repeats[0], tuple) else repeats
    return np.tile(x, reps)


def _flip_ref(x, dims):
    return np.flip(x, axis=tuple(dims)) if np.ndim(x) else x.copy()


def _roll_ref(x, shifts, dims=None):
    return np.roll(x, shifts, axis=dims if dims not in (None, ()) else None)


def _nonzero_ref(x, as_tuple=False):
    if not as_tuple:
        return np.argwhere(x)
    if np.ndim(x) == 0:  # a 0-d tensor reads as 1-d here
        return (np.arange(int(x != 0)),)
    return tuple(np.nonzero(x))


def _unique_ref(x, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    values, inverse, counts = np.unique(
        x, return_inverse=True, return_counts=True, axis=dim, equal_nan=False
    )
    inverse = inverse.reshape(np.shape(x) if dim is None else (-1,))
    picked = (values,) + (inverse,) * return_inverse + (counts,) * return_counts
    return picked if len(picked) > 1 else values


def _diag_embed_ref(x, offset=0, dim1=-2, dim2=-1):
    n = x.shape[-1] + abs(offset)
    out = np.zeros(x.shape[:-1] + (n, n), x.dtype)
    for i in range(x.shape[-1]):
        out[..., i + max(-offset, 0), i + max(offset, 0)] = x[..., i]
    nd = x.ndim + 1
    return np.moveaxis(out, (-2, -1), (dim1 % nd, dim2 % nd))


def _repeat_interleave_ref(x, repeats=None, dim=None, output_size=None):
    if repeats is None:
        return np.repeat(np.arange(len(x)), x)
    if dim is None:
        x, dim = x.reshape(-1), 0
    if isinstance(repeats, np.ndarray):
        repeats = np.broadcast_to(repeats.reshape(-1), (x.shape[dim],))
    return np.repeat(x, repeats, axis=dim)


def _masked_select_ref(x, mask):
    shape = np.broadcast_shapes(np.shape(x), np.shape(mask))
    return np.broadcast_to(x, shape)[np.broadcast_to(mask, shape)]


REF: dict = {
    "sort": _sort_ref,
    "argsort": lambda *a, **k: _sort_ref(*a, **k)[1],
    "topk": _topk_ref,
    "tril": lambda x, diagonal=0: np.tril(x, diagonal),
    "triu": lambda x, diagonal=0: np.triu(x, diagonal),
    "repeat": _repeat_ref,
    "flip": _flip_ref,
    "roll": _roll_ref,
    "nonzero": _nonzero_ref,
    "argwhere": np.argwhere,
    "unique": _unique_ref,
    "diag_embed": _diag_embed_ref,
    "diag": lambda x, diagonal=0: np.diag(x, diagonal),
    "repeat_interleave": _repeat_interleave_ref,
    "masked_select": _masked_select_ref,
}
