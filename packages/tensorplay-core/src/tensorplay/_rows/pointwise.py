"""Pointwise rows: arithmetic, transcendental functions, activations, clamp / where /
rounding, predicates, comparisons and logic (``tp.add``, ``tp.exp``, ``tp.relu``, ``tp.eq``).

``unary`` and ``binary`` build the common row: a numpy/CuPy ufunc of one tensor, or of two
broadcast tensors/numbers. Derivatives are mostly partials (``pointwise_rule``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator

import numpy as np

from tensorplay import _dtype as D, _meta as M
from tensorplay._dispatch import OpDef, call, state
from tensorplay._native import NATIVE
from tensorplay._rows import row_maker
from tensorplay._tensor import Tensor
from tensorplay.autograd._derivatives import (
    ZERO_RULE,
    bilinear_jvp,
    conj,
    full_like,
    linear_pair_rule,
    pointwise_rule,
    real_jvp,
    same_op_jvp,
    sgn,
    where,
)
from tensorplay.overrides import handle_tensorplay_function, has_tensorplay_function

ROWS: list[OpDef] = []
op = row_maker(ROWS)


def _pw_shape(name):
    return functools.partial(M.pointwise_shape, name)


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


def times_scalar(b, value):
    """``b * value``, ``value`` (add's alpha, addcmul's value) converted to b's dtype first,
    as torch converts it: uint8 takes -1 as 255 (wrapping, as the result does), bool takes
    any nonzero value as True, an integer dtype truncates 2.7 to 2."""
    return b * D.scalar_array(value, D.from_numpy_dtype(b.dtype))[()]


def _add(xp, a, b, alpha=1):
    return xp.add(a, b) if alpha == 1 else a + times_scalar(b, alpha)


def _sub(xp, a, b, alpha=1):
    return xp.subtract(a, b) if alpha == 1 else a - times_scalar(b, alpha)


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
    if d.is_complex or d is D.bool:  # torch: "div_floor_cpu" not implemented for complex/bool
        raise RuntimeError(
            f"div(): rounding_mode={params['rounding_mode']!r} is not supported "
            f"for {d.name} inputs; convert them to a real floating dtype first"
        )
    return M.same(d, params)


def _floor_divide(xp, a, b):
    _no_int_zero_division(xp, b, "floor_divide")
    return xp.floor_divide(a, b)


def _remainder(xp, a, b):
    _no_int_zero_division(xp, b, "remainder")
    return xp.remainder(a, b)


def _pow(xp, a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        negative = b < 0
        if bool(negative.any()):
            # torch's integer pow for a negative exponent tensor: 1 ** b is 1, (-1) ** b is
            # +-1, and every other base truncates 1 / base ** -b to 0 (0 ** -1 included)
            p = xp.power(a, xp.where(negative, 0, b))
            odd = (b % 2) != 0
            below = xp.where(a == 1, 1, xp.where(a == -1, xp.where(odd, -1, 1), 0))
            return xp.where(negative, below.astype(p.dtype), p)
    return xp.power(a, b)


def _alpha_dtype(d, params):
    """add/sub: ``alpha`` must suit the result dtype, as torch checks it (a float alpha would
    otherwise be truncated into an integer result), and fit it by torch's checked conversion
    (float16 refuses alpha=65519; uint8 takes -255..255, wrapped)."""
    alpha = params.get("alpha", 1)
    if isinstance(alpha, bool) and d is not D.bool:
        raise RuntimeError(f"alpha={alpha} (a bool) is only supported for bool results, not {d}")
    if d.category <= 1 and not isinstance(alpha, int):
        raise RuntimeError(
            f"alpha={alpha!r} must be an integer for integer or bool inputs ({d}); "
            "convert the inputs to a floating dtype first"
        )
    if not d.is_complex and isinstance(alpha, complex):
        raise RuntimeError(f"alpha={alpha!r} must not be complex for {d} inputs")
    D.check_fits("alpha", alpha, d)
    return M.same(d, params)


binary(
    "add",
    _add,
    params="input, other, *, alpha=1",
    ufunc="add",
    cuda="a + b",
    dtype=_alpha_dtype,
    dunders=("__add__", "__radd__", "__iadd__"),
    scalar_opmath=(0, 1),  # ``2.5 + x`` is add(x, 2.5) in torch
    **linear_pair_rule(1),
)


def _no_bool_operand(name, what):
    def shape(*args, **params):
        # torch refuses bool operands even where promotion would make them int (True - 1)
        if any(isinstance(x, bool) or getattr(x, "dtype", None) is D.bool for x in args):
            raise RuntimeError(
                f"{name}(): {what} with a bool tensor is not supported; use "
                "logical_xor() / bitwise_not() instead"
            )
        return M.pointwise_shape(name, *args)

    return shape


def _pow_shape(input, exponent):
    # torch has no bool ** bool kernel for a bool exponent tensor (a Python bool exponent is fine)
    base_bool = isinstance(input, bool) or getattr(input, "dtype", None) is D.bool
    if base_bool and getattr(exponent, "dtype", None) is D.bool:
        raise RuntimeError('pow(): "pow" not implemented for a bool base and bool exponent tensor')
    # a negative Python int exponent of an integer tensor is refused (torch), while a
    # negative exponent *tensor* is computed (the kernel's integer rule)
    if (
        type(exponent) is int
        and exponent < 0
        and isinstance(input, Tensor)
        and input.dtype.category <= 1
    ):
        raise RuntimeError(
            "pow(): Integers to negative integer powers are not allowed; use a float "
            "input (x.double() ** -1) for a fractional result"
        )
    return M.pointwise_shape("pow", input, exponent)


def _square_dtype(d, params):
    # torch computes square(bool) as pow(bool, 2): int64
    return (D.int64, D.int64) if d is D.bool else M.same(d, params)


binary(
    "sub",
    _sub,
    params="input, other, *, alpha=1",
    ufunc="subtract",
    cuda="a - b",
    dtype=_alpha_dtype,
    allow="ifc",
    scalar_opmath=(1,),  # not ``2.5 - x``: torch's rsub rounds 2.5 to x's dtype first
    shape=_no_bool_operand("sub", "Subtraction, the `-` operator,"),
    dunders=("__sub__", "__rsub__", "__isub__"),
    **linear_pair_rule(-1),
)
binary(
    "mul",
    ufunc="multiply",
    cuda="a * b",
    dunders=("__mul__", "__rmul__", "__imul__"),
    scalar_opmath=(0, 1),
    vjp=pointwise_rule(lambda a, b: b, lambda a, b: a)["vjp"],
    jvp=bilinear_jvp("mul"),
)


def _reciprocal(b):
    # a Python 0 divisor: x / 0 is inf (a tensor op), and so is its derivative
    if isinstance(b, Tensor):
        return 1 / b
    return 1 / b if b != 0 else math.inf


binary(
    "div",
    _div,
    params="input, other, *, rounding_mode=None",
    ufunc="true_divide",
    cuda="a / b",
    dtype=_div_dtype,
    scalar_opmath=(1,),
    dunders=("__truediv__", "__rtruediv__", "__itruediv__"),
    # rounded quotients are piecewise constant: zero gradient (torch)
    **pointwise_rule(
        lambda a, b, rounding_mode=None: 0 if rounding_mode else _reciprocal(b),
        lambda a, b, out, rounding_mode=None: 0 if rounding_mode else -out / b,
    ),
)
binary(
    "floor_divide",
    _floor_divide,
    allow="if",
    dunders=("__floordiv__", "__rfloordiv__", "__ifloordiv__"),
    scalar_opmath=(1,),
    **ZERO_RULE,
)
binary(
    "remainder",
    _remainder,
    allow="if",
    dunders=("__mod__", "__rmod__", "__imod__"),
    # a - b * floor(a / b): the floor is piecewise constant
    **pointwise_rule(lambda a, b: 1, lambda a, b: -(a // b)),
)


def _pow_dbase(a, b):
    # b * a**(b-1), but 0 where b == 0: x**0 is constant, even at x == 0 where 0 * 0**-1 = nan
    if not isinstance(b, Tensor):
        if b == 2:  # (squares are common: one op, a**1 is a)
            return a * 2
        return 0 if b == 0 else b * a ** (b - 1)
    return where(b == 0, 0.0, b * a ** (b - 1))


def _pow_dexp(a, b, out):
    # out * log(a), but 0 where a == 0 and b >= 0 (0**b is constant there; log(0) = -inf);
    # complex exponents have no order: there only a == 0 counts
    log_a = a.log() if isinstance(a, Tensor) else full_like(out, a).log()
    constant = (a == 0) if b.dtype.is_complex else (b >= 0) & (a == 0)
    return where(constant, 0.0, out * log_a)


binary(
    "pow",
    _pow,
    params="input, exponent",
    shape=_pow_shape,
    scalar_check="ih",  # torch takes a float32/float64/complex exponent at double precision
    dunders=("__pow__", "__rpow__", "__ipow__"),
    **pointwise_rule(_pow_dbase, _pow_dexp),
)
binary(
    "atan2",
    ufunc="arctan2",
    dtype=M.to_float,
    allow="bif",
    **pointwise_rule(lambda a, b: b / (a * a + b * b), lambda a, b: -a / (a * a + b * b)),
)


def _tie_split(wins, ties):
    # minimum/maximum: where both inputs are equal each gets half the gradient (torch)
    return where(ties, 0.5, wins)


def _extreme_vjp(loses):
    """minimum/maximum: each input gets the gradient where it is the result, half of it at
    a tie, and 0 where it ``loses`` (so a NaN, which never loses, passes it on): torch's
    ``where(a == b, grad / 2, grad).masked_fill_(a loses, 0)``, selected, not multiplied."""

    def vjp(ctx, grad):
        a, b = ctx.inputs
        need_a, need_b = ctx.needs_input_grad
        split = where(a == b, grad / 2, grad)
        return (
            split.masked_fill(loses(a, b), 0) if need_a else None,
            split.masked_fill(loses(b, a), 0) if need_b else None,
        )

    return vjp


binary(
    "minimum",
    ufunc="minimum",
    allow="bif",
    **dict(
        pointwise_rule(
            lambda a, b: _tie_split(b > a, b == a), lambda a, b: _tie_split(b < a, b == a)
        ),
        vjp=_extreme_vjp(operator.gt),
    ),
)
binary(
    "maximum",
    ufunc="maximum",
    allow="bif",
    **dict(
        pointwise_rule(
            lambda a, b: _tie_split(b < a, b == a), lambda a, b: _tie_split(b > a, b == a)
        ),
        vjp=_extreme_vjp(operator.lt),
    ),
)
unary(
    "neg",
    ufunc="negative",
    cuda="-a",
    allow="ifc",
    dunders=("__neg__",),
    vjp=lambda ctx, grad: (-grad,),
    jvp=same_op_jvp("neg"),
)
unary(
    "conj",
    lambda xp, a: xp.conjugate(a) if a.dtype.kind == "c" else a.copy(),
    inplace=False,
    vjp=lambda ctx, grad: (grad.conj(),),
    jvp=same_op_jvp("conj"),
)
unary(
    "abs",
    ufunc="absolute",
    dtype=M.to_real,
    allow="ifc",
    dunders=("__abs__",),
    inplace="if",  # abs_ of a complex tensor cannot hold its real result
    # NOTE: sgn(0) = 0: the gradient of |x| at 0 is 0, as in torch
    **real_jvp(pointwise_rule(lambda x: conj(sgn(x)))),
)


def _sign(xp, a):
    if a.dtype.kind == "b":
        return a
    # NOTE: sign(nan) = 0 as in torch (numpy gives nan); the gradients of abs and of
    # norm(p=1/inf) go through it, so a NaN input gets a 0 gradient there, as in torch
    return xp.nan_to_num(xp.sign(a), nan=0)


unary(
    "sign",
    _sign,
    allow="bif",
    **ZERO_RULE,
)
unary(
    "reciprocal",
    lambda xp, a: xp.reciprocal(a),
    dtype=M.to_float,
    **pointwise_rule(lambda x, out: -out * out),
)
unary(
    "sqrt",
    ufunc="sqrt",
    cuda="sqrt(a)",
    dtype=M.to_float,
    **pointwise_rule(lambda x, out: 0.5 / out),
)
unary(
    "rsqrt",
    lambda xp, a: 1 / xp.sqrt(a),
    dtype=M.to_float,
    cuda="(T)1 / sqrt(a)",
    cuda_fused=True,  # CuPy: a square root and a division
    **pointwise_rule(lambda x, out: -0.5 * out * out * out),
)
unary("square", ufunc="square", dtype=_square_dtype, **pointwise_rule(lambda x: 2 * x))

# ---- transcendental -----------------------------------------------------------------------
# name, ufunc, derivative d(x, out)
for _name, _uf, _d in [
    ("exp", "exp", lambda x, out: out),
    ("exp2", "exp2", lambda x, out: out * math.log(2)),
    ("expm1", "expm1", lambda x, out: out + 1),
    ("log", "log", lambda x: 1 / x),
    ("log2", "log2", lambda x: 1 / (x * math.log(2))),
    ("log10", "log10", lambda x: 1 / (x * math.log(10))),
    ("log1p", "log1p", lambda x: 1 / (x + 1)),
    ("sin", "sin", lambda x: x.cos()),
    ("cos", "cos", lambda x: -x.sin()),
    ("tan", "tan", lambda x, out: 1 + out * out),
    ("asin", "arcsin", lambda x: (1 - x * x).rsqrt()),
    ("acos", "arccos", lambda x: -(1 - x * x).rsqrt()),
    ("atan", "arctan", lambda x: 1 / (1 + x * x)),
    ("sinh", "sinh", lambda x: x.cosh()),
    ("cosh", "cosh", lambda x: x.sinh()),
    ("tanh", "tanh", lambda x, out: 1 - out * out),
]:
    # CUDA's math library has each under the C name, overloaded for float and double; CuPy's
    # exp2 is not exp2() (1 ulp apart): it keeps CuPy's kernel
    _cuda = f"{_name}(a)" if _name != "exp2" else ""
    unary(_name, ufunc=_uf, cuda=_cuda, dtype=M.to_float, **pointwise_rule(_d))


def _erf(xp, a):
    if xp.__name__ == "numpy":
        # numpy has no erf ufunc: vectorise the stdlib one. np.asarray: frompyfunc returns a
        # bare Python float for 0-d input
        return np.asarray(_np_vectorize(math.erf)(a)).astype(a.dtype)
    import cupyx.scipy.special as sp  # noqa: PLC0415 - CuPy is optional (a CUDA array here)

    return sp.erf(a)


@functools.cache
def _np_vectorize(f):
    return np.frompyfunc(f, 1, 1)


def _sigmoid(xp, a):
    # exp(-logaddexp(0, -x)) never overflows, unlike 1 / (1 + exp(-x)).
    return xp.exp(-xp.logaddexp(0, -a)) if a.dtype.kind != "c" else 1 / (1 + xp.exp(-a))


unary("sigmoid", _sigmoid, dtype=M.to_float, **pointwise_rule(lambda x, out: out * (1 - out)))
unary(
    "erf",
    _erf,
    cuda="erf(a)",  # CUDA's math library, as cupyx.scipy.special.erf calls it
    dtype=M.to_float,
    allow="bif",
    **pointwise_rule(lambda x: 2 / math.sqrt(math.pi) * (-x * x).exp()),
)

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


_GELU_C, _GELU_K = math.sqrt(2 / math.pi), 0.044715


def _gelu_derivative(x, approximate="none", xp=None):
    """gelu'(x) of tensors, or of arrays when ``xp`` (numpy/CuPy) is given."""
    if xp is None and not isinstance(x, Tensor):  # gelu's backward at a number
        return float(_gelu_derivative(np.float64(x), approximate, np))
    tanh = (lambda v: v.tanh()) if xp is None else xp.tanh
    if approximate == "tanh":
        c, k = _GELU_C, _GELU_K
        t = tanh(c * (x + k * x * x * x))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x)
    if approximate != "none":
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    # Phi(x) + x * phi(x): the normal cdf plus x times its density
    erf = (lambda v: v.erf()) if xp is None else functools.partial(_erf, xp)
    exp = (lambda v: v.exp()) if xp is None else xp.exp
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _gelu_second_derivative(x, approximate="none"):
    """gelu''(x), for the derivatives of gelu's backward (double backward)."""
    if approximate == "tanh":
        c, k = _GELU_C, _GELU_K
        t = (c * (x + k * x * x * x)).tanh()
        du, d2u = c * (1 + 3 * k * x * x), 6 * c * k * x  # of u = c * (x + k x^3)
        return (1 - t * t) * (du + 0.5 * x * (d2u - 2 * t * du * du))
    # d/dx (Phi(x) + x phi(x)) = 2 phi(x) + x phi'(x) = phi(x) (2 - x^2)
    return (-0.5 * x * x).exp() / math.sqrt(2 * math.pi) * (2 - x * x)


