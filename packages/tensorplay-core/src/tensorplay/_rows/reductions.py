"""Reduction rows (``sum``, ``mean``, ``amax``, ``var``, ``norm``, ``logsumexp``, ``all``,
``max(dim)``...), and the dim-wise ops that share their machinery: scans (``cumsum``,
``cumprod``, ``cummax``/``cummin``) and ``softmax`` / ``log_softmax``.

Shape rules refuse what torch refuses before any kernel runs (meta tensors too); kernels
reduce over ``_axes``; the derivative formulas follow torch's (``*_backward``) case by case.
"""

from __future__ import annotations

import functools
import math
from collections import namedtuple

import numpy as np

from tensorplay import _cuda_reduce, _dtype as D, _meta as M
from tensorplay._dispatch import OPS, OpDef
from tensorplay._factories import arange
from tensorplay._rows import finished_maker, row_maker, values_jvp
from tensorplay.autograd._derivatives import (
    axes_of,
    cat,
    conj,
    ones_like,
    real_jvp,
    reduction_rule,
    same_op_jvp,
    sgn,
    total,
    unreduce,
    where,
    zeros_like,
)
from tensorplay.autograd.grad_mode import is_grad_enabled

ROWS: list[OpDef] = []
op = row_maker(ROWS)
finished = finished_maker(ROWS)


# ---- reductions ----------------------------------------------------------------------------


def _reduce_shape(name, *, empty_is_all=True, check=None):
    """The shape rule of a reduction over ``dim``; ``check(input, dim, axes, **params)``
    refuses calls torch refuses (before any kernel runs, and on meta tensors too)."""

    def shape(input, dim=None, keepdim=False, **params):
        axes = M.reduce_dims(dim, input.dim(), name, empty_is_all=empty_is_all)
        if check is not None:
            check(input, dim, axes, keepdim=keepdim, **params)
        return M.reduced_shape(input._shape, axes, keepdim)

    return shape


def _axes(a, dim, op_name, *, empty_is_all=True):
    if dim is None:
        return None
    axes = M.reduce_dims(dim, a.ndim, op_name, empty_is_all=empty_is_all)
    # a 0-d tensor accepts dim 0/-1 (torch) but a 0-d array has no axis 0: reduce it whole
    return axes if a.ndim else None


def _no_identity(name, shape, dims, *, unspecified=RuntimeError):
    """max/min-like reductions have no value for an empty slice: torch refuses to reduce
    a dimension of size 0 (``dims`` as the caller wrote them, None for every dim)."""
    if math.prod(shape) != 0:
        return
    if dims is None:
        raise unspecified(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )
    for d in dims:
        if shape[M.wrap_dim(d, len(shape), name)] == 0:
            raise IndexError(
                f"{name}(): Expected reduction dim {d} to have non-zero size; "
                "an empty slice has no maximum or minimum"
            )


def _extreme_check(name):
    def check(input, dim, axes, **_):
        given = None if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
        _no_identity(name, input._shape, given or None)

    return check


def _prod_check(input, dim, axes, **_):
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        # torch's prod takes one int dim: dim=() has no meaning there (a TypeError in torch)
        raise TypeError(
            "prod(): dim=() names no dimension; pass dim=None to multiply every element, "
            "or an int (or a tuple of ints)"
        )


def _logsumexp_check(input, dim, axes, keepdim=False, **_):
    # NOTE: torch 2.13 reads dim=() as every dim but then fails to squeeze its
    # intermediate max ("output with shape [] doesn't match the broadcast shape [1, 1]")
    # unless keepdim=True or the input is 0-d or empty; TensorPlay refuses the same calls.
    if (
        not isinstance(dim, int)
        and len(dim) == 0
        and not keepdim
        and input.dim() > 0
        and input.numel() > 0
    ):
        raise RuntimeError(
            "logsumexp(): dim=() with keepdim=False is refused (as in torch); name the "
            f"dims, dim={tuple(range(input.dim()))}, or pass keepdim=True"
        )


def reduction(
    name,
    kernel,
    *,
    dtype=M.same,
    allow="bifc",
    params="input, dim=None, keepdim=False",
    shape=None,
    **kw,
):
    return op(
        name,
        params,
        kind="reduction",
        kernel=kernel,
        shape=shape or _reduce_shape(name),
        dtype=dtype,
        allow=allow,
        **kw,
    )


def _sum(xp, a, dim=None, keepdim=False, dtype=None):
    axes = _axes(a, dim, "sum")
    if xp is not np:
        r = _cuda_reduce.sum(a, axes, keepdim)
        if r is not None:
            return r
    return xp.sum(a, axis=axes, keepdims=keepdim)


def _count(a, axes) -> int:
    return math.prod(a.shape[i] for i in (axes if axes is not None else range(a.ndim)))


