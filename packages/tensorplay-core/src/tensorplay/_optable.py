"""The op table: every built-in op is one row, defined here and nowhere else.

A row names the public signature, the kernel (numpy and CuPy share it: ``xp``
is the array module), the meta rules (shape, dtype) and flags. ``_dispatch``
turns each row into ``tp.<name>``, ``Tensor.<name>``, ``Tensor.<name>_`` and
operators; tests are generated from the same rows (``tests/core``). The
``vjp``/``jvp`` columns belong to autograd.
"""

from __future__ import annotations

import functools
import math
from collections import namedtuple

import numpy as np

from tensorplay import _meta as M, _views as V
from tensorplay._dispatch import OpDef, register

ROWS: list[OpDef] = []


def op(name, params, **kw) -> OpDef:
    row = register(OpDef(name, params, **kw))
    ROWS.append(row)
    return row


def _pw_shape(name):
    return functools.partial(M.pointwise_shape, name)


def _int64():
    from tensorplay import _dtype  # noqa: PLC0415

    return _dtype.int64


def _bool():
    from tensorplay import _dtype  # noqa: PLC0415

    return _dtype.bool


def unary(name, kernel=None, *, ufunc=None, dtype=M.same, allow="bifc", **kw):
    """A pointwise op of one tensor (``tp.exp``)."""
    if kernel is None:
        uf = ufunc or name
        kernel = lambda xp, a: getattr(xp, uf)(a)  # noqa: E731
    kw.setdefault("inplace", True)
    return op(
        name,
        "input",
        kernel=kernel,
        shape=_pw_shape(name),
        ufunc=ufunc,
        dtype=dtype,
        allow=allow,
        out=True,
        **kw,
    )


def binary(
    name, kernel=None, *, ufunc=None, params="input, other", dtype=M.same, allow="bifc", **kw
):
    """A pointwise op of two broadcast tensors/scalars (``tp.add``)."""
    if kernel is None:
        uf = ufunc or name
        kernel = lambda xp, a, b: getattr(xp, uf)(a, b)  # noqa: E731
    kw.setdefault("inplace", True)
    kw.setdefault("shape", _pw_shape(name))
    return op(
        name,
        params,
        kernel=kernel,
        ufunc=ufunc,
        dtype=dtype,
        allow=allow,
        out=True,
        n_inputs=2,
        **kw,
    )


def _no_int_zero_division(xp, b, op_name):
    # the dispatcher prefixes "<op_name>(): " to kernel errors
    if b.dtype.kind in "iub" and bool((b == 0).any()):
        raise ZeroDivisionError("ZeroDivisionError: integer division by zero")


# ---- arithmetic --------------------------------------------------------------------------


def _add(xp, a, b, alpha=1):
    return xp.add(a, b) if alpha == 1 else a + b * alpha


def _sub(xp, a, b, alpha=1):
    return xp.subtract(a, b) if alpha == 1 else a - b * alpha


def _div(xp, a, b, rounding_mode=None):
    if rounding_mode is None:
        return xp.true_divide(a, b)
    if a.dtype.kind in "iub":
        _no_int_zero_division(xp, b, "div")
        if rounding_mode == "floor":
            return xp.floor_divide(a, b)
        q = xp.floor_divide(xp.abs(a), xp.abs(b))
        return xp.where((a < 0) != (b < 0), -q, q)
    if rounding_mode == "trunc":
        return xp.trunc(a / b)
    if rounding_mode == "floor":
        return xp.floor_divide(a, b)
    raise ValueError(
        f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
        f"'{rounding_mode}'"
    )


def _div_dtype(d, params):
    if params.get("rounding_mode") is None:
        return M.to_float(d, params)
    if d.is_complex:  # torch: "div_trunc_cpu" / "div_floor_cpu" not implemented for complex
        raise RuntimeError(
            f"div(): rounding_mode={params['rounding_mode']!r} is not supported "
            f"for complex inputs ({d})"
        )
    return M.same(d, params)


def _floor_divide(xp, a, b):
    _no_int_zero_division(xp, b, "floor_divide")
    return xp.floor_divide(a, b)