def _gelu_backward_kernel(xp, grad, x, approximate="none"):
    return grad * _gelu_derivative(x, approximate, xp)


def _silu_derivative(x):
    s = x.sigmoid()
    return s * (1 + x * (1 - s))


def _threshold_backward(grad, x, threshold=0):
    return _THRESHOLD_BACKWARD.fn(grad, x, threshold)


def _relu_kernel(xp, a):
    if xp is np and NATIVE is not None:
        r = NATIVE.relu(a)  # one pass over float32/float64 (numpy's maximum takes several)
        if r is not None:
            return r
    return xp.maximum(a, 0).astype(a.dtype, copy=False)


def _threshold_backward_kernel(xp, g, x, threshold=0):
    if xp is np and NATIVE is not None and type(threshold) in (int, float):
        r = NATIVE.threshold_backward(g, x, threshold)  # one pass (numpy: a mask and a where)
        if r is not None:
            return r
    return xp.where(x <= threshold, g.dtype.type(0), g)


unary(
    "relu",
    _relu_kernel,
    cuda="(a > (T)0 || a != a) ? a : (T)0",  # NaN stays NaN, as numpy's maximum keeps it
    allow="if",
    # NOTE: from the result, not x: the gradient at 0 is 0, as in torch
    vjp=lambda ctx, grad: (_threshold_backward(grad, ctx.out),),
    jvp=lambda ctx, t: None if t is None else _threshold_backward(t, ctx.out),
)
# torch's threshold_backward: where(input <= threshold, 0, grad_output), relu's backward
# (input: relu's result, threshold 0) in one kernel instead of a comparison, a negation and
# a where; a NaN input passes its gradient on (NaN <= 0 is false). On CUDA the default
# threshold is one kernel (``cuda``: a is grad_output, b is input) where CuPy's where takes two.
_THRESHOLD_BACKWARD = binary(
    "_threshold_backward",
    _threshold_backward_kernel,
    params="grad_output, input, threshold=0",
    cuda="(b <= (T)0) ? (T)0 : a",
    cuda_fused=True,  # CuPy: a comparison and a where
    allow="if",
    inplace=False,
    method=False,
    dunders=(),
    # a mask that is piecewise constant in input: only grad_output has a derivative
    vjp=lambda ctx, grad: (
        _threshold_backward(grad, ctx.inputs[1], ctx.params["threshold"]),
        None,
    ),
    jvp=lambda ctx, tg, tx: (
        None if tg is None else _threshold_backward(tg, ctx.inputs[1], ctx.params["threshold"])
    ),
)
# gelu's backward, one row (torch's gelu_backward): on CUDA one kernel each way, where the
# composed formula takes a dozen launches
_GELU_BACKWARD = binary(
    "_gelu_backward",
    _gelu_backward_kernel,
    params="grad_output, input, approximate='none'",
    cuda=(
        "a * ((T)0.5 * ((T)1 + erf(b / (T)1.4142135623730951))"
        " + b * exp((T)-0.5 * b * b) / (T)2.5066282746310002)"
    ),
    cuda_fused=True,
    allow="f",
    inplace=False,
    method=False,
    dunders=(),
    **pointwise_rule(
        lambda grad, x, approximate="none": _gelu_derivative(x, approximate),
        lambda grad, x, approximate="none": grad * _gelu_second_derivative(x, approximate),
    ),
)
op(
    "gelu",
    "input, approximate='none'",
    kernel=_gelu,
    cuda="(T)0.5 * a * ((T)1 + erf(a / (T)1.4142135623730951))",
    cuda_fused=True,  # CuPy: erf and four arithmetic kernels
    shape=_pw_shape("gelu"),
    dtype=functools.partial(M.float_only, op="gelu"),
    allow="f",
    vjp=lambda ctx, grad: _GELU_BACKWARD.fn(grad, ctx.inputs[0], ctx.params["approximate"]),
    jvp=lambda ctx, t: _GELU_BACKWARD.fn(t, ctx.inputs[0], ctx.params["approximate"]),
)
unary(
    "silu",
    lambda xp, a: a * _sigmoid(xp, a),
    dtype=M.to_float,
    allow="fc",
    **pointwise_rule(_silu_derivative),
)
op(
    "softplus",
    "input, beta=1.0, threshold=20.0",
    kernel=_softplus,
    shape=_pw_shape("softplus"),
    dtype=functools.partial(M.float_only, op="softplus"),
    allow="f",
    # above the threshold softplus is x itself (slope 1), below it is sigmoid(beta * x)
    **pointwise_rule(
        lambda x, beta=1.0, threshold=20.0: where(x * beta > threshold, 1.0, (x * beta).sigmoid())
    ),
)
op(
    "leaky_relu",
    "input, negative_slope=0.01",
    kernel=_leaky_relu,
    shape=_pw_shape("leaky_relu"),
    dtype=functools.partial(M.float_only, op="leaky_relu"),
    allow="f",
    inplace=True,
    # slope at 0 is negative_slope (the kernel's branch there), as in torch
    **pointwise_rule(
        lambda x, negative_slope=0.01: where(x > 0, 1.0, full_like(x, negative_slope))
    ),
)