def _mean(xp, a, dim=None, keepdim=False, dtype=None):
    # sum / count: the mean of nothing is nan, silently, as in torch (xp.mean warns)
    axes = _axes(a, dim, "mean")
    if xp is not np:
        r = _cuda_reduce.sum(a, axes, keepdim, mean=True)
        if r is not None:
            return r
    return xp.sum(a, axis=axes, keepdims=keepdim) / _count(a, axes)


def _prod(xp, a, dim=None, keepdim=False, dtype=None):
    return xp.prod(a, axis=_axes(a, dim, "prod"), keepdims=keepdim)


def _amax(xp, a, dim=None, keepdim=False):
    return xp.amax(a, axis=_axes(a, dim, "amax"), keepdims=keepdim)


def _amin(xp, a, dim=None, keepdim=False):
    return xp.amin(a, axis=_axes(a, dim, "amin"), keepdims=keepdim)


def _arg(fn_name):
    def kernel(xp, a, dim=None, keepdim=False):
        if a.ndim == 0:  # the only index of a 0-d tensor (CuPy refuses axis=0 here)
            return xp.zeros((), xp.int64)
        if dim is None:
            r = getattr(xp, fn_name)(a.reshape(-1))
            return r.reshape((1,) * a.ndim) if keepdim else r
        return getattr(xp, fn_name)(a, axis=M.wrap_dim(dim, a.ndim, fn_name), keepdims=keepdim)

    return kernel


def _arg_shape(name):
    def shape(input, dim=None, keepdim=False):
        if dim is None:
            _no_identity(name, input._shape, None, unspecified=IndexError)
            return (1,) * input.dim() if keepdim else ()
        d = M.wrap_dim(dim, input.dim(), name)
        _no_identity(name, input._shape, (d,))
        return M.reduced_shape(input._shape, (d,), keepdim)

    return shape