def _remainder(xp, a, b):
    _no_int_zero_division(xp, b, "remainder")
    return xp.remainder(a, b)


def _pow(xp, a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and bool((b < 0).any()):
        raise ValueError("Integers to negative integer powers are not allowed.")
    return xp.power(a, b)


binary(
    "add",
    _add,
    params="input, other, *, alpha=1",
    ufunc="add",
    dunders=("__add__", "__radd__", "__iadd__"),
)


def _no_bool_operand(name, what):
    def shape(*args, **params):
        # torch refuses bool operands even where promotion would make them int (True - 1)
        if any(isinstance(x, bool) or getattr(x, "dtype", None) is _bool() for x in args):
            raise RuntimeError(
                f"{name}(): {what} with a bool tensor is not supported; use "
                "logical_xor() / bitwise_not() instead"
            )
        return M.pointwise_shape(name, *args)

    return shape


def _pow_shape(input, exponent):
    # torch has no bool ** bool kernel for two tensors (a Python bool exponent is fine)
    if getattr(input, "dtype", None) is _bool() and getattr(exponent, "dtype", None) is _bool():
        raise RuntimeError('pow(): "pow" not implemented for two Bool tensors')
    return M.pointwise_shape("pow", input, exponent)


def _square_dtype(d, params):
    # torch computes square(bool) as pow(bool, 2): int64
    return (_int64(), _int64()) if d is _bool() else M.same(d, params)


binary(
    "sub",
    _sub,
    params="input, other, *, alpha=1",
    ufunc="subtract",
    allow="ifc",
    shape=_no_bool_operand("sub", "Subtraction, the `-` operator,"),
    dunders=("__sub__", "__rsub__", "__isub__"),
)
binary("mul", ufunc="multiply", dunders=("__mul__", "__rmul__", "__imul__"))
binary(
    "div",
    _div,
    params="input, other, *, rounding_mode=None",
    ufunc="true_divide",
    dtype=_div_dtype,
    dunders=("__truediv__", "__rtruediv__", "__itruediv__"),
)
binary(
    "floor_divide",
    _floor_divide,
    allow="if",
    dunders=("__floordiv__", "__rfloordiv__", "__ifloordiv__"),
)
binary("remainder", _remainder, allow="if", dunders=("__mod__", "__rmod__", "__imod__"))
binary(
    "pow",
    _pow,
    params="input, exponent",
    shape=_pow_shape,
    dunders=("__pow__", "__rpow__", "__ipow__"),
)
binary("atan2", ufunc="arctan2", dtype=M.to_float, allow="bif")
binary("minimum", ufunc="minimum", allow="bif")
binary("maximum", ufunc="maximum", allow="bif")
unary("neg", ufunc="negative", allow="ifc", dunders=("__neg__",))
unary("abs", ufunc="absolute", dtype=M.to_real, allow="ifc", dunders=("__abs__",))
unary("sign", lambda xp, a: xp.sign(a) if a.dtype.kind != "b" else a, allow="bif")
unary("reciprocal", lambda xp, a: xp.reciprocal(a), dtype=M.to_float)
unary("sqrt", ufunc="sqrt", dtype=M.to_float)
unary("rsqrt", lambda xp, a: 1 / xp.sqrt(a), dtype=M.to_float)
unary("square", ufunc="square", dtype=_square_dtype)

# ---- transcendental -----------------------------------------------------------------------
for _name, _uf in [
    ("exp", "exp"),
    ("exp2", "exp2"),
    ("expm1", "expm1"),
    ("log", "log"),
    ("log2", "log2"),
    ("log10", "log10"),
    ("log1p", "log1p"),
    ("sin", "sin"),
    ("cos", "cos"),
    ("tan", "tan"),
    ("asin", "arcsin"),
    ("acos", "arccos"),
    ("atan", "arctan"),
    ("sinh", "sinh"),
    ("cosh", "cosh"),
    ("tanh", "tanh"),
]:
    unary(_name, ufunc=_uf, dtype=M.to_float)


def _erf(xp, a):
    if xp.__name__ == "numpy":
        from math import erf  # noqa: PLC0415 - numpy has no erf ufunc; vectorise the stdlib one

        import numpy as np  # noqa: PLC0415

        # np.asarray: frompyfunc returns a bare Python float for 0-d input
        return np.asarray(_np_vectorize(erf)(a)).astype(a.dtype)
    import cupyx.scipy.special as sp  # noqa: PLC0415

    return sp.erf(a)


@functools.cache
def _np_vectorize(f):
    import numpy as np  # noqa: PLC0415

    return np.frompyfunc(f, 1, 1)


def _sigmoid(xp, a):
    # exp(-logaddexp(0, -x)) never overflows, unlike 1 / (1 + exp(-x)).
    return xp.exp(-xp.logaddexp(0, -a)) if a.dtype.kind != "c" else 1 / (1 + xp.exp(-a))


unary("sigmoid", _sigmoid, dtype=M.to_float)
unary("erf", _erf, dtype=M.to_float, allow="bif")

# ---- activations ---------------------------------------------------------------------------


def _gelu(xp, a, approximate="none"):
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        return 0.5 * a * (1 + xp.tanh(c * (a + 0.044715 * a * a * a)))
    if approximate != "none":
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return 0.5 * a * (1 + _erf(xp, a / math.sqrt(2)))


def _softplus(xp, a, beta=1.0, threshold=20.0):
    z = a * beta
    return xp.where(z > threshold, a, xp.logaddexp(0, z) / beta)


def _leaky_relu(xp, a, negative_slope=0.01):
    return xp.where(a > 0, a, a * negative_slope)


unary("relu", lambda xp, a: xp.maximum(a, 0).astype(a.dtype), allow="if")
op(
    "gelu",
    "input, approximate='none'",
    kernel=_gelu,
    shape=_pw_shape("gelu"),
    dtype=functools.partial(M.float_only, op="gelu"),
    allow="f",
)
unary("silu", lambda xp, a: a * _sigmoid(xp, a), dtype=M.to_float, allow="fc")
op(
    "softplus",
    "input, beta=1.0, threshold=20.0",
    kernel=_softplus,
    shape=_pw_shape("softplus"),
    dtype=functools.partial(M.float_only, op="softplus"),
    allow="f",
)
op(
    "leaky_relu",
    "input, negative_slope=0.01",
    kernel=_leaky_relu,
    shape=_pw_shape("leaky_relu"),
    dtype=functools.partial(M.float_only, op="leaky_relu"),
    allow="f",
    inplace=True,
)

# ---- clamp / where / rounding / predicates ------------------------------------------------


def _clamp(xp, a, lo=None, hi=None):
    if lo is not None:
        a = xp.maximum(a, lo)
    if hi is not None:
        a = xp.minimum(a, hi)
    return a


def _clamp_shape(input, min=None, max=None):  # noqa: A002 - torch names
    if min is None and max is None:
        raise RuntimeError("clamp(): At least one of 'min' or 'max' must not be None")
    return M.pointwise_shape("clamp", input, min, max)


op(
    "clamp",
    "input, min=None, max=None",
    n_inputs=3,
    kernel=_clamp,
    shape=_clamp_shape,
    allow="bif",
    out=True,
    inplace=True,
)
op(
    "where",
    "condition, input, other",
    n_inputs=3,
    cast=(1, 2),
    shape=_pw_shape("where"),
    kernel=lambda xp, c, a, b: xp.where(c.astype(bool), a, b),
    method=False,
    out=True,
)
for _name, _uf in [("floor", "floor"), ("ceil", "ceil"), ("trunc", "trunc")]:
    unary(
        _name, lambda xp, a, _uf=_uf: getattr(xp, _uf)(a) if a.dtype.kind == "f" else a, allow="if"
    )


def _round(xp, a, decimals=0):
    return xp.round(a, decimals) if a.dtype.kind in "fc" else a


op(
    "round",
    "input, *, decimals=0",
    kernel=_round,
    shape=_pw_shape("round"),
    allow="if",
    out=True,
    inplace=True,
)
unary("isnan", ufunc="isnan", dtype=M.to_bool, inplace=False)
unary("isinf", ufunc="isinf", dtype=M.to_bool, inplace=False)
unary("isfinite", ufunc="isfinite", dtype=M.to_bool, inplace=False)

# ---- comparisons and logic ----------------------------------------------------------------
for _name, _uf, _dn in [
    ("eq", "equal", "__eq__"),
    ("ne", "not_equal", "__ne__"),
    ("lt", "less", "__lt__"),
    ("le", "less_equal", "__le__"),
    ("gt", "greater", "__gt__"),
    ("ge", "greater_equal", "__ge__"),
]:
    binary(
        _name,
        ufunc=_uf,
        dtype=M.to_bool,
        allow="bifc" if _name in ("eq", "ne") else "bif",
        dunders=(_dn,),
        inplace=False,
    )


def _truth(a):
    # CuPy's logical ufuncs have no complex loops; "nonzero" is what they mean anyway.
    return a != 0 if a.dtype.kind == "c" else a


for _name in ("logical_and", "logical_or", "logical_xor"):
    binary(
        _name,
        lambda xp, a, b, _n=_name: getattr(xp, _n)(_truth(a), _truth(b)),
        ufunc=_name,
        dtype=M.to_bool,
        inplace=False,
    )
unary(
    "logical_not",
    lambda xp, a: xp.logical_not(_truth(a)),
    ufunc="logical_not",
    dtype=M.to_bool,
    inplace=False,
)
for _name, _uf, _dn in [
    ("bitwise_and", "bitwise_and", ("__and__", "__rand__", "__iand__")),
    ("bitwise_or", "bitwise_or", ("__or__", "__ror__", "__ior__")),
    ("bitwise_xor", "bitwise_xor", ("__xor__", "__rxor__", "__ixor__")),
]:
    binary(_name, ufunc=_uf, allow="bi", dunders=_dn)
unary("bitwise_not", ufunc="invert", allow="bi", dunders=("__invert__",))


def _isclose(xp, a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return xp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


op(
    "isclose",
    "input, other, rtol=1e-05, atol=1e-08, equal_nan=False",
    n_inputs=2,
    kernel=_isclose,
    shape=_pw_shape("isclose"),
    dtype=M.to_bool,
    promote="same",
)

# ---- reductions ----------------------------------------------------------------------------


def _reduce_shape(name):
    def shape(input, dim=None, keepdim=False, **_):
        axes = M.reduce_dims(dim, input.dim(), name)
        return M.reduced_shape(input._shape, axes, keepdim)

    return shape


def _axes(a, dim, op_name):
    if dim is None:
        return None
    axes = M.reduce_dims(dim, a.ndim, op_name)
    # a 0-d tensor accepts dim 0/-1 (torch) but a 0-d array has no axis 0: reduce it whole
    return axes if a.ndim else None


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
    return xp.sum(a, axis=_axes(a, dim, "sum"), keepdims=keepdim)


def _count(a, axes) -> int:
    return math.prod(a.shape[i] for i in (axes if axes is not None else range(a.ndim)))


def _mean(xp, a, dim=None, keepdim=False, dtype=None):
    # sum / count: the mean of nothing is nan, silently, as in torch (xp.mean warns)
    axes = _axes(a, dim, "mean")
    return xp.sum(a, axis=axes, keepdims=keepdim) / _count(a, axes)


def _prod(xp, a, dim=None, keepdim=False, dtype=None):
    return xp.prod(a, axis=_axes(a, dim, "prod"), keepdims=keepdim)


def _nonempty(a, name, dim):
    if a.size == 0 and (dim is None or a.shape[dim % a.ndim] == 0):
        raise IndexError(
            f"{name}(): Expected reduction dim to be specified for "
            "input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )


def _amax(xp, a, dim=None, keepdim=False):
    _nonempty(a, "amax", None if dim is None or not isinstance(dim, int) else dim)
    return xp.amax(a, axis=_axes(a, dim, "amax"), keepdims=keepdim)


def _amin(xp, a, dim=None, keepdim=False):
    _nonempty(a, "amin", None if dim is None or not isinstance(dim, int) else dim)
    return xp.amin(a, axis=_axes(a, dim, "amin"), keepdims=keepdim)


def _arg(fn_name):
    def kernel(xp, a, dim=None, keepdim=False):
        _nonempty(a, fn_name, dim)
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
            return (1,) * input.dim() if keepdim else ()
        return M.reduced_shape(input._shape, (M.wrap_dim(dim, input.dim(), name),), keepdim)

    return shape


def _var(xp, a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    # Written out rather than xp.var: torch divides by max(N - correction, 0) (so too large
    # a correction gives inf, where CuPy gives nan) and never warns.
    ddof = correction if correction is not None else (0 if unbiased is False else 1)
    axes = _axes(a, dim, "var")
    n = _count(a, axes)
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


reduction(
    "sum", _sum, params="input, dim=None, keepdim=False, *, dtype=None", dtype=M.sum_like, out=True
)
reduction(
    "mean",
    _mean,
    params="input, dim=None, keepdim=False, *, dtype=None",
    dtype=functools.partial(M.float_only, op="mean"),
    out=True,
)
reduction(
    "prod",
    _prod,
    params="input, dim=None, keepdim=False, *, dtype=None",
    dtype=M.sum_like,
    out=True,
)
reduction("amax", _amax, allow="bif", out=True)
reduction("amin", _amin, allow="bif", out=True)
reduction("argmax", _arg("argmax"), dtype=M.to_int64, allow="if", shape=_arg_shape("argmax"))
reduction("argmin", _arg("argmin"), dtype=M.to_int64, allow="if", shape=_arg_shape("argmin"))
reduction(
    "var",
    _var,
    params="input, dim=None, unbiased=None, keepdim=False, *, correction=None",
    dtype=functools.partial(M.real_float_only, op="var"),
    allow="fc",
    out=True,
)
reduction(
    "std",
    _std,
    params="input, dim=None, unbiased=None, keepdim=False, *, correction=None",
    dtype=functools.partial(M.real_float_only, op="std"),
    allow="fc",
    out=True,
)
reduction(
    "norm",
    _norm,
    params="input, p='fro', dim=None, keepdim=False, dtype=None",
    dtype=functools.partial(M.real_float_only, op="norm"),
    allow="fc",
)
reduction("logsumexp", _logsumexp, params="input, dim, keepdim=False", dtype=M.to_float, out=True)
reduction(
    "all",
    lambda xp, a, dim=None, keepdim=False: xp.all(a, axis=_axes(a, dim, "all"), keepdims=keepdim),
    dtype=_all_dtype,
)
reduction(
    "any",
    lambda xp, a, dim=None, keepdim=False: xp.any(a, axis=_axes(a, dim, "any"), keepdims=keepdim),
    dtype=_all_dtype,
)

MinMax = namedtuple("MinMax", ["values", "indices"])


def _minmax_dim(fn):
    def kernel(xp, a, dim, keepdim=False):
        d = M.wrap_dim(dim, a.ndim, fn)
        _nonempty(a, fn, d if a.ndim else None)
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
        s = M.reduced_shape(input._shape, (M.wrap_dim(dim, input.dim(), name),), keepdim)
        return (s, s)

    return shape


for _fn in ("max", "min"):
    op(
        f"{_fn}_dim",
        "input, dim, keepdim=False",
        kind="reduction",
        kernel=_minmax_dim(_fn),
        shape=_minmax_dim_shape(_fn),
        dtype=lambda d, p: (d, (d, _int64())),
        multi=True,
        allow="bif",
        method=False,
    )

# ---- scans, softmax ----------------------------------------------------------------------


def _scan(fn):
    def kernel(xp, a, dim, *, dtype=None):
        d = M.wrap_dim(dim, a.ndim, fn)
        return getattr(xp, fn)(a, axis=d) if a.ndim else a.copy()

    return kernel


def _same_shape(input, *args, **kwargs):
    return input._shape


def _same_shape_dim(name):
    def shape(input, dim, *args, **kwargs):
        # IndexError here (also on meta), not a kernel error wrapped as RuntimeError
        M.wrap_dim(dim, input.dim(), name)
        return input._shape

    return shape


op(
    "cumsum",
    "input, dim, *, dtype=None",
    kernel=_scan("cumsum"),
    shape=_same_shape_dim("cumsum"),
    dtype=M.sum_like,
    out=True,
)
op(
    "cumprod",
    "input, dim, *, dtype=None",
    kernel=_scan("cumprod"),
    shape=_same_shape_dim("cumprod"),
    dtype=M.sum_like,
    out=True,
)


def _softmax(xp, a, dim, dtype=None):
    d = M.wrap_dim(dim, a.ndim, "softmax")
    if a.ndim == 0:
        return xp.ones_like(a)
    e = xp.exp(a - xp.amax(a, axis=d, keepdims=True)) if a.size else a
    return e / xp.sum(e, axis=d, keepdims=True) if a.size else a


def _log_softmax(xp, a, dim, dtype=None):
    d = M.wrap_dim(dim, a.ndim, "log_softmax")
    if a.ndim == 0:
        return xp.zeros_like(a)
    return a - _logsumexp(xp, a, d, keepdim=True) if a.size else a


op(
    "softmax",
    "input, dim, dtype=None",
    kernel=_softmax,
    shape=_same_shape_dim("softmax"),
    dtype=M.softmax_like,
    allow="f",
)
op(
    "log_softmax",
    "input, dim, dtype=None",
    kernel=_log_softmax,
    shape=_same_shape_dim("log_softmax"),
    dtype=M.softmax_like,
    allow="f",
)

# ---- linear algebra ----------------------------------------------------------------------


def _matmul_shape(input, other):
    a, b = input._shape, other._shape
    if not a or not b:
        raise RuntimeError(
            f"matmul(): both arguments to matmul need to be at least 1D, but they "
            f"are {len(a)}D and {len(b)}D"
        )
    ka = a[-1]
    kb = b[0] if len(b) == 1 else b[-2]
    if ka != kb:
        raise RuntimeError(
            f"matmul(): mat1 and mat2 shapes cannot be multiplied ({_fmt2(a)} and {_fmt2(b)})"
        )
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return b[:-2] + b[-1:]
    batch = M.broadcast_shapes(a[:-2], b[:-2], op="matmul")
    return batch + (a[-2], b[-1])


def _fmt2(s):
    return f"{math.prod(s[:-1]) if len(s) > 1 else 1}x{s[-1]}"


def _mm_shape(name, ndim):
    def shape(input, other):
        if input.dim() != ndim or other.dim() != ndim:
            raise RuntimeError(
                f"{name}(): expected {ndim}D tensors, got {input.dim()}D and {other.dim()}D"
            )
        if ndim == 3 and input._shape[0] != other._shape[0]:
            raise RuntimeError(f"bmm(): batch sizes differ: {input._shape[0]} vs {other._shape[0]}")
        return _matmul_shape(input, other)

    return shape


def _dot_shape(input, other):
    if input.dim() != 1 or other.dim() != 1:
        raise RuntimeError(
            f"dot(): 1D tensors expected, but got {input.dim()}D and {other.dim()}D tensors"
        )
    if input._shape != other._shape:
        raise RuntimeError(
            f"dot(): inconsistent tensor size, expected tensor [{input._shape[0]}] "
            f"and src [{other._shape[0]}] to have the same number of elements"
        )
    return ()


_mm = dict(n_inputs=2, promote="same", allow="ifc", out=True)
op(
    "matmul",
    "input, other",
    kernel=lambda xp, a, b: xp.matmul(a, b),
    shape=_matmul_shape,
    dunders=("__matmul__", "__rmatmul__"),
    **_mm,
)
op("mm", "input, mat2", kernel=lambda xp, a, b: xp.matmul(a, b), shape=_mm_shape("mm", 2), **_mm)
op("bmm", "input, mat2", kernel=lambda xp, a, b: xp.matmul(a, b), shape=_mm_shape("bmm", 3), **_mm)
op("dot", "input, other", kernel=lambda xp, a, b: xp.dot(a, b), shape=_dot_shape, **_mm)


def _outer_shape(input, vec2):
    if input.dim() != 1 or vec2.dim() != 1:
        raise RuntimeError(f"outer(): expected 1D vectors, got {input.dim()}D and {vec2.dim()}D")
    return input._shape + vec2._shape


op(
    "outer",
    "input, vec2",
    n_inputs=2,
    kernel=lambda xp, a, b: xp.multiply.outer(a, b),
    shape=_outer_shape,
    out=True,
)


def _einsum_shape(*operands, equation):
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): equation must be a string, got {type(equation).__name__}")
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise RuntimeError(
            f"einsum(): {len(terms)} operands in the equation but {len(operands)} were given"
        )
    sizes: dict = {}
    for term, t in zip(terms, operands):
        letters = term.replace("...", "")
        if "..." not in term and len(letters) != t.dim():
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation "
                f"({len(letters)}) does not match the number of dimensions "
                f"({t.dim()}) for operand {operands.index(t)}"
            )
        for ch, n in zip(letters, t._shape[-len(letters) :] if letters else ()):
            if sizes.setdefault(ch, n) != n and 1 not in (n, sizes[ch]):
                raise RuntimeError(
                    f"einsum(): operands do not broadcast for subscript {ch!r} ({sizes[ch]} vs {n})"
                )
            sizes[ch] = max(sizes[ch], n)
    if "..." in equation:
        return None  # computed by the kernel (rare; meta tensors reject it)
    if not arrow:
        rhs = "".join(sorted(c for c in sizes if lhs.count(c) == 1))
    return tuple(sizes[c] for c in rhs)


def _einsum_kernel(xp, *arrays, equation):
    return xp.einsum(equation, *arrays)


op(
    "einsum",
    "equation, *operands",
    n_inputs="star",
    kernel=_einsum_kernel,
    shape=_einsum_shape,
    promote="same",
    method=False,
)

# ---- joining and indexing ------------------------------------------------------------------


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
    arrays = [a for a in arrays if a.shape != (0,)] or arrays[:1]
    return xp.concatenate(arrays, axis=M.wrap_dim(dim, arrays[0].ndim, "cat"))


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


op("cat", "tensors, dim=0", n_inputs="seq", kernel=_cat, shape=_cat_shape, method=False, out=True)
op(
    "stack",
    "tensors, dim=0",
    n_inputs="seq",
    kernel=_stack,
    shape=_stack_shape,
    method=False,
    out=True,
)


def _check_index(name, index, arg="index"):
    from tensorplay import _dtype  # noqa: PLC0415

    if index.dtype is not _dtype.int64:
        raise RuntimeError(f"{name}(): Expected dtype int64 for {arg}, got {index.dtype}")


def _bounds(xp, idx, n, name, d):
    if idx.size and (bool((idx >= n).any()) or bool((idx < -n).any())):
        bad = int(idx[(idx >= n) | (idx < -n)].reshape(-1)[0])
        raise IndexError(f"{name}(): index {bad} is out of bounds for dimension {d} with size {n}")


def _gather_shape(input, dim, index):
    _check_index("gather", index)
    d = M.wrap_dim(dim, input.dim(), "gather")
    if index.dim() != input.dim():
        raise RuntimeError(
            "gather(): Index tensor must have the same number of dimensions as input tensor"
        )
    for i, (m, n) in enumerate(zip(index._shape, input._shape)):
        if i != d and m > n:
            raise RuntimeError(
                f"gather(): Size does not match at dimension {i} expected index "
                f"{list(index._shape)} to be smaller than self "
                f"{list(input._shape)} apart from dimension {d}"
            )
    return index._shape


def _gather(xp, a, dim, idx):
    d = M.wrap_dim(dim, a.ndim, "gather")
    _bounds(xp, idx, a.shape[d] if a.ndim else 1, "gather", d)
    if a.ndim == 0:
        return a.copy()
    src = a[tuple(slice(0, n) if i != d else slice(None) for i, n in enumerate(idx.shape))]
    return xp.take_along_axis(src, idx, axis=d)


op(
    "gather",
    "input, dim, index",
    n_inputs=3,
    cast=(0,),
    kernel=_gather,
    shape=_gather_shape,
    promote="first",
    out=True,
)


def _scatter_shape(input, dim, index, src=None, *, value=None, reduce=None):
    _check_index("scatter", index)
    M.wrap_dim(dim, input.dim(), "scatter")
    if src is None and value is None:
        raise TypeError("scatter(): provide src (a Tensor) or value (a number)")
    return input._shape


def _scatter(xp, a, dim, idx, src=None, *, value=None, reduce=None):
    d = M.wrap_dim(dim, a.ndim, "scatter")
    _bounds(xp, idx, a.shape[d] if a.ndim else 1, "scatter", d)
    out = a.copy()
    if a.ndim == 0:
        return out
    # an open grid (CuPy's indices() has no sparse=): index i varies along axis i only
    grid = [
        xp.arange(n).reshape((-1,) + (1,) * (idx.ndim - 1 - i)) for i, n in enumerate(idx.shape)
    ]
    grid[d] = idx
    vals = value if src is None else src[tuple(slice(0, n) for n in idx.shape)]
    if reduce is None:
        out[tuple(grid)] = vals
        return out
    if reduce not in ("add", "multiply"):
        raise ValueError(f"reduce argument must be either add or multiply, got {reduce!r}")
    accumulate = np.add.at if reduce == "add" else np.multiply.at
    if xp is np:
        accumulate(out, tuple(grid), vals)
        return out
    # CuPy's ufunc.at knows add on a few dtypes only and no multiply: accumulate on the host
    host = out.get()
    accumulate(host, tuple(g.get() for g in grid), vals.get() if hasattr(vals, "get") else vals)
    return xp.asarray(host)


op(
    "scatter",
    "input, dim, index, src=None, *, value=None, reduce=None",
    n_inputs=4,
    cast=(0, 3),
    kernel=_scatter,
    shape=_scatter_shape,
    promote="first",
    inplace=True,
)


def _index_select_shape(input, dim, index):
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype.category != 1:
        raise RuntimeError(
            f"index_select(): Expected dtype int32/int64 for index, got {index.dtype}"
        )
    d = M.wrap_dim(dim, input.dim(), "index_select")
    n = index.numel()
    return input._shape[:d] + (n,) + input._shape[d + 1 :] if input._shape else ()


def _index_select(xp, a, dim, idx):
    d = M.wrap_dim(dim, a.ndim, "index_select")
    if a.ndim == 0:
        return a.copy()
    _bounds(xp, idx, a.shape[d], "index_select", d)
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
)


def _masked_fill_shape(input, mask, value):
    from tensorplay import _dtype  # noqa: PLC0415

    if mask.dtype is not _dtype.bool:
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
    shape=_masked_fill_shape,
    inplace=True,
)