# ---- clamp / where / rounding / predicates ------------------------------------------------


def _clamp(xp, a, lo=None, hi=None):
    if lo is not None:
        a = xp.maximum(a, lo)
    if hi is not None:
        a = xp.minimum(a, hi)
    return a


def _checked_bounds(name, input, min=None, max=None):  # noqa: A002 - torch names
    """The shape of ``name`` (clamp, clamp_min, clamp_max) of ``input`` between its bounds."""
    if min is None and max is None:
        raise RuntimeError(f"{name}(): At least one of 'min' or 'max' must not be None")
    bounds = [b for b in (min, max) if b is not None]
    if input.dtype is D.bool and all(
        isinstance(b, bool) or (isinstance(b, Tensor) and b.dtype is D.bool) for b in bounds
    ):
        # a bool result: torch has bool kernels for one tensor bound (clamp_min/clamp_max)
        # only, none for a number bound or for both bounds at once
        if any(isinstance(b, bool) for b in bounds):
            raise RuntimeError(f"{name}(): a bool tensor takes bool bounds as tensors, not numbers")
        if len(bounds) == 2:
            raise NotImplementedError(
                f"{name}(): a bool tensor takes one bound at a time (torch has no bool kernel "
                "for both); write x.clamp(min=lo).clamp(max=hi)"
            )
    return M.pointwise_shape(name, input, min, max)


