"""Meta rules: output shape and dtype of an op, computed without touching data.

The op table names one shape rule and one dtype rule per row; the dispatcher
runs them on every call (that is where bad shapes are caught, with a message
naming the op) and they alone define what a ``meta`` tensor op returns.
"""

from __future__ import annotations

import math

from tensorplay import _dtype as D

# ---- shape rules ------------------------------------------------------------------


def broadcast_shapes(*shapes, op: str = "broadcast_shapes") -> tuple:
    """PyTorch/numpy broadcasting of ``shapes``; ``RuntimeError`` naming ``op`` otherwise."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            m = out[i]
            if m == 1:
                out[i] = n
            elif n != 1 and n != m:
                raise RuntimeError(
                    f"{op}(): shapes {' and '.join(str(tuple(x)) for x in shapes)} "
                    "cannot broadcast "
                    f"(size {m} vs {n} at dimension {i - ndim})"
                )
    return tuple(out)


def shape_of(x) -> tuple:
    return getattr(x, "_shape", ())


def pointwise_shape(op: str, *args, **_params) -> tuple:
    shapes = [x._shape for x in args if hasattr(x, "_shape")]
    if len(shapes) == 1:
        return shapes[0]
    return broadcast_shapes(*shapes, op=op)


def split_along(shape, index_shape, d: int):
    """``(outer, k, inner)`` of ``index_shape`` around dim ``d`` when it has ``shape``'s
    rank and sizes apart from ``d`` (a gather/scatter index laid out as its input, so a
    contiguous pair is walked as (outer, k, inner) against (outer, shape[d], inner));
    None otherwise."""
    if len(shape) != len(index_shape):
        return None
    if any(m != n for i, (m, n) in enumerate(zip(shape, index_shape)) if i != d):
        return None
    return math.prod(index_shape[:d]), index_shape[d], math.prod(index_shape[d + 1 :])


def wrap_dim(dim, ndim: int, op: str) -> int:
    if type(dim) is int and -ndim <= dim < ndim:  # the common call
        return dim % ndim
    if isinstance(dim, bool) or not isinstance(dim, int):
        try:
            dim = dim.__index__()
        except AttributeError:
            raise TypeError(f"{op}(): dim must be an int, got {type(dim).__name__}") from None
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    if not lo <= dim <= hi:
        raise IndexError(
            f"{op}(): Dimension out of range (expected to be in range of "
            f"[{lo}, {hi}], but got {dim})"
        )
    return dim % ndim if ndim else 0


def reduce_dims(dim, ndim: int, op: str, *, empty_is_all: bool = True) -> tuple:
    """``dim`` (None, int or sequence) as a sorted tuple of non-negative axes.

    An empty sequence (``dim=()``) means every axis, as for None: torch's sum, mean,
    amax, var, norm... reduce everything for it. ``empty_is_all=False`` is the rule of
    torch's all/any, where ``dim=()`` reduces no axis.
    """
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        return tuple(range(ndim)) if empty_is_all else ()
    axes = tuple(sorted({wrap_dim(d, ndim, op) for d in dims}))
    if len(axes) != len(dims):
        raise RuntimeError(f"{op}(): dim {dim} appears multiple times in the list of dims")
    return axes


def reduced_shape(shape, axes, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


# ---- dtype rules: (promoted dtype, params) -> (compute dtype, output dtype) --------


def _half_up(d):
    # float16/bfloat16 math runs in float32 and rounds once, as PyTorch's CPU kernels do.
    return D.float32 if d in (D.float16, D.bfloat16) else d


def same(d, params):
    return _half_up(d), d


def to_float(d, params):
    """Integer and bool inputs produce the default float dtype (``exp``, ``div``)."""
    if d.is_floating_point or d.is_complex:
        return _half_up(d), d
    f = D.get_default_dtype()
    return f, f


def to_bool(d, params):
    return _half_up(d), D.bool


def to_real(d, params):
    """``abs`` of complex is real."""
    return _half_up(d), d.to_real()


def sum_like(d, params):
    """``sum``/``prod``/``cumsum``: integers accumulate in int64; ``dtype=`` overrides."""
    want = params.get("dtype")
    if want is not None:
        return _half_up(want), want
    if d.category <= 1:
        return D.int64, D.int64
    return _half_up(d), d


def float_only(d, params, op="op"):
    want = params.get("dtype")
    if want is not None:
        d = want
    if not (d.is_floating_point or d.is_complex):
        raise RuntimeError(
            f"{op}(): could not infer output dtype. Input dtype must be either a floating point "
            f"or complex dtype. Got: {d.name.capitalize()}"
        )
    return _half_up(d), d


def real_float_only(d, params, op="op"):
    c, o = float_only(d, params, op)
    return c, o.to_real()


def to_int64(d, params):
    return _half_up(d), D.int64


def softmax_like(d, params, op="softmax"):
    """softmax/log_softmax: float inputs; ``dtype=`` (a float dtype) converts any input
    first, integers and bool included (torch computes ``input.to(dtype)``)."""
    want = params.get("dtype")
    if want is not None:
        d = want
    if not d.is_floating_point:
        raise NotImplementedError(
            f"{op}(): not supported for dtype {d}; pass a floating point input, or "
            f"dtype=tp.float32 to convert it"
        )
    return _half_up(d), d