# ---- copies ---------------------------------------------------------------------------------

op(
    "clone",
    "input, *, memory_format=None",
    kernel=lambda xp, a, memory_format=None: a.copy(),
    shape=_same_shape,
    promote="first",
)
op(
    "contiguous_copy",
    "input",
    kernel=lambda xp, a: a.copy(order="C"),
    shape=_same_shape,
    promote="first",
    method=False,
)

# ---- views ------------------------------------------------------------------------------------


def view_op(name, params, geometry, **kw):
    return op(name, params, kind="view", shape=geometry, promote="first", **kw)


view_op("view", "input, *shape", V.view)
view_op("reshape", "input, *shape", V.reshape)
view_op("permute", "input, *dims", V.permute)
view_op("transpose", "input, dim0, dim1", V.transpose)
view_op("t", "input", V.t_)
view_op("expand", "input, *sizes", V.expand)
view_op("expand_as", "input, other", V.expand_as, n_inputs=1)
view_op("squeeze", "input, dim=None", V.squeeze)
view_op("unsqueeze", "input, dim", V.unsqueeze)
view_op("flatten", "input, start_dim=0, end_dim=-1", V.flatten)
view_op("unflatten", "input, dim, sizes", V.unflatten)
view_op("narrow", "input, dim, start, length", V.narrow)
view_op("select", "input, dim, index", V.select)
view_op("as_strided", "input, size, stride, storage_offset=None", V.as_strided)
view_op("movedim", "input, source, destination", V.movedim)
view_op("diagonal", "input, offset=0, dim1=0, dim2=1", V.diagonal)
view_op("unbind", "input, dim=0", V.unbind, multi=True)
view_op("split", "input, split_size_or_sections, dim=0", V.split, multi=True)
view_op("chunk", "input, chunks, dim=0", V.chunk, multi=True)