def _clamp_shape(input, min=None, max=None):  # noqa: A002
    return _checked_bounds("clamp", input, min, max)


# Which of input/min/max the output follows (torch's clamp_backward_min_max): x inside
# [min, max] (ends included), min where x < min (unless min > max: then max wins).
def _follows_input(x, lo, hi):
    inside = (x >= lo) if lo is not None else None
    if hi is not None:
        inside = (x <= hi) if inside is None else inside & (x <= hi)
    return inside


def _follows_min(x, lo, hi):
    return (x < lo) & (lo < hi) if hi is not None else x < lo


def _follows_max(x, lo, hi):
    return (x > hi) | (hi < lo) if lo is not None else x > hi


op(
    "clamp",
    "input, min=None, max=None",
    n_inputs=3,
    kernel=_clamp,
    shape=_clamp_shape,
    allow="bif",
    scalar_check="ihf",
    out=True,
    inplace=True,
    **pointwise_rule(_follows_input, _follows_min, _follows_max),
)


def _where_kernel(xp, c, a, b):
    c = c.astype(bool, copy=False)
    if (
        xp is np
        and type(a) is np.ndarray
        and a.dtype.kind == "f"
        and np.ndim(b) == 0
        and b == 0
        and a.shape == np.broadcast_shapes(a.shape, c.shape)
    ):
        # where(mask, x, 0), every masked gradient (relu's, clamp's, ...): numpy's where
        # runs a branchy loop over a random mask, a multiply by it is several times faster
        # and equal wherever x is finite (+ 0.0 turns the -0.0 of a negative x into where's
        # +0.0); a non-finite x (inf * 0 is nan) takes where itself
        r = np.multiply(a, c)
        r += 0.0
        if np.isfinite(a).all():
            return r
    return xp.where(c, a, b)