def _var(xp, a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    # Written out rather than xp.var: torch divides by max(N - correction, 0) (so too large
    # a correction gives inf, where CuPy gives nan) and never warns.
    ddof = correction if correction is not None else (0 if unbiased is False else 1)
    axes = _axes(a, dim, "var")
    n = _count(a, axes)
    if xp is not np and a.dtype.kind == "f":  # rows of a CUDA array: one kernel
        r = _cuda_reduce.var(a, axes, keepdim, ddof)
        if r is not None:
            return r
    # accumulate in double precision (as torch's CPU kernels do): constant data then has
    # a variance of exactly 0 (0/0 = nan for a too large correction, not tiny/0 = inf)
    if a.dtype.kind in "fc" and a.dtype.itemsize < 8 + 8 * (a.dtype.kind == "c"):
        a = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    d = a - xp.mean(a, axis=axes, keepdims=True) if n else a
    sq = (d * d.conj()).real if a.dtype.kind == "c" else d * d
    return xp.sum(sq, axis=axes, keepdims=keepdim) / max(n - ddof, 0)


def _std(xp, a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return xp.sqrt(_var(xp, a, dim, unbiased, keepdim, correction=correction))


def _norm(xp, a, p="fro", dim=None, keepdim=False, dtype=None):
    axes = _axes(a, dim, "norm")
    x = xp.abs(a)
    if p in ("fro", 2, 2.0):
        return xp.sqrt(xp.sum(x * x, axis=axes, keepdims=keepdim))
    if p in (float("inf"), "inf"):
        return xp.amax(x, axis=axes, keepdims=keepdim)
    if p in (float("-inf"), "-inf"):
        return xp.amin(x, axis=axes, keepdims=keepdim)
    if p == 0:
        return xp.sum(x != 0, axis=axes, keepdims=keepdim).astype(x.dtype)
    if p == 1:
        return xp.sum(x, axis=axes, keepdims=keepdim)
    return xp.sum(x**p, axis=axes, keepdims=keepdim) ** (1.0 / p)


def _all_dtype(d, params):
    # torch keeps uint8 for all()/any() of uint8 (legacy byte masks); every other dtype -> bool
    c, o = M.to_bool(d, params)
    return (c, d) if d.name == "uint8" else (c, o)


def _logsumexp(xp, a, dim, keepdim=False):
    axes = _axes(a, dim, "logsumexp")
    m = xp.amax(a, axis=axes, keepdims=True) if a.size else xp.zeros((1,) * a.ndim, a.dtype)
    m = xp.where(xp.isfinite(m), m, 0)
    r = xp.log(xp.sum(xp.exp(a - m), axis=axes, keepdims=True)) + m
    return r if keepdim else xp.squeeze(r, axis=axes)


# ---- derivatives (torch's *_backward formulas) -------------------------------------------


def _numel_over(shape, axes) -> int:
    return math.prod(shape[i] for i in axes)


def _flip(x, d):
    return x.index_select(d, arange(x.shape[d] - 1, -1, -1, device=x.device))


def _exclusive_cumprod(x, d):
    """prod(x[..:i]) along d (1 first): products of the elements before each one."""
    ones = ones_like(x.narrow(d, 0, 1))
    return cat([ones, x.narrow(d, 0, x.shape[d] - 1)], d).cumprod(d)


def _prod_of_others(x, axes):
    """For each element, the product of the other elements of its reduced slice (exact when
    x holds zeros, where out / x is not): exclusive products from the left and the right."""
    k = len(axes)
    moved = x.movedim(axes, tuple(range(-k, 0))) if k else x
    flat = moved.reshape(*moved.shape[: moved.dim() - k], -1)
    others = _exclusive_cumprod(flat, -1) * _flip(_exclusive_cumprod(_flip(flat, -1), -1), -1)
    return others.reshape(moved.shape).movedim(tuple(range(-k, 0)), axes) if k else others


def _prod_partial(x, out, axes, **_):
    if x.dim() == 0 or x.numel() == 0:
        return ones_like(x)
    return _prod_of_others(x, axes) if bool((x == 0).any()) else out / x


_PROD_RULE = reduction_rule(_prod_partial)


def _prod_vjp(ctx, grad):
    # torch's prod_backward: a product of every element with two zeros or more has a zero
    # gradient outright (first order only: an inf or nan gradient gives 0, not nan)
    x = ctx.inputs[0]
    if ctx.params["dim"] is None and not is_grad_enabled() and int((x == 0).sum()) > 1:
        return (zeros_like(x),)
    return _PROD_RULE["vjp"](ctx, grad)


def _ties_vjp(ctx, grad):
    # amax/amin: the gradient is shared evenly by the elements equal to the extreme, in the
    # gradient's dtype (torch's scale_grad_by_count, in its order: grad / count * mask)
    x, dim = ctx.inputs[0], ctx.params.get("dim")
    hit = x == unreduce(ctx.out, x, dim)
    return (unreduce(grad, x, dim) / hit.sum(dim=axes_of(x, dim), keepdim=True) * hit,)


def _ties_jvp(ctx, t):
    # the mean tangent of the tied elements (torch's amaxamin_jvp: selected, not multiplied)
    if t is None:
        return None
    x, dim, keepdim = ctx.inputs[0], ctx.params.get("dim"), ctx.params.get("keepdim", False)
    hit = x == unreduce(ctx.out, x, dim)
    axes = axes_of(x, dim)
    picked = where(hit, t, 0).sum(dim=axes, keepdim=True) / hit.sum(dim=axes, keepdim=True)
    return picked if keepdim else picked.reshape(ctx.out.shape)


def _ddof(unbiased=None, correction=None, **_):
    return correction if correction is not None else (0 if unbiased is False else 1)


def _var_partial(x, axes, unbiased=None, correction=None, **_):
    n = max(_numel_over(tuple(x.shape), axes) - _ddof(unbiased, correction), 0)
    return 2 * conj(x - x.mean(dim=axes, keepdim=True)) / n


def _var_grad(grad, x, params):
    """torch's var_backward. With no degree of freedom left (correction >= N) a full
    reduction's gradient is inf (nan where x equals the mean), whatever its sign; over
    dims it is the formula's 2 / (N - correction), inf at 0 and finite below."""
    dim, correction = params.get("dim"), _ddof(params.get("unbiased"), params.get("correction"))
    if dim is None or x.dim() == 0:
        dof = x.numel() - correction
        if dof <= 0:
            return grad * where(x == x.mean(), math.nan, math.inf)
        return 2.0 / dof * grad * (x - x.mean())
    axes = axes_of(x, dim)
    dof = _numel_over(tuple(x.shape), axes) - correction
    scale = 2.0 / dof if dof else math.inf
    return scale * unreduce(grad, x, dim) * (x - x.mean(dim=axes, keepdim=True))


def _var_vjp(ctx, grad):
    return (_var_grad(grad, ctx.inputs[0], ctx.params),)


def _std_vjp(ctx, grad):
    # d std = d var / (2 std), 0 where std is 0 (torch's std_backward)
    return (_var_grad(_masked_over(grad, ctx.out * 2), ctx.inputs[0], ctx.params),)


def _masked_over(num, den):
    """num / den, 0 where den == 0. The inner where keeps 1/0 out of the graph: otherwise the
    second derivative would be 0 * inf = nan there."""
    zero = den == 0
    return where(zero, 0.0, num / where(zero, 1.0, den))


def _std_partial(x, out, axes, **params):
    # d sqrt(var) = d var / (2 std); 0 where std is 0 (torch masks it the same way)
    return _var_partial(x, axes, **params) * _masked_over(0.5, out)


_INF = (math.inf, "inf")
_NEG_INF = (-math.inf, "-inf")


def _norm_vjp(ctx, grad):
    """torch's norm_backward, case by case: p = 0 has no gradient (None: ``.grad`` stays
    unset); p = +-inf shares it among the extreme elements (and NaNs), as amax does; the
    masks select (an inf gradient where they are 0 gives 0)."""
    x, p, dim = ctx.inputs[0], ctx.params["p"], ctx.params["dim"]
    if p == 0:
        return (None,)
    g, norm = unreduce(grad, x, dim), unreduce(ctx.out, x, dim)
    if p == 1:
        return (sgn(x) * g,)
    if p in ("fro", 2):
        return (g * (x / norm).masked_fill(norm == 0, 0),)
    if p in _INF or p in _NEG_INF:
        a = x.abs()
        hit = (a == norm).logical_or(a.isnan())
        return (sgn(x) * (g / hit.sum(dim=axes_of(x, dim), keepdim=True) * hit),)
    if p < 1:
        scaled = sgn(x) * (x.abs() ** (p - 1)).masked_fill(x == 0, 0)
        return (scaled * g * norm ** (1 - p),)
    scaled = sgn(x) * x.abs() ** (p - 1) if p < 2 else x * x.abs() ** (p - 2)
    return (scaled * (g / norm ** (p - 1)).masked_fill(norm == 0, 0),)


def _norm_partial(x, out, axes, p="fro", **_):
    a, s = x.abs(), conj(sgn(x))
    if p in ("fro", 2, 2.0):
        return _masked_over(a, out) * s  # 0 at a zero norm, like torch
    if p == 1:
        return s
    if p == 0:
        return zeros_like(a)
    if p in _INF or p in _NEG_INF:
        hit = (a == out).to(a.dtype)
        return hit / hit.sum(dim=axes, keepdim=True) * s
    return _masked_over(a, out) ** (p - 1) * s


reduction(
    "sum",
    _sum,
    params="input, dim=None, keepdim=False, *, dtype=None",
    dtype=M.sum_like,
    out=True,
    vjp=lambda ctx, grad: (unreduce(grad, ctx.inputs[0], ctx.params["dim"]),),
    jvp=same_op_jvp("sum"),
)
reduction(
    "mean",
    _mean,
    params="input, dim=None, keepdim=False, *, dtype=None",
    dtype=functools.partial(M.float_only, op="mean"),
    out=True,
    vjp=lambda ctx, grad: (
        unreduce(grad, ctx.inputs[0], ctx.params["dim"])
        / _numel_over(tuple(ctx.inputs[0].shape), axes_of(ctx.inputs[0], ctx.params["dim"])),
    ),
    jvp=same_op_jvp("mean"),
)
reduction(
    "prod",
    _prod,
    params="input, dim=None, keepdim=False, *, dtype=None",
    dtype=M.sum_like,
    shape=_reduce_shape("prod", check=_prod_check),
    out=True,
    vjp=_prod_vjp,
    jvp=_PROD_RULE["jvp"],
)
for _name, _kernel in (("amax", _amax), ("amin", _amin)):
    reduction(
        _name,
        _kernel,
        allow="bif",
        shape=_reduce_shape(_name, check=_extreme_check(_name)),
        out=True,
        vjp=_ties_vjp,
        jvp=_ties_jvp,
    )


def _evenly_vjp(ctx, grad):
    # max()/min() of every element (torch's evenly_distribute_backward, not amax's rule):
    # the elements equal to the result share the gradient, the NaNs when it is NaN; the
    # others are left at 0 (selected, so an inf gradient gives 0 there, not nan)
    x, out = ctx.inputs[0], ctx.out
    hit = x.isnan() if bool(out.isnan()) else x == out
    return (where(hit, grad / hit.sum(), 0),)


def _whole_shape(name):
    def shape(input):
        _no_identity(name, input._shape, None)
        return ()

    return shape


for _name, _np_name in (("max", "amax"), ("min", "amin")):
    # tp.max(x) / tp.min(x) with no dim: amax's value, another gradient
    op(
        f"_{_name}_all",
        "input",
        kind="other",  # no dim or keepdim: not one of the dim reductions
        kernel=lambda xp, a, _f=_np_name: getattr(xp, _f)(a),
        shape=_whole_shape(_name),
        allow="bif",
        method=False,
        vjp=_evenly_vjp,
        jvp=_ties_jvp,
    )
reduction("argmax", _arg("argmax"), dtype=M.to_int64, allow="if", shape=_arg_shape("argmax"))
reduction("argmin", _arg("argmin"), dtype=M.to_int64, allow="if", shape=_arg_shape("argmin"))
reduction(
    "var",
    _var,
    params="input, dim=None, unbiased=None, keepdim=False, *, correction=None",
    dtype=functools.partial(M.real_float_only, op="var"),
    allow="fc",
    out=True,
    **real_jvp({"vjp": _var_vjp, "jvp": reduction_rule(_var_partial)["jvp"]}),
)
reduction(
    "std",
    _std,
    params="input, dim=None, unbiased=None, keepdim=False, *, correction=None",
    dtype=functools.partial(M.real_float_only, op="std"),
    allow="fc",
    out=True,
    **real_jvp({"vjp": _std_vjp, "jvp": reduction_rule(_std_partial)["jvp"]}),
)
reduction(
    "norm",
    _norm,
    params="input, p='fro', dim=None, keepdim=False, dtype=None",
    dtype=functools.partial(M.real_float_only, op="norm"),
    allow="fc",
    **real_jvp({"vjp": _norm_vjp, "jvp": reduction_rule(_norm_partial)["jvp"]}),
)
reduction(
    "logsumexp",
    _logsumexp,
    params="input, dim, keepdim=False",
    dtype=M.to_float,
    shape=_reduce_shape("logsumexp", check=_logsumexp_check),
    out=True,
    **reduction_rule(lambda x, out, axes, **_: (x - out).exp()),
)
for _name in ("all", "any"):
    # torch: all/any over dim=() reduce nothing (the input, as bool), unlike sum
    reduction(
        _name,
        lambda xp, a, dim=None, keepdim=False, _n=_name: getattr(xp, _n)(
            a, axis=_axes(a, dim, _n, empty_is_all=False), keepdims=keepdim
        ),
        shape=_reduce_shape(_name, empty_is_all=False),
        dtype=_all_dtype,
    )

MinMax = namedtuple("MinMax", ["values", "indices"])


def _minmax_dim(fn):
    def kernel(xp, a, dim, keepdim=False):
        d = M.wrap_dim(dim, a.ndim, fn)
        if a.ndim == 0:
            return a.copy(), xp.zeros((), xp.int64)
        idx = getattr(xp, "arg" + fn)(a, axis=d, keepdims=True)
        vals = xp.take_along_axis(a, idx, axis=d)
        if not keepdim:
            idx, vals = xp.squeeze(idx, axis=d), xp.squeeze(vals, axis=d)
        return vals, idx

    return kernel


def _minmax_dim_shape(name):
    def shape(input, dim, keepdim=False):
        d = M.wrap_dim(dim, input.dim(), name)
        _no_identity(name, input._shape, (d,))
        s = M.reduced_shape(input._shape, (d,), keepdim)
        return (s, s)

    return shape


def _minmax_dim_rule(fn):
    """max(dim)/min(dim): the gradient goes to the element the index names (torch), not
    shared among ties as for amax. Only the values output is differentiable."""

    def index(x, dim):  # the indices output, recomputed (autograd keeps the float outputs only)
        return getattr(x, "arg" + fn)(dim=dim, keepdim=True)

    def vjp(ctx, grad):
        x, (dim, keepdim) = ctx.inputs[0], (ctx.params["dim"], ctx.params["keepdim"])
        g = grad[0]
        if x.dim() == 0:
            return (g,)
        g = g if keepdim else g.unsqueeze(dim)
        return (zeros_like(x, dtype=g.dtype).scatter(dim, index(x, dim), g),)

    def jvp(ctx, t):
        x, (dim, keepdim) = ctx.inputs[0], (ctx.params["dim"], ctx.params["keepdim"])
        if t is None:
            return None
        if x.dim() == 0:
            return (t,)
        picked = t.gather(dim, index(x, dim))
        return (picked if keepdim else picked.squeeze(dim),)

    return {"vjp": vjp, "jvp": jvp}


for _fn in ("max", "min"):
    op(
        f"{_fn}_dim",
        "input, dim, keepdim=False",
        kind="reduction",
        kernel=_minmax_dim(_fn),
        shape=_minmax_dim_shape(_fn),
        dtype=lambda d, p: (d, (d, D.int64)),
        multi=True,
        allow="bif",
        method=False,
        **_minmax_dim_rule(_fn),
    )

# ---- scans, softmax ----------------------------------------------------------------------


def _scan(fn):
    def kernel(xp, a, dim, *, dtype=None):
        d = M.wrap_dim(dim, a.ndim, fn)
        return getattr(xp, fn)(a, axis=d) if a.ndim else a.copy()

    return kernel


def _same_shape_dim(name):
    def shape(input, dim, *args, **kwargs):
        # IndexError here (also on meta), not a kernel error wrapped as RuntimeError
        M.wrap_dim(dim, input.dim(), name)
        return input._shape

    return shape


def _reverse_cumsum(g, d):
    return _flip(_flip(g, d).cumsum(d), d)


def _cumsum_vjp(ctx, grad):
    x = ctx.inputs[0]
    return (_reverse_cumsum(grad, ctx.params["dim"]) if x.dim() else grad,)


def _cumprod_jacobian(x, d):
    """d out[k] / d x[i] = prod(x[:i]) * prod(x[i+1:k+1]) for i <= k, as [..., i, k] with d
    moved last: O(n^2) per slice, used only when x holds zeros (out / x is then 0 / 0)."""
    xm = x.movedim(d, -1)
    i = arange(xm.shape[-1], device=x.device)
    between = where(i > i.unsqueeze(-1), xm.unsqueeze(-2), 1.0).cumprod(-1)
    return _exclusive_cumprod(xm, -1).unsqueeze(-1) * between * (i >= i.unsqueeze(-1))


def _cumprod_vjp(ctx, grad):
    x, out, d = ctx.inputs[0], ctx.out, ctx.params["dim"]
    if x.dim() == 0 or x.numel() == 0:
        return (grad,)
    if not bool((x == 0).any()):  # sum over k >= i of grad[k] * out[k] / x[i]
        return (_reverse_cumsum(grad * conj(out), d) / conj(x),)
    if not is_grad_enabled():
        return (_cumprod_zeros_vjp(grad, x, out, d),)
    jac = conj(_cumprod_jacobian(x, d))  # differentiable again (create_graph=True)
    return ((grad.movedim(d, -1).unsqueeze(-2) * jac).sum(-1).movedim(-1, d),)


def _cumprod_zeros_vjp(grad, x, out, d):
    """torch's first-order cumprod_backward for a slice holding zeros, term by term (so an
    inf or nan gradient spreads as it does there): before the first zero z1 the usual
    reversed cumsum over x; at z1, sum over k in [z1, z2) of grad[k] * prod(x(z1, k]) times
    out[z1 - 1]; 0 from there on."""
    xc, outc = conj(x), conj(out)
    seen = (x == 0).to(D.int64).cumsum(d)  # zeros up to and including each position
    before, first_run = seen == 0, seen == 1
    first_zero = first_run & (x == 0)
    between = first_run & ~first_zero
    ahead = _reverse_cumsum((outc * grad).masked_fill(~before, 0), d)
    g = where(before, ahead / xc.masked_fill(~before, 1), 0)
    run = xc.masked_fill(~between, 1).cumprod(d) * grad.masked_fill(~first_run, 0)
    prev = cat([ones_like(outc.narrow(d, 0, 1)), outc.narrow(d, 0, x.shape[d] - 1)], d)
    return where(first_zero, run.sum(d, keepdim=True) * prev, g)


def _cumprod_jvp(ctx, t):
    x, out, d = ctx.inputs[0], ctx.out, ctx.params["dim"]
    if t is None or x.dim() == 0 or x.numel() == 0:
        return t
    if not bool((x == 0).any()):
        return out * (t / x).cumsum(d)
    return (t.movedim(d, -1).unsqueeze(-1) * _cumprod_jacobian(x, d)).sum(-2).movedim(-1, d)


op(
    "cumsum",
    "input, dim, *, dtype=None",
    kernel=_scan("cumsum"),
    shape=_same_shape_dim("cumsum"),
    dtype=M.sum_like,
    out=True,
    vjp=_cumsum_vjp,
    jvp=same_op_jvp("cumsum"),
)
op(
    "cumprod",
    "input, dim, *, dtype=None",
    kernel=_scan("cumprod"),
    shape=_same_shape_dim("cumprod"),
    dtype=M.sum_like,
    out=True,
    vjp=_cumprod_vjp,
    jvp=_cumprod_jvp,
)


def _softmax(xp, a, dim, dtype=None):
    d = M.wrap_dim(dim, a.ndim, "softmax")
    if a.ndim == 0:  # exp(a - a): nan for inf and nan, as torch
        return xp.exp(a - a)
    if xp is not np and a.size:
        r = _cuda_reduce.softmax(a, d, log=False)
        if r is not None:
            return r
    e = xp.exp(a - xp.amax(a, axis=d, keepdims=True)) if a.size else a
    return e / xp.sum(e, axis=d, keepdims=True) if a.size else a


def _log_softmax(xp, a, dim, dtype=None):
    d = M.wrap_dim(dim, a.ndim, "log_softmax")
    if a.ndim == 0:  # a - a: nan for inf and nan, as torch
        return a - a
    if not a.size:
        return a
    if xp is not np:
        r = _cuda_reduce.softmax(a, d, log=True)
        if r is not None:
            return r
    # torch's kernel: shifted - log(sum(exp(shifted))) with shifted = a - max, so an inf
    # maximum makes the whole slice nan (logsumexp's inf rule does not apply here). (The
    # dispatcher runs kernels with numpy's warnings off; the ufuncs' own reduce skips
    # np.amax's and np.sum's Python wrappers.)
    if xp is np:
        shifted = a - np.maximum.reduce(a, axis=d, keepdims=True)
        return shifted - np.log(np.add.reduce(np.exp(shifted), axis=d, keepdims=True))
    shifted = a - xp.amax(a, axis=d, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=d, keepdims=True))


op(
    "softmax",
    "input, dim, dtype=None",
    kernel=_softmax,
    shape=_same_shape_dim("softmax"),
    dtype=functools.partial(M.softmax_like, op="softmax"),
    allow="bifc",  # complex only with a real dtype= (torch converts the input first)
    vjp=lambda ctx, grad: (_SOFTMAX_BACKWARD.fn(grad, ctx.out, ctx.params["dim"]),),
    # the Jacobian is symmetric: the jvp is the backward op on the tangent
    jvp=lambda ctx, t: None if t is None else _SOFTMAX_BACKWARD.fn(t, ctx.out, ctx.params["dim"]),
)
op(
    "log_softmax",
    "input, dim, dtype=None",
    kernel=_log_softmax,
    shape=_same_shape_dim("log_softmax"),
    dtype=functools.partial(M.softmax_like, op="log_softmax"),
    allow="bifc",  # complex only with a real dtype= (torch converts the input first)
    vjp=lambda ctx, grad: (_LOG_SOFTMAX_BACKWARD.fn(grad, ctx.out, ctx.params["dim"]),),
    jvp=lambda ctx, t: None if t is None else _log_softmax_adjoint(t, ctx.out, ctx.params["dim"]),
)


# ---- the backward ops of softmax and log_softmax -----------------------------------------
# torch's _softmax_backward_data / _log_softmax_backward_data: one kernel each (one CUDA
# kernel per row of the last dimension) instead of three or four ops on every backward
# through a classifier's loss or an attention. Float32 math for float16/bfloat16.


def _softmax_backward(xp, g, out, dim, *, log):
    name = "_log_softmax_backward_data" if log else "_softmax_backward_data"
    d = M.wrap_dim(dim, g.ndim, name) if g.ndim else None
    if xp is not np and g.ndim:
        r = _cuda_reduce.softmax_backward(g, out, d, log=log)
        if r is not None:
            return r
    if log:  # grad - exp(out) * sum(grad)
        return g - xp.exp(out) * xp.sum(g, axis=d, keepdims=True)
    return out * (g - xp.sum(g * out, axis=d, keepdims=True))  # out * (grad - sum(grad * out))


def _log_softmax_adjoint(h, out, dim):
    """h - sum(h * exp(out)): the transpose of log_softmax's backward map, which is
    log_softmax's Jacobian (its jvp) and the backward op's vjp in the gradient."""
    return h - (h * out.exp()).sum(dim, keepdim=True)


def _log_softmax_backward_vjp(ctx, h):
    # y = g - e * sum(g), e = exp(out): linear in g (adjoint above); in out,
    # dy/dout = -e * sum(g) elementwise
    g, out = ctx.inputs
    dim = ctx.params["dim"]
    want = ctx.needs_input_grad
    return (
        _log_softmax_adjoint(h, out, dim) if want[0] else None,
        -(h * out.exp() * g.sum(dim, keepdim=True)) if want[1] else None,
    )


def _log_softmax_backward_jvp(ctx, tg, tout):
    g, out = ctx.inputs
    dim = ctx.params["dim"]
    terms = []
    if tg is not None:  # linear in the gradient: the op itself on the tangent
        terms.append(_LOG_SOFTMAX_BACKWARD.fn(tg, out, dim))
    if tout is not None:
        terms.append(-(out.exp() * tout * g.sum(dim, keepdim=True)))
    return total(terms)


def _softmax_backward_vjp(ctx, h):
    # y = out * (g - s), s = sum(g * out): symmetric in g (the softmax Jacobian); in out,
    # dy_j/dout_k = [j == k] (g_j - s) - out_j g_k
    g, out = ctx.inputs
    dim = ctx.params["dim"]
    want = ctx.needs_input_grad
    s = (g * out).sum(dim, keepdim=True)
    return (
        _SOFTMAX_BACKWARD.fn(h, out, dim) if want[0] else None,
        h * (g - s) - g * (h * out).sum(dim, keepdim=True) if want[1] else None,
    )


def _softmax_backward_jvp(ctx, tg, tout):
    g, out = ctx.inputs
    dim = ctx.params["dim"]
    s = (g * out).sum(dim, keepdim=True)
    terms = []
    if tg is not None:
        terms.append(_SOFTMAX_BACKWARD.fn(tg, out, dim))
    if tout is not None:
        terms.append(tout * (g - s) - out * (g * tout).sum(dim, keepdim=True))
    return total(terms)


def _backward_data_shape(name):
    def shape(grad_output, output, dim):
        M.wrap_dim(dim, grad_output.dim(), name)
        if grad_output._shape != output._shape:
            raise RuntimeError(
                f"{name}(): grad_output has shape {list(grad_output._shape)} but output has "
                f"shape {list(output._shape)}; they must match"
            )
        return grad_output._shape

    return shape


_SOFTMAX_BACKWARD, _LOG_SOFTMAX_BACKWARD = (
    op(
        name,
        "grad_output, output, dim",
        kind="other",
        n_inputs=2,
        kernel=functools.partial(_softmax_backward, log=log),
        shape=_backward_data_shape(name),
        dtype=lambda d, params: (M._half_up(d), d),
        allow="f",
        method=False,
        vjp=vjp,
        jvp=jvp,
    )
    for name, log, vjp, jvp in (
        ("_softmax_backward_data", False, _softmax_backward_vjp, _softmax_backward_jvp),
        ("_log_softmax_backward_data", True, _log_softmax_backward_vjp, _log_softmax_backward_jvp),
    )
)


# ---- cummax, cummin: running extremes and where they were found -------------------------------

# torch.return_types.cummax / torch.return_types.cummin
CumMax = namedtuple("cummax", ["values", "indices"])
CumMin = namedtuple("cummin", ["values", "indices"])


def _running_extreme(xp, a, later_wins):
    """Values and indices of the running extreme along the last axis, torch's rule: position
    k takes a[k] when a[k] is NaN, or when neither is NaN and ``later_wins(a[k], best)`` (>= for
    cummax: a tie moves the index to the later element). Pairs of runs combine by that same
    rule, so the scan is a Hillis-Steele one: log2(n) rounds of elementwise ops, the same code
    on numpy and CuPy (CuPy has no maximum.accumulate)."""
    values = a
    indices = xp.broadcast_to(xp.arange(a.shape[-1]), a.shape)
    step = 1
    while step < a.shape[-1]:
        best, best_at = values[..., :-step], indices[..., :-step]
        new, new_at = values[..., step:], indices[..., step:]
        # NaN != NaN: the test holds for every dtype (numpy's isnan has no bfloat16 loop)
        take = (new != new) | ((best == best) & later_wins(new, best))
        values = xp.concatenate([values[..., :step], xp.where(take, new, best)], axis=-1)
        indices = xp.concatenate([indices[..., :step], xp.where(take, new_at, best_at)], axis=-1)
        step *= 2
    return values, indices


def _cumulative_extreme(name, later_wins):
    def kernel(xp, a, dim):
        d = M.wrap_dim(dim, a.ndim, name)
        if a.ndim == 0:
            return a.copy(), xp.zeros((), xp.int64)
        values, indices = _running_extreme(xp, xp.moveaxis(a, d, -1), later_wins)
        moved = (xp.moveaxis(values, -1, d), xp.moveaxis(indices, -1, d))
        return tuple(xp.ascontiguousarray(m) for m in moved)

    return kernel


def _cumulative_extreme_rule(name):
    """The gradient of each running extreme goes to the element it was found at (added up
    over the positions that found it there); its tangent is that element's."""

    def positions(x, dim):  # the indices output, recomputed (autograd keeps the values only)
        return OPS[name].fn(x.detach(), dim)[1]

    def vjp(ctx, grad):
        x, dim, g = ctx.inputs[0], ctx.params["dim"], grad[0]
        if x.dim() == 0:
            return (g,)
        return (zeros_like(x, dtype=g.dtype).scatter(dim, positions(x, dim), g, reduce="add"),)

    return {"vjp": vjp, "jvp": values_jvp}


for _name, _pair, _later_wins in (
    ("cummax", CumMax, lambda new, best: new >= best),
    ("cummin", CumMin, lambda new, best: new <= best),
):
    finished(
        _name,
        "input, dim",
        lambda result, _p=_pair, **_: _p(*result),
        kind="other",
        kernel=_cumulative_extreme(_name, _later_wins),
        shape=lambda input, dim, _n=_name: (_same_shape_dim(_n)(input, dim),) * 2,
        dtype=lambda d, p: (d, (d, D.int64)),
        multi=True,
        allow="bif",
        doc=f"{_name}(input, dim) -> (values, indices): the running "
        f"{_name[3:]}imum along dim and the index it was found at (the later one on a tie; "
        "NaN wins and stays)",
        **_cumulative_extreme_rule(_name),
    )