def _where_vjp(ctx, grad):
    c, a, b = ctx.inputs
    return (
        None,
        where(c, grad, 0.0) if ctx.needs_input_grad[1] else None,
        where(c, 0.0, grad) if ctx.needs_input_grad[2] else None,
    )


def _where_jvp(ctx, tc, ta, tb):
    if ta is None and tb is None:
        return None
    return where(ctx.inputs[0], 0.0 if ta is None else ta, 0.0 if tb is None else tb)


op(
    "where",
    "condition, input, other",
    n_inputs=3,
    cast=(1, 2),
    shape=_pw_shape("where"),
    kernel=_where_kernel,
    method=False,
    scalar_check="ifc",  # NOTE: torch lets float16/bfloat16 overflow to inf here
    out=True,
    vjp=_where_vjp,
    jvp=_where_jvp,
)
for _name, _uf in [("floor", "floor"), ("ceil", "ceil"), ("trunc", "trunc")]:
    unary(
        _name,
        lambda xp, a, _uf=_uf: getattr(xp, _uf)(a) if a.dtype.kind == "f" else a,
        allow="if",
        **ZERO_RULE,
    )


def _round(xp, a, decimals=None):
    return xp.round(a, decimals or 0) if a.dtype.kind in "fc" else a


def _round_dtype(d, params):
    # torch rounds integers without decimals only (a copy): round(decimals=0) is its
    # decimals kernel, which has no integer version
    if params.get("decimals") is not None and d.category <= 1:
        raise NotImplementedError(
            f"round(): decimals={params['decimals']} is not supported for {d} inputs; "
            "convert them to a floating dtype first"
        )
    return M.same(d, params)


op(
    "round",
    "input, *, decimals=None",
    kernel=_round,
    shape=_pw_shape("round"),
    dtype=_round_dtype,
    allow="if",
    out=True,
    inplace=True,
    **ZERO_RULE,
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
        # x.eq_(y) writes the comparison into x, in x's dtype (1/0), as torch does
        inplace=True,
    )


def _truth(a):
    # CuPy's logical ufuncs have no complex loops; "nonzero" is what they mean anyway. A
    # Python number is its own truth (it is not rounded to the tensor's dtype first).
    if not hasattr(a, "dtype"):
        return bool(a)
    return a != 0 if a.dtype.kind == "c" else a


# torch's logical ops take each operand's truth in its own dtype, uncast (float32 0 xor
# float64 1e-282 is True): only the first input is cast, to itself (torch refuses Python
# numbers here; TensorPlay takes their truth, as numpy does)
for _name in ("logical_and", "logical_or", "logical_xor"):
    binary(
        _name,
        lambda xp, a, b, _n=_name: getattr(xp, _n)(_truth(a), _truth(b)),
        ufunc=_name,
        dtype=M.to_bool,
        cast=(0,),
        promote="first",
        inplace=True,
    )
unary(
    "logical_not",
    lambda xp, a: xp.logical_not(_truth(a)),
    ufunc="logical_not",
    dtype=M.to_bool,
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


# ---- one-sided clamps, fused multiply/divide-adds, lerp ----------------------------------


def _one_bound(name, rule):
    """clamp_min/clamp_max: clamp with one bound, which may be a tensor (a bool one too)."""
    which = name[len("clamp_") :]

    def shape(input, bound):
        return _checked_bounds(name, input, **{which: bound})

    def kernel(xp, a, bound):
        return _clamp(xp, a, bound) if which == "min" else _clamp(xp, a, None, bound)

    op(
        name,
        f"input, {which}",
        n_inputs=2,
        kernel=kernel,
        shape=shape,
        allow="bif",
        scalar_check="ihf",
        out=True,
        inplace=True,
        **rule,
    )


_one_bound(
    "clamp_min",
    pointwise_rule(lambda x, lo: _follows_input(x, lo, None), lambda x, lo: x < lo),
)
_one_bound(
    "clamp_max",
    pointwise_rule(lambda x, hi: _follows_input(x, None, hi), lambda x, hi: x > hi),
)


def _tensors_only(name, **args):
    # torch takes no number for these arguments (the dispatcher would read one as a scalar)
    for arg, value in args.items():
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{name}(): argument '{arg}' must be Tensor, not {type(value).__name__}"
            )


_INTEGER_ADDCDIV = (
    "addcdiv(): integer division with addcdiv is not supported (tensor1 and tensor2 are both "
    "integer or bool tensors, as in torch); write (input + value * tp.trunc(tensor1 / tensor2))"
    ".to(input.dtype) for the historic integer result, or convert one of them to a floating "
    "dtype for a true division"
)


def _addc_shape(name):
    def shape(input, tensor1, tensor2, *, value=1):
        _tensors_only(name, input=input, tensor1=tensor1, tensor2=tensor2)
        if name == "addcdiv" and tensor1.dtype.category <= 1 and tensor2.dtype.category <= 1:
            raise RuntimeError(_INTEGER_ADDCDIV)
        return M.pointwise_shape(name, input, tensor1, tensor2)

    return shape


def _addc_dtype(name):
    def dtype(d, params):
        if name == "addcdiv" and d.category <= 1:
            raise RuntimeError(_INTEGER_ADDCDIV)
        compute, out = M.same(d, params)
        # torch converts value to the computation's type with an overflow check: a float value
        # truncates into an integer one (value=2.7 is 2), a complex one needs a complex result
        D.check_fits(name, params.get("value", 1), compute)
        return compute, out

    return dtype


def _addcmul(xp, a, b, c, *, value=1):
    # torch's order of evaluation: input + value * tensor1 * tensor2
    return a + (b if value == 1 else times_scalar(b, value)) * c


def _addcdiv(xp, a, b, c, *, value=1):
    return a + (b if value == 1 else times_scalar(b, value)) / c


op(
    "addcmul",
    "input, tensor1, tensor2, *, value=1",
    n_inputs=3,
    kernel=_addcmul,
    shape=_addc_shape("addcmul"),
    dtype=_addc_dtype("addcmul"),
    allow="ifc",
    out=True,
    inplace=True,
    **pointwise_rule(
        lambda a, b, c, value=1: 1,
        lambda a, b, c, value=1: c * value,
        lambda a, b, c, value=1: b * value,
    ),
)
op(
    "addcdiv",
    "input, tensor1, tensor2, *, value=1",
    n_inputs=3,
    kernel=_addcdiv,
    shape=_addc_shape("addcdiv"),
    dtype=_addc_dtype("addcdiv"),
    allow="bifc",  # integer inputs: the dtype rule gives torch's message
    out=True,
    inplace=True,
    **pointwise_rule(
        lambda a, b, c, value=1: 1,
        lambda a, b, c, value=1: value / c,
        lambda a, b, c, value=1: -value * b / (c * c),
    ),
)


def _lerp_shape(input, end, weight):
    _tensors_only("lerp", input=input, end=end)
    if input.dtype.category <= 1:  # promotion with a float weight would hide it
        raise NotImplementedError(
            f"lerp(): not supported for {input.dtype} inputs (as in torch); convert them to a "
            "floating dtype first"
        )
    # torch wants one dtype: end's must be input's, and so must a weight tensor's (a 0-d weight
    # takes part in promotion like any 0-d operand)
    others = [("end", end)] + ([("weight", weight)] if isinstance(weight, Tensor) else [])
    for arg, t in others:
        if t.dtype is not input.dtype and (arg == "end" or t.dim()):
            raise RuntimeError(
                f"lerp(): expected dtype {input.dtype.name} for `{arg}` but got dtype "
                f"{t.dtype.name}; convert it with .to({input.dtype})"
            )
    if not isinstance(weight, Tensor):
        D.check_fits("lerp", weight, M.same(input.dtype, {})[0])
    return M.pointwise_shape("lerp", input, end, weight)


def _lerp(xp, a, b, w):
    # torch's formula: from the nearer end, so that weight 1 gives exactly end
    d = b - a
    return xp.where(xp.abs(w) < 0.5, a + w * d, b - d * (1 - w))


op(
    "lerp",
    "input, end, weight",
    n_inputs=3,
    kernel=_lerp,
    shape=_lerp_shape,
    allow="fc",
    out=True,
    inplace=True,
    **pointwise_rule(lambda a, b, w: 1 - w, lambda a, b, w: w, lambda a, b, w: b - a),
)


# ---- the parts of a complex tensor: real, imag --------------------------------------------


class _Part:
    """``tp.real``/``tp.imag``, which are also the attributes ``z.real``/``z.imag`` (torch has
    both): a function that is a data descriptor on Tensor, so reading ``z.real`` calls it and
    ``z.real = v`` writes that part of ``z`` in place (``z.copy_``)."""

    def __init__(self, row: OpDef):
        self._row = row
        self.__name__ = self.__qualname__ = row.name
        self.__doc__ = row.doc
        self.__module__ = "tensorplay"

    def __call__(self, input):
        # the protocol, as every public op has it: a handler sees ``func is tp.real``
        if (type(input) is not Tensor or not state.plain) and has_tensorplay_function((input,)):
            return handle_tensorplay_function(self, (input,), input)
        if self._row.name == "real" and isinstance(input, Tensor) and not input.dtype.is_complex:
            # torch returns the input itself; a view of it is as close as a new tensor gets
            # (same memory and version counter, and a gradient that flows straight through)
            return input.view(input._shape)
        return call(self._row, (input,), {})

    def __repr__(self) -> str:
        return f"<function tensorplay.{self.__name__} (also the attribute Tensor.{self.__name__})>"

    def __get__(self, obj, cls=None):
        return self if obj is None else self(obj)

    def __set__(self, obj, value):
        if not obj.dtype.is_complex:
            self(obj)  # imag of a real tensor raises
            obj.copy_(value)
            return
        re, im = (value, obj.imag) if self._row.name == "real" else (obj.real, value)
        obj.copy_(re + im * 1j)


@dataclasses.dataclass(eq=False)
class _PartRow(OpDef):
    """The row of ``real``/``imag``: its public function is a ``_Part``."""

    @property
    def fn(self):
        if self._fn is None:
            self._fn = _Part(self)
        return self._fn


def _part_dtype(name):
    def dtype(d, params):
        if name == "imag" and not d.is_complex:
            raise RuntimeError(
                "imag(): imag is not implemented for tensors with non-complex dtypes "
                f"({d.name} is not supported, as in torch); a real tensor's imaginary part is "
                "tp.zeros_like(x)"
            )
        return M.to_real(d, params)

    return dtype


def _part(name, vjp):
    # NOTE: not views of a complex tensor, as in torch: a view here keeps its base's dtype
    # (no float32 elements over complex64 memory), so the parts are copies; z.real = v writes
    ROWS.append(
        _PartRow(
            name,
            "input",
            # a copy: CuPy keeps a contiguous result as it is (and one element of z.real is
            # contiguous): the result would share z's memory
            kernel=lambda xp, a: getattr(xp, name)(a).copy(),
            shape=_pw_shape(name),
            dtype=_part_dtype(name),
            doc=f"{name}(input) -> Tensor: the {name} part of a complex tensor, also the "
            f"attribute input.{name}"
            + (" (a view of the input itself for a real one)" if name == "real" else ""),
            vjp=vjp,
            jvp=lambda ctx, t: None if t is None else getattr(t, name),
            method="attribute",
        )
    )


_part("real", vjp=lambda ctx, grad: (grad,))  # as the complex gradient grad + 0j
_part("imag", vjp=lambda ctx, grad: (grad * 1j,))  # z = x + iy: the gradient along y
