"""The op table: every built-in op is one row, defined here and nowhere else.

A row names the public signature, the kernel (numpy and CuPy share it: ``xp``
is the array module), the meta rules (shape, dtype) and flags. ``_dispatch``
turns each row into ``tp.<name>``, ``Tensor.<name>``, ``Tensor.<name>_`` and
operators; tests are generated from the same rows (``tests/core``). The
``vjp``/``jvp`` columns belong to autograd.
"""

from __future__ import annotations

import dis
import functools
import inspect
import math
import operator
from collections import namedtuple

import numpy as np

import tensorplay as tp
from tensorplay import _dtype as D, _meta as M, _views as V
from tensorplay._dispatch import OPS, OpDef, call, register
from tensorplay._tensor import Tensor, strides_of

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


# ---- derivatives: the vjp / jvp columns --------------------------------------------------
#
# vjp(ctx, grad) -> one gradient per tensor input of the row (None where an input is a
# number or needs none); jvp(ctx, *tangents) -> the output's tangent (tangents align with the
# inputs, None meaning zero). ``ctx`` has ``inputs`` (as passed), ``params`` and ``out``.
# Gradients may come back broadcast: autograd sums them to each input's shape. Formulas use
# TensorPlay ops only, so that they are themselves differentiated (create_graph=True).
# Complex follows PyTorch: the gradient is the conjugate Wirtinger derivative, so a
# holomorphic op with derivative d(x) has vjp grad * conj(d) and jvp tangent * d.


def _conj(x):
    if isinstance(x, Tensor):
        return x.conj() if x.dtype.is_complex else x
    return x.conjugate() if isinstance(x, complex) else x


def _needs(ctx) -> tuple:
    """Which inputs want a gradient (autograd knows: the saved tensors a hook unpacks need
    not say so themselves)."""
    return ctx.needs_input_grad


@functools.cache
def _takes_out(fn) -> bool:
    """Does a derivative formula name ``out`` (the op's result) among its parameters? Only
    then is the saved result read: reading it checks that no in-place op changed it since,
    and a formula that does not need it must not fail that check (``y = x * 2; y.mul_(3)``)."""
    return "out" in inspect.signature(fn).parameters


def _times(g, d):
    if isinstance(d, Tensor) and d.dtype is _bool():
        # a 0/1 partial selects: an inf gradient where it is 0 gives 0, not inf * 0 = nan
        # (torch masks with where/masked_fill the same way)
        return tp.where(d, g, 0)
    return g if isinstance(d, (int, float)) and not isinstance(d, bool) and d == 1 else g * d


def _total(terms):
    terms = [t for t in terms if t is not None]
    return functools.reduce(operator.add, terms) if terms else None


_LOCAL_OPS = frozenset(dis.haslocal) | frozenset(dis.hasfree)


def local_names(ins: dis.Instruction) -> tuple:
    """The local (or cell) variables bytecode instruction ``ins`` names, in stack order.

    Usually one; Python 3.13's superinstructions name two in a tuple
    (``LOAD_FAST_LOAD_FAST (b, a)`` pushes b, then a). ``dis``'s own tables say which
    opcodes touch locals, so this holds for every interpreter without listing opnames.
    """
    if ins.opcode not in _LOCAL_OPS:
        return ()
    return ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)


@functools.cache
def _reads(fn) -> tuple:
    """For each positional parameter of a derivative formula: does its body read it?

    A formula gets only the saved inputs it reads (``mul``'s d/da is ``b``: ``a`` is not
    unpacked), so an in-place change of an unread input does not fail backward: the
    same contract PyTorch's derivatives.yaml gives by saving only what a formula names.
    A closure capturing a parameter loads it too (``LOAD_CLOSURE``), so it counts.
    """
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount]
    loaded = {
        name
        for ins in dis.get_instructions(fn)
        if "LOAD" in ins.opname
        for name in local_names(ins)
    }
    return tuple(n in loaded for n in names)


def _pointwise(*partials):
    """vjp and jvp of a pointwise op from its partial derivatives, one per input, each
    ``d(*inputs, out, **params)`` (a tensor or a number)."""

    def partial(d, ctx):
        out = (ctx.out,) if _takes_out(d) else ()
        inputs = ctx.inputs
        reads = _reads(d)
        args = [inputs[i] if i >= len(reads) or reads[i] else None for i in range(len(inputs))]
        return d(*args, *out, **ctx.params)

    def vjp(ctx, grad):
        return tuple(
            _times(grad, _conj(partial(d, ctx))) if needed else None
            for d, needed in zip(partials, _needs(ctx))
        )

    def jvp(ctx, *tangents):
        return _total(
            _times(t, partial(d, ctx)) for d, t in zip(partials, tangents) if t is not None
        )

    # autograd saves the op's result only when a formula reads it (asked once per row)
    vjp.reads_out = lambda: any(_takes_out(d) for d in partials)
    return {"vjp": vjp, "jvp": jvp}


def _linear_pair(sign):
    """add/sub (``a + sign * alpha * b``): derivatives are constants, so no saved input is
    read (and an in-place change of an input after the op does not invalidate backward)."""

    def vjp(ctx, grad):
        need_a, need_b = _needs(ctx)
        k = sign * ctx.params["alpha"]
        return (grad if need_a else None, _times(grad, _conj(k)) if need_b else None)

    def jvp(ctx, ta, tb=None):
        k = sign * ctx.params["alpha"]
        return _total([ta, _times(tb, k) if tb is not None else None])

    vjp.reads_out = lambda: False
    return {"vjp": vjp, "jvp": jvp}


# piecewise constant (floor, sign, rounded division): zero almost everywhere, as in torch
_ZERO = {
    "vjp": lambda ctx, grad: tuple(tp.zeros_like(grad) if n else None for n in _needs(ctx)),
    "jvp": lambda ctx, *tangents: tp.zeros_like(ctx.out),
}


def _real_jvp(rule):
    """``rule``'s jvp, refused for complex inputs: a real-valued function of a complex
    input has tangent Re(d * t), and TensorPlay has no ``real`` op to write it with."""

    def jvp(ctx, *tangents):
        if any(isinstance(x, Tensor) and x.dtype.is_complex for x in _flat(ctx.inputs)):
            raise NotImplementedError(
                "the forward-mode derivative of a real-valued op of a complex input "
                "(abs, var, std, norm) is not implemented"
            )
        return rule["jvp"](ctx, *tangents)

    return {"vjp": rule["vjp"], "jvp": jvp}


def _flat(inputs):
    return [y for x in inputs for y in (x if isinstance(x, (list, tuple)) else (x,))]


def _same_op(name):
    """The jvp of an op linear in its first input: the op itself, applied to the tangent."""

    def jvp(ctx, t, *rest):
        return None if t is None else call(OPS[name], (t, *ctx.inputs[1:]), ctx.params)

    return jvp


def _bilinear(name):
    """The jvp of an op linear in each of its two inputs: f(ta, b) + f(a, tb)."""

    def jvp(ctx, ta, tb=None):
        a, b = ctx.inputs
        f = OPS[name].fn
        return _total([f(ta, b) if ta is not None else None, f(a, tb) if tb is not None else None])

    return jvp


def _sgn(x):
    """x / |x| (0 at 0): the gradient of |x| (torch's sgn; sign for real x)."""
    return tp.where(x == 0, 0, x / x.abs()) if x.dtype.is_complex else x.sign()


def _axes_of(x, dim):
    # a 0-d input accepts dim 0 / -1 but has no axis to name
    return M.reduce_dims(dim, x.dim(), "backward") if x.dim() else ()


def _unreduce(g, x, dim, keepdim=False):
    """A reduction's output (or gradient) broadcast back over the input's shape."""
    if g.dim() == 0:  # a full reduction: expand broadcasts a 0-d tensor directly
        return g.expand(*x.shape)
    kept = M.reduced_shape(tuple(x.shape), _axes_of(x, dim), True)
    return g.reshape(kept).expand(*x.shape)


def _reduction(partial, *, dim_param="dim"):
    """vjp and jvp of a reduction from its elementwise partial ``partial(x, out, axes,
    **params)`` (``out`` broadcast back over x): vjp = grad * conj(partial),
    jvp = sum(partial * tangent) over the reduced dims."""

    def parts(ctx):
        x, dim = ctx.inputs[0], ctx.params.get(dim_param)
        out = (_unreduce(ctx.out, x, dim),) if _takes_out(partial) else ()
        return x, dim, partial(x, *out, _axes_of(x, dim), **ctx.params)

    def vjp(ctx, grad):
        x, dim, d = parts(ctx)
        return (_unreduce(grad, x, dim) * _conj(d),)

    def jvp(ctx, t):
        if t is None:
            return None
        x, dim, d = parts(ctx)
        return (d * t).sum(dim=dim, keepdim=ctx.params.get("keepdim", False))

    return {"vjp": vjp, "jvp": jvp}


def _numel_over(shape, axes) -> int:
    return math.prod(shape[i] for i in axes)


def _flip(x, d):
    return x.index_select(d, tp.arange(x.shape[d] - 1, -1, -1, device=x.device))


def _exclusive_cumprod(x, d):
    """prod(x[..:i]) along d (1 first): products of the elements before each one."""
    ones = tp.ones_like(x.narrow(d, 0, 1))
    return tp.cat([ones, x.narrow(d, 0, x.shape[d] - 1)], d).cumprod(d)


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
        return tp.ones_like(x)
    return _prod_of_others(x, axes) if bool((x == 0).any()) else out / x


_PROD_RULE = _reduction(_prod_partial)


def _prod_vjp(ctx, grad):
    # torch's prod_backward: a product of every element with two zeros or more has a zero
    # gradient outright (first order only: an inf or nan gradient gives 0, not nan)
    x = ctx.inputs[0]
    if ctx.params["dim"] is None and not tp.is_grad_enabled() and int((x == 0).sum()) > 1:
        return (tp.zeros_like(x),)
    return _PROD_RULE["vjp"](ctx, grad)


def _ties_vjp(ctx, grad):
    # amax/amin: the gradient is shared evenly by the elements equal to the extreme, in the
    # gradient's dtype (torch's scale_grad_by_count, in its order: grad / count * mask)
    x, dim = ctx.inputs[0], ctx.params.get("dim")
    hit = x == _unreduce(ctx.out, x, dim)
    return (_unreduce(grad, x, dim) / hit.sum(dim=_axes_of(x, dim), keepdim=True) * hit,)


def _ties_jvp(ctx, t):
    # the mean tangent of the tied elements (torch's amaxamin_jvp: selected, not multiplied)
    if t is None:
        return None
    x, dim, keepdim = ctx.inputs[0], ctx.params.get("dim"), ctx.params.get("keepdim", False)
    hit = x == _unreduce(ctx.out, x, dim)
    axes = _axes_of(x, dim)
    picked = tp.where(hit, t, 0).sum(dim=axes, keepdim=True) / hit.sum(dim=axes, keepdim=True)
    return picked if keepdim else picked.reshape(ctx.out.shape)


def _ddof(unbiased=None, correction=None, **_):
    return correction if correction is not None else (0 if unbiased is False else 1)


def _var_partial(x, axes, unbiased=None, correction=None, **_):
    n = max(_numel_over(tuple(x.shape), axes) - _ddof(unbiased, correction), 0)
    return 2 * _conj(x - x.mean(dim=axes, keepdim=True)) / n


def _var_grad(grad, x, params):
    """torch's var_backward. With no degree of freedom left (correction >= N) a full
    reduction's gradient is inf (nan where x equals the mean), whatever its sign; over
    dims it is the formula's 2 / (N - correction), inf at 0 and finite below."""
    dim, correction = params.get("dim"), _ddof(params.get("unbiased"), params.get("correction"))
    if dim is None or x.dim() == 0:
        dof = x.numel() - correction
        if dof <= 0:
            return grad * tp.where(x == x.mean(), math.nan, math.inf)
        return 2.0 / dof * grad * (x - x.mean())
    axes = _axes_of(x, dim)
    dof = _numel_over(tuple(x.shape), axes) - correction
    scale = 2.0 / dof if dof else math.inf
    return scale * _unreduce(grad, x, dim) * (x - x.mean(dim=axes, keepdim=True))


def _var_vjp(ctx, grad):
    return (_var_grad(grad, ctx.inputs[0], ctx.params),)


def _std_vjp(ctx, grad):
    # d std = d var / (2 std), 0 where std is 0 (torch's std_backward)
    return (_var_grad(_masked_over(grad, ctx.out * 2), ctx.inputs[0], ctx.params),)


def _masked_over(num, den):
    """num / den, 0 where den == 0. The inner where keeps 1/0 out of the graph: otherwise the
    second derivative would be 0 * inf = nan there."""
    zero = den == 0
    return tp.where(zero, 0.0, num / tp.where(zero, 1.0, den))


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
    g, norm = _unreduce(grad, x, dim), _unreduce(ctx.out, x, dim)
    if p == 1:
        return (_sgn(x) * g,)
    if p in ("fro", 2):
        return (g * (x / norm).masked_fill(norm == 0, 0),)
    if p in _INF or p in _NEG_INF:
        a = x.abs()
        hit = (a == norm).logical_or(a.isnan())
        return (_sgn(x) * (g / hit.sum(dim=_axes_of(x, dim), keepdim=True) * hit),)
    if p < 1:
        scaled = _sgn(x) * (x.abs() ** (p - 1)).masked_fill(x == 0, 0)
        return (scaled * g * norm ** (1 - p),)
    scaled = _sgn(x) * x.abs() ** (p - 1) if p < 2 else x * x.abs() ** (p - 2)
    return (scaled * (g / norm ** (p - 1)).masked_fill(norm == 0, 0),)


def _norm_partial(x, out, axes, p="fro", **_):
    a, s = x.abs(), _conj(_sgn(x))
    if p in ("fro", 2, 2.0):
        return _masked_over(a, out) * s  # 0 at a zero norm, like torch
    if p == 1:
        return s
    if p == 0:
        return tp.zeros_like(a)
    if p in _INF or p in _NEG_INF:
        hit = (a == out).to(a.dtype)
        return hit / hit.sum(dim=axes, keepdim=True) * s
    return _masked_over(a, out) ** (p - 1) * s


def _matmul_vjp(ctx, grad):
    # 1-D operands act as a row (left) / column (right) matrix; batch dimensions that were
    # broadcast are summed by autograd (fit_grad)
    a, b = ctx.inputs
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    g = grad.unsqueeze(-1) if b.dim() == 1 else grad
    g = g.unsqueeze(-2) if a.dim() == 1 else g
    ga = g @ _conj(b2).mT if _needs(ctx)[0] else None
    gb = _conj(a2).mT @ g if _needs(ctx)[1] else None
    if ga is not None and a.dim() == 1:
        ga = ga.squeeze(-2)
    if gb is not None and b.dim() == 1:
        gb = gb.squeeze(-1)
    return ga, gb


def _positions(name, x, params):
    """The flat index into x of each element of x's view by row ``name`` (a tuple of index
    tensors for multi-output views): the view applied to ``arange(x.numel())``."""
    index = tp.arange(x.numel(), device=x.device).reshape(x.shape)
    return call(OPS[name], (index,), params)


def _by_positions(name):
    """vjp and jvp of view ``name`` through the flat positions it reads: the gradient is
    scattered (added, for overlapping views) into zeros shaped like the input; the tangent
    is gathered from them. Both are TensorPlay ops, so this is differentiable too."""

    def vjp(ctx, grad):
        x = ctx.inputs[0]
        pos = _positions(name, x, ctx.params).reshape(-1)
        flat = tp.zeros(x.numel(), dtype=grad.dtype, device=grad.device)
        return (flat.scatter(0, pos, grad.reshape(-1), reduce="add").reshape(x.shape),)

    def jvp(ctx, t):
        if t is None:
            return None
        pos = _positions(name, ctx.inputs[0], ctx.params)
        return t.reshape(-1).index_select(0, pos.reshape(-1)).reshape(pos.shape)

    return {"vjp": vjp, "jvp": jvp}


def _cells(x, params):
    """``as_strided`` reads storage, not ``x``'s elements: the storage cells that ``x`` and
    its view span, numbered from 0, as ``(x's cell per element, the view's, how many)``."""
    size, stride = tuple(params["size"]), tuple(params["stride"])
    off = params.get("storage_offset")
    geos = (
        (x._shape, strides_of(x), x._offset),
        (size, stride, x._offset if off is None else off),
    )
    ends = [(o, o + sum((n - 1) * st for n, st in zip(sh, sts)) + 1) for sh, sts, o in geos]
    lo, hi = min(a for a, _ in ends), max(b for _, b in ends)
    cells = tp.arange(hi - lo, device=x.device)
    x_cells, view_cells = (cells.as_strided(sh, sts, o - lo).reshape(-1) for sh, sts, o in geos)
    return x_cells, view_cells, hi - lo


def _may_overlap(shape, stride) -> bool:
    """False when no two elements can share memory: each stride, smallest first, steps
    past everything the smaller dimensions reach (stride 0, as from expand, overlaps)."""
    reach = 0
    for st, n in sorted((st, n) for n, st in zip(shape, stride) if n > 1):
        if st <= reach:
            return True
        reach += (n - 1) * st
    return False


def _as_strided_vjp(ctx, grad):
    # torch's as_strided_backward: each view element's gradient goes to (is added into)
    # the storage cell it reads; each element of x then takes its cell's gradient, an
    # equal share of it when elements of x share a cell
    x = ctx.inputs[0]
    if x.numel() == 0 or grad.numel() == 0:
        return (tp.zeros(x.shape, dtype=grad.dtype, device=grad.device),)
    x_cells, view_cells, n = _cells(x, ctx.params)
    store = tp.zeros(n, dtype=grad.dtype, device=grad.device)
    gx = store.scatter(0, view_cells, grad.reshape(-1), reduce="add").index_select(0, x_cells)
    if _may_overlap(x._shape, strides_of(x)):
        ones = tp.ones(x_cells.shape, dtype=grad.dtype, device=grad.device)
        gx = gx / store.scatter(0, x_cells, ones, reduce="add").index_select(0, x_cells)
    return (gx.reshape(x.shape),)


def _as_strided_jvp(ctx, t):
    # the tangent of each storage cell is that of the element of x there (0 where x has none)
    if t is None:
        return None
    x, size = ctx.inputs[0], tuple(ctx.params["size"])
    if x.numel() == 0 or math.prod(size) == 0:
        return tp.zeros(size, dtype=t.dtype, device=t.device)
    x_cells, view_cells, n = _cells(x, ctx.params)
    store = tp.zeros(n, dtype=t.dtype, device=t.device).scatter(0, x_cells, t.reshape(-1))
    return store.index_select(0, view_cells).reshape(size)


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


def _times_alpha(b, alpha):
    # torch converts alpha to the computation's dtype first: uint8 takes alpha=-1 as 255
    # (wrapping, as the result does), bool takes any nonzero alpha as True
    return b * D.scalar_array(alpha, D.from_numpy_dtype(b.dtype))[()]


def _add(xp, a, b, alpha=1):
    return xp.add(a, b) if alpha == 1 else a + _times_alpha(b, alpha)


def _sub(xp, a, b, alpha=1):
    return xp.subtract(a, b) if alpha == 1 else a - _times_alpha(b, alpha)


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
    if d.is_complex or d is _bool():  # torch: "div_floor_cpu" not implemented for complex/bool
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
    if isinstance(alpha, bool) and d is not _bool():
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
    dtype=_alpha_dtype,
    dunders=("__add__", "__radd__", "__iadd__"),
    scalar_opmath=(0, 1),  # ``2.5 + x`` is add(x, 2.5) in torch
    **_linear_pair(1),
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
    # torch has no bool ** bool kernel for a bool exponent tensor (a Python bool exponent is fine)
    base_bool = isinstance(input, bool) or getattr(input, "dtype", None) is _bool()
    if base_bool and getattr(exponent, "dtype", None) is _bool():
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
    return (_int64(), _int64()) if d is _bool() else M.same(d, params)


binary(
    "sub",
    _sub,
    params="input, other, *, alpha=1",
    ufunc="subtract",
    dtype=_alpha_dtype,
    allow="ifc",
    scalar_opmath=(1,),  # not ``2.5 - x``: torch's rsub rounds 2.5 to x's dtype first
    shape=_no_bool_operand("sub", "Subtraction, the `-` operator,"),
    dunders=("__sub__", "__rsub__", "__isub__"),
    **_linear_pair(-1),
)
binary(
    "mul",
    ufunc="multiply",
    dunders=("__mul__", "__rmul__", "__imul__"),
    scalar_opmath=(0, 1),
    vjp=_pointwise(lambda a, b: b, lambda a, b: a)["vjp"],
    jvp=_bilinear("mul"),
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
    dtype=_div_dtype,
    scalar_opmath=(1,),
    dunders=("__truediv__", "__rtruediv__", "__itruediv__"),
    # rounded quotients are piecewise constant: zero gradient (torch)
    **_pointwise(
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
    **_ZERO,
)
binary(
    "remainder",
    _remainder,
    allow="if",
    dunders=("__mod__", "__rmod__", "__imod__"),
    # a - b * floor(a / b): the floor is piecewise constant
    **_pointwise(lambda a, b: 1, lambda a, b: -(a // b)),
)


def _pow_dbase(a, b):
    # b * a**(b-1), but 0 where b == 0: x**0 is constant, even at x == 0 where 0 * 0**-1 = nan
    if not isinstance(b, Tensor):
        return 0 if b == 0 else b * a ** (b - 1)
    return tp.where(b == 0, 0.0, b * a ** (b - 1))


def _pow_dexp(a, b, out):
    # out * log(a), but 0 where a == 0 and b >= 0 (0**b is constant there; log(0) = -inf);
    # complex exponents have no order: there only a == 0 counts
    log_a = a.log() if isinstance(a, Tensor) else tp.full_like(out, a).log()
    constant = (a == 0) if b.dtype.is_complex else (b >= 0) & (a == 0)
    return tp.where(constant, 0.0, out * log_a)


binary(
    "pow",
    _pow,
    params="input, exponent",
    shape=_pow_shape,
    scalar_check="ih",  # torch takes a float32/float64/complex exponent at double precision
    dunders=("__pow__", "__rpow__", "__ipow__"),
    **_pointwise(_pow_dbase, _pow_dexp),
)
binary(
    "atan2",
    ufunc="arctan2",
    dtype=M.to_float,
    allow="bif",
    **_pointwise(lambda a, b: b / (a * a + b * b), lambda a, b: -a / (a * a + b * b)),
)


def _tie_split(wins, ties):
    # minimum/maximum: where both inputs are equal each gets half the gradient (torch)
    return tp.where(ties, 0.5, wins)


def _extreme_vjp(loses):
    """minimum/maximum: each input gets the gradient where it is the result, half of it at
    a tie, and 0 where it ``loses`` (so a NaN, which never loses, passes it on): torch's
    ``where(a == b, grad / 2, grad).masked_fill_(a loses, 0)``, selected, not multiplied."""

    def vjp(ctx, grad):
        a, b = ctx.inputs
        need_a, need_b = _needs(ctx)
        split = tp.where(a == b, grad / 2, grad)
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
        _pointwise(lambda a, b: _tie_split(b > a, b == a), lambda a, b: _tie_split(b < a, b == a)),
        vjp=_extreme_vjp(operator.gt),
    ),
)
binary(
    "maximum",
    ufunc="maximum",
    allow="bif",
    **dict(
        _pointwise(lambda a, b: _tie_split(b < a, b == a), lambda a, b: _tie_split(b > a, b == a)),
        vjp=_extreme_vjp(operator.lt),
    ),
)
unary(
    "neg",
    ufunc="negative",
    allow="ifc",
    dunders=("__neg__",),
    vjp=lambda ctx, grad: (-grad,),
    jvp=_same_op("neg"),
)
unary(
    "conj",
    lambda xp, a: xp.conjugate(a) if a.dtype.kind == "c" else a.copy(),
    inplace=False,
    vjp=lambda ctx, grad: (grad.conj(),),
    jvp=_same_op("conj"),
)
unary(
    "abs",
    ufunc="absolute",
    dtype=M.to_real,
    allow="ifc",
    dunders=("__abs__",),
    inplace="if",  # abs_ of a complex tensor cannot hold its real result
    # NOTE: sgn(0) = 0: the gradient of |x| at 0 is 0, as in torch
    **_real_jvp(_pointwise(lambda x: _conj(_sgn(x)))),
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
    **_ZERO,
)
unary(
    "reciprocal",
    lambda xp, a: xp.reciprocal(a),
    dtype=M.to_float,
    **_pointwise(lambda x, out: -out * out),
)
unary("sqrt", ufunc="sqrt", dtype=M.to_float, **_pointwise(lambda x, out: 0.5 / out))
unary(
    "rsqrt",
    lambda xp, a: 1 / xp.sqrt(a),
    dtype=M.to_float,
    **_pointwise(lambda x, out: -0.5 * out * out * out),
)
unary("square", ufunc="square", dtype=_square_dtype, **_pointwise(lambda x: 2 * x))

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
    unary(_name, ufunc=_uf, dtype=M.to_float, **_pointwise(_d))


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


unary("sigmoid", _sigmoid, dtype=M.to_float, **_pointwise(lambda x, out: out * (1 - out)))
unary(
    "erf",
    _erf,
    dtype=M.to_float,
    allow="bif",
    **_pointwise(lambda x: 2 / math.sqrt(math.pi) * (-x * x).exp()),
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


def _gelu_derivative(x, approximate="none"):
    if approximate == "tanh":
        c, k = math.sqrt(2 / math.pi), 0.044715
        t = (c * (x + k * x * x * x)).tanh()
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x)
    # Phi(x) + x * phi(x): the normal cdf plus x times its density
    return 0.5 * (1 + (x / math.sqrt(2)).erf()) + x * (-0.5 * x * x).exp() / math.sqrt(2 * math.pi)


def _silu_derivative(x):
    s = x.sigmoid()
    return s * (1 + x * (1 - s))


unary(
    "relu",
    lambda xp, a: xp.maximum(a, 0).astype(a.dtype),
    allow="if",
    # NOTE: out > 0, not x >= 0: the gradient at 0 is 0, as in torch
    # where(out <= 0, 0, grad) (torch's threshold_backward): NaN passes its gradient
    **_pointwise(lambda x, out: (out <= 0).logical_not()),
)
op(
    "gelu",
    "input, approximate='none'",
    kernel=_gelu,
    shape=_pw_shape("gelu"),
    dtype=functools.partial(M.float_only, op="gelu"),
    allow="f",
    **_pointwise(_gelu_derivative),
)
unary(
    "silu",
    lambda xp, a: a * _sigmoid(xp, a),
    dtype=M.to_float,
    allow="fc",
    **_pointwise(_silu_derivative),
)
op(
    "softplus",
    "input, beta=1.0, threshold=20.0",
    kernel=_softplus,
    shape=_pw_shape("softplus"),
    dtype=functools.partial(M.float_only, op="softplus"),
    allow="f",
    # above the threshold softplus is x itself (slope 1), below it is sigmoid(beta * x)
    **_pointwise(
        lambda x, beta=1.0, threshold=20.0: tp.where(
            x * beta > threshold, 1.0, (x * beta).sigmoid()
        )
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
    **_pointwise(
        lambda x, negative_slope=0.01: tp.where(x > 0, 1.0, tp.full_like(x, negative_slope))
    ),
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
    bounds = [b for b in (min, max) if b is not None]
    if input.dtype is _bool() and all(
        isinstance(b, bool) or (isinstance(b, Tensor) and b.dtype is _bool()) for b in bounds
    ):
        # a bool result: torch has bool kernels for one tensor bound (clamp_min/clamp_max)
        # only, none for a number bound or for both bounds at once
        if any(isinstance(b, bool) for b in bounds):
            raise RuntimeError("clamp(): a bool tensor takes bool bounds as tensors, not numbers")
        if len(bounds) == 2:
            raise NotImplementedError(
                "clamp(): a bool tensor takes one bound at a time (torch has no bool kernel "
                "for both); write x.clamp(min=lo).clamp(max=hi)"
            )
    return M.pointwise_shape("clamp", input, min, max)


def _clamp_partials():
    # Which of input/min/max the output follows (torch's clamp_backward_min_max): x inside
    # [min, max] (ends included), min where x < min (unless min > max: then max wins).
    def d_input(x, lo, hi):
        inside = (x >= lo) if lo is not None else None
        if hi is not None:
            inside = (x <= hi) if inside is None else inside & (x <= hi)
        return inside

    def d_min(x, lo, hi):
        return (x < lo) & (lo < hi) if hi is not None else x < lo

    def d_max(x, lo, hi):
        return (x > hi) | (hi < lo) if lo is not None else x > hi

    return _pointwise(d_input, d_min, d_max)


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
    **_clamp_partials(),
)


def _where_vjp(ctx, grad):
    c, a, b = ctx.inputs
    return (
        None,
        tp.where(c, grad, 0.0) if _needs(ctx)[1] else None,
        tp.where(c, 0.0, grad) if _needs(ctx)[2] else None,
    )


def _where_jvp(ctx, tc, ta, tb):
    if ta is None and tb is None:
        return None
    return tp.where(ctx.inputs[0], 0.0 if ta is None else ta, 0.0 if tb is None else tb)


op(
    "where",
    "condition, input, other",
    n_inputs=3,
    cast=(1, 2),
    shape=_pw_shape("where"),
    kernel=lambda xp, c, a, b: xp.where(c.astype(bool), a, b),
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
        **_ZERO,
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
    **_ZERO,
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
    # CuPy's logical ufuncs have no complex loops; "nonzero" is what they mean anyway.
    return a != 0 if a.dtype.kind == "c" else a


for _name in ("logical_and", "logical_or", "logical_xor"):
    binary(
        _name,
        lambda xp, a, b, _n=_name: getattr(xp, _n)(_truth(a), _truth(b)),
        ufunc=_name,
        dtype=M.to_bool,
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
    return xp.sum(a, axis=_axes(a, dim, "sum"), keepdims=keepdim)


def _count(a, axes) -> int:
    return math.prod(a.shape[i] for i in (axes if axes is not None else range(a.ndim)))


def _mean(xp, a, dim=None, keepdim=False, dtype=None):
    # sum / count: the mean of nothing is nan, silently, as in torch (xp.mean warns)
    axes = _axes(a, dim, "mean")
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


reduction(
    "sum",
    _sum,
    params="input, dim=None, keepdim=False, *, dtype=None",
    dtype=M.sum_like,
    out=True,
    vjp=lambda ctx, grad: (_unreduce(grad, ctx.inputs[0], ctx.params["dim"]),),
    jvp=_same_op("sum"),
)
reduction(
    "mean",
    _mean,
    params="input, dim=None, keepdim=False, *, dtype=None",
    dtype=functools.partial(M.float_only, op="mean"),
    out=True,
    vjp=lambda ctx, grad: (
        _unreduce(grad, ctx.inputs[0], ctx.params["dim"])
        / _numel_over(tuple(ctx.inputs[0].shape), _axes_of(ctx.inputs[0], ctx.params["dim"])),
    ),
    jvp=_same_op("mean"),
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
    return (tp.where(hit, grad / hit.sum(), 0),)


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
    **_real_jvp({"vjp": _var_vjp, "jvp": _reduction(_var_partial)["jvp"]}),
)
reduction(
    "std",
    _std,
    params="input, dim=None, unbiased=None, keepdim=False, *, correction=None",
    dtype=functools.partial(M.real_float_only, op="std"),
    allow="fc",
    out=True,
    **_real_jvp({"vjp": _std_vjp, "jvp": _reduction(_std_partial)["jvp"]}),
)
reduction(
    "norm",
    _norm,
    params="input, p='fro', dim=None, keepdim=False, dtype=None",
    dtype=functools.partial(M.real_float_only, op="norm"),
    allow="fc",
    **_real_jvp({"vjp": _norm_vjp, "jvp": _reduction(_norm_partial)["jvp"]}),
)
reduction(
    "logsumexp",
    _logsumexp,
    params="input, dim, keepdim=False",
    dtype=M.to_float,
    shape=_reduce_shape("logsumexp", check=_logsumexp_check),
    out=True,
    **_reduction(lambda x, out, axes, **_: (x - out).exp()),
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
        return (tp.zeros_like(x, dtype=g.dtype).scatter(dim, index(x, dim), g),)

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
        dtype=lambda d, p: (d, (d, _int64())),
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


def _same_shape(input, *args, **kwargs):
    return input._shape


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
    i = tp.arange(xm.shape[-1], device=x.device)
    between = tp.where(i > i.unsqueeze(-1), xm.unsqueeze(-2), 1.0).cumprod(-1)
    return _exclusive_cumprod(xm, -1).unsqueeze(-1) * between * (i >= i.unsqueeze(-1))


def _cumprod_vjp(ctx, grad):
    x, out, d = ctx.inputs[0], ctx.out, ctx.params["dim"]
    if x.dim() == 0 or x.numel() == 0:
        return (grad,)
    if not bool((x == 0).any()):  # sum over k >= i of grad[k] * out[k] / x[i]
        return (_reverse_cumsum(grad * _conj(out), d) / _conj(x),)
    if not tp.is_grad_enabled():
        return (_cumprod_zeros_vjp(grad, x, out, d),)
    jac = _conj(_cumprod_jacobian(x, d))  # differentiable again (create_graph=True)
    return ((grad.movedim(d, -1).unsqueeze(-2) * jac).sum(-1).movedim(-1, d),)


def _cumprod_zeros_vjp(grad, x, out, d):
    """torch's first-order cumprod_backward for a slice holding zeros, term by term (so an
    inf or nan gradient spreads as it does there): before the first zero z1 the usual
    reversed cumsum over x; at z1, sum over k in [z1, z2) of grad[k] * prod(x(z1, k]) times
    out[z1 - 1]; 0 from there on."""
    xc, outc = _conj(x), _conj(out)
    seen = (x == 0).to(tp.int64).cumsum(d)  # zeros up to and including each position
    before, first_run = seen == 0, seen == 1
    first_zero = first_run & (x == 0)
    between = first_run & ~first_zero
    ahead = _reverse_cumsum((outc * grad).masked_fill(~before, 0), d)
    g = tp.where(before, ahead / xc.masked_fill(~before, 1), 0)
    run = xc.masked_fill(~between, 1).cumprod(d) * grad.masked_fill(~first_run, 0)
    prev = tp.cat([tp.ones_like(outc.narrow(d, 0, 1)), outc.narrow(d, 0, x.shape[d] - 1)], d)
    return tp.where(first_zero, run.sum(d, keepdim=True) * prev, g)


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
    jvp=_same_op("cumsum"),
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
    e = xp.exp(a - xp.amax(a, axis=d, keepdims=True)) if a.size else a
    return e / xp.sum(e, axis=d, keepdims=True) if a.size else a


def _softmax_jvp(ctx, t):
    out = ctx.out
    return None if t is None else out * (t - (t * out).sum(ctx.params["dim"], keepdim=True))


def _log_softmax(xp, a, dim, dtype=None):
    d = M.wrap_dim(dim, a.ndim, "log_softmax")
    if a.ndim == 0:  # a - a: nan for inf and nan, as torch
        return a - a
    if not a.size:
        return a
    # torch's kernel: shifted - log(sum(exp(shifted))) with shifted = a - max, so an inf
    # maximum makes the whole slice nan (logsumexp's inf rule does not apply here)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = a - xp.amax(a, axis=d, keepdims=True)
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=d, keepdims=True))


op(
    "softmax",
    "input, dim, dtype=None",
    kernel=_softmax,
    shape=_same_shape_dim("softmax"),
    dtype=functools.partial(M.softmax_like, op="softmax"),
    allow="bifc",  # complex only with a real dtype= (torch converts the input first)
    vjp=lambda ctx, grad: (_softmax_jvp(ctx, grad),),  # the Jacobian is symmetric
    jvp=lambda ctx, t: _softmax_jvp(ctx, t),
)
op(
    "log_softmax",
    "input, dim, dtype=None",
    kernel=_log_softmax,
    shape=_same_shape_dim("log_softmax"),
    dtype=functools.partial(M.softmax_like, op="log_softmax"),
    allow="bifc",  # complex only with a real dtype= (torch converts the input first)
    vjp=lambda ctx, grad: (grad - ctx.out.exp() * grad.sum(ctx.params["dim"], keepdim=True),),
    jvp=lambda ctx, t: (
        None if t is None else t - (ctx.out.exp() * t).sum(ctx.params["dim"], keepdim=True)
    ),
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


_mm = dict(n_inputs=2, promote="same", allow="ifc", out=True, vjp=_matmul_vjp)
op(
    "matmul",
    "input, other",
    kernel=lambda xp, a, b: xp.matmul(a, b),
    shape=_matmul_shape,
    dunders=("__matmul__", "__rmatmul__"),
    jvp=_bilinear("matmul"),
    **_mm,
)
op(
    "mm",
    "input, mat2",
    kernel=lambda xp, a, b: xp.matmul(a, b),
    shape=_mm_shape("mm", 2),
    jvp=_bilinear("mm"),
    **_mm,
)
op(
    "bmm",
    "input, mat2",
    kernel=lambda xp, a, b: xp.matmul(a, b),
    shape=_mm_shape("bmm", 3),
    jvp=_bilinear("bmm"),
    **_mm,
)
op(
    "dot",
    "input, other",
    kernel=lambda xp, a, b: xp.dot(a, b),
    shape=_dot_shape,
    jvp=_bilinear("dot"),
    **dict(_mm, vjp=_pointwise(lambda a, b: b, lambda a, b: a)["vjp"]),
)


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
    vjp=lambda ctx, grad: (
        grad @ _conj(ctx.inputs[1]) if _needs(ctx)[0] else None,
        _conj(ctx.inputs[0]) @ grad if _needs(ctx)[1] else None,
    ),
    jvp=_bilinear("outer"),
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
    # spelled out: numpy cannot sum the dims of an ellipsis away ("...->")
    terms, out, _ = _einsum_explicit(equation, arrays)
    return xp.einsum(",".join(terms) + "->" + out, *arrays)


def _einsum_dtype(d, params):
    """The result dtype of torch 2.13's einsum for integer and bool operands, which follows
    its plan: a letter summed away that only one operand has is summed by that operand's
    ``sum()`` (integers and bool accumulate in int64 there, as ``tp.sum`` does); operands
    are then multiplied in turn (dtypes promote) and letters they share are contracted by
    bmm/dot (no promotion: the dtypes must agree, and bool has no bmm)."""
    if d.category > 1:
        return M.same(d, params)
    lhs, arrow, rhs = params["equation"].replace(" ", "").partition("->")
    terms = [t.replace("...", ".") for t in lhs.split(",")]
    if arrow:
        out = set(rhs.replace("...", "."))
    else:
        out = {c for c in "".join(terms) if c == "." or lhs.count(c) == 1}
    last = {c: i for i, t in enumerate(terms) for c in t}
    owners = {c: sum(c in t for t in terms) for c in last}

    def own_sum(i):  # the dtype of operand i after summing its private letters
        private = any(c not in out and owners[c] == 1 for c in terms[i])
        return _int64() if private else d

    result = own_sum(0)
    for i in range(1, len(terms)):
        operand = own_sum(i)
        shared = [c for c in terms[i] if c not in out and owners[c] > 1 and last[c] == i]
        if not shared:
            result = tp.promote_types(result, operand)
        elif result is not operand:
            raise RuntimeError(
                f"einsum(): {params['equation']!r} on {d} operands contracts an int64 "
                f"partial sum with a {d} operand, which torch refuses ('expected scalar "
                "type Long'); convert the operands with .long() first"
            )
        elif result is _bool():
            raise NotImplementedError(
                f"einsum(): {params['equation']!r} contracts bool operands (torch has no "
                "bool bmm); convert them with .long() or .float() first"
            )
    return result, result


def _einsum_explicit(equation, operands):
    """(subscripts of each operand, of the output, unused letters): ``...`` spelled out in
    letters the equation does not use, an implicit output made explicit (numpy's rule)."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    free = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in lhs]
    ndims = [len(t.shape) for t in operands]  # tensors or arrays
    n_ell = max((n - len(s) + 3 for s, n in zip(terms, ndims) if "..." in s), default=0)
    ell, free = "".join(free[:n_ell]), free[n_ell:]
    terms = [
        s.replace("...", ell[n_ell - (n - len(s) + 3) :]) if "..." in s else s
        for s, n in zip(terms, ndims)
    ]
    if arrow:
        out = rhs.replace("...", ell)
    else:
        out = ell + "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
    return terms, out, free


def _einsum_vjp(ctx, grad):
    """The gradient of operand i is an einsum of the output gradient with the other
    operands, onto operand i's subscripts. A letter repeated in them (a diagonal, "ii")
    gets a fresh letter tied to it by an identity matrix; a letter found nowhere else (summed
    only there) gets a vector of ones, which broadcasts the gradient along it."""
    ops = ctx.inputs
    terms, out, free = _einsum_explicit(ctx.params["equation"], ops)
    grads = []
    for i, x in enumerate(ops):
        if not _needs(ctx)[i]:
            grads.append(None)
            continue
        parts = [(s, _conj(t)) for j, (s, t) in enumerate(zip(terms, ops)) if j != i]
        parts.append((out, grad))
        target, fresh = "", iter(free)
        for c, n in zip(terms[i], x.shape):
            if c in target:
                f = next(fresh)
                parts.append((c + f, tp.eye(n, dtype=grad.dtype, device=grad.device)))
                c = f
            target += c
        for c, n in zip(target, x.shape):
            if not any(c in s for s, _ in parts):
                parts.append((c, tp.ones(n, dtype=grad.dtype, device=grad.device)))
        spec = ",".join(s for s, _ in parts) + "->" + target
        grads.append(tp.einsum(spec, *(t for _, t in parts)))
    return tuple(grads)


def _einsum_jvp(ctx, *tangents):
    ops, eq = ctx.inputs, ctx.params["equation"]
    return _total(
        tp.einsum(eq, *ops[:i], t, *ops[i + 1 :]) for i, t in enumerate(tangents) if t is not None
    )


op(
    "einsum",
    "equation, *operands",
    n_inputs="star",
    kernel=_einsum_kernel,
    shape=_einsum_shape,
    dtype=_einsum_dtype,
    promote="same",
    method=False,
    vjp=_einsum_vjp,
    jvp=_einsum_jvp,
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
        return tuple(tp.zeros(0, dtype=grad.dtype, device=grad.device) for _ in tensors)
    grads, start = [], 0
    d = M.wrap_dim(ctx.params["dim"], grad.dim(), "cat")
    for t in tensors:
        if tuple(t.shape) == (0,) and grad.dim() != 1:
            grads.append(tp.zeros(0, dtype=grad.dtype, device=grad.device))
            continue
        grads.append(grad.narrow(d, start, t.shape[d]))
        start += t.shape[d]
    return tuple(grads)


def _seq_jvp(name):
    """cat/stack of the tangents (zeros for inputs without one)."""

    def jvp(ctx, *tangents):
        if all(t is None for t in tangents):
            return None
        ts = [tp.zeros_like(x) if t is None else t for x, t in zip(ctx.inputs[0], tangents)]
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
    # NOTE: no wrapping of negative indices: torch's gather/scatter/index_select refuse them
    bad = (idx < 0) | (idx >= n)
    if bool(bad.any()):
        first = int(idx[bad].reshape(-1)[0])
        raise RuntimeError(
            f"{name}(): index {first} is out of bounds for dimension {d} with size {n}"
            + (" (negative indices are not wrapped here)" if first < 0 and -n <= first else "")
        )


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
    a1, i1 = a.reshape(_as_1d(a.shape)), idx.reshape(_as_1d(idx.shape))
    _bounds(xp, i1, a1.shape[d], "gather", d)
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
        tp.zeros_like(ctx.inputs[0], dtype=grad.dtype).scatter(
            ctx.inputs[1], ctx.inputs[2], grad, reduce="add"
        ),
        None,
        None,
    ),
    jvp=_same_op("gather"),
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
    _bounds(xp, idx, flat.shape[d], "scatter", d)
    # an open grid (CuPy's indices() has no sparse=): index i varies along axis i only
    grid = [
        xp.arange(n).reshape((-1,) + (1,) * (idx.ndim - 1 - i)) for i, n in enumerate(idx.shape)
    ]
    grid[d] = idx
    vals = value if src is None else src.reshape(_as_1d(src.shape))[tuple(map(slice, idx.shape))]
    if reduce is None:
        flat[tuple(grid)] = vals
        return out
    accumulate = np.add.at if reduce == "add" else np.multiply.at
    if xp is np:
        accumulate(flat, tuple(grid), vals)
        return out
    # CuPy's ufunc.at knows add on a few dtypes only and no multiply: accumulate on the host
    host = flat.get()
    accumulate(host, tuple(g.get() for g in grid), vals.get() if hasattr(vals, "get") else vals)
    return xp.asarray(host).reshape(a.shape)


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
            g = tp.cat([g, tp.zeros(pad, dtype=g.dtype, device=g.device)], d)
    return g


def _scatter_vjp(ctx, grad):
    _scatter_reduce_check(ctx)
    x, dim, index, src = ctx.inputs
    # plain scatter overwrites: the overwritten elements of x get no gradient
    gx = grad if ctx.params["reduce"] == "add" else grad.scatter(dim, index, value=0)
    gsrc = _pad_to(grad.gather(dim, index), tuple(src.shape)) if _needs(ctx)[3] else None
    return gx, None, None, gsrc


def _scatter_jvp(ctx, tx, _dim, _index, tsrc):
    _scatter_reduce_check(ctx)
    x, dim, index, src = ctx.inputs
    if tx is None and tsrc is None:
        return None
    tx = tp.zeros_like(x) if tx is None else tx
    if src is None:
        return tx.scatter(dim, index, value=0)
    tsrc = tp.zeros_like(src) if tsrc is None else tsrc
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
    _bounds(xp, idx, a.shape[d] if a.ndim else 1, "index_select", d)
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
    jvp=_same_op("index_select"),
)


def _index_select_vjp(x, dim, index, grad):
    # added back along dim at the selected positions (an index may repeat)
    if x.dim() == 0:
        return grad
    d = M.wrap_dim(dim, x.dim(), "index_select")
    along = [1] * x.dim()
    along[d] = -1
    index = index.long().reshape(along).expand(*grad.shape)
    return tp.zeros_like(x, dtype=grad.dtype).scatter(d, index, grad, reduce="add")


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
    scalar_check="ihfc",
    shape=_masked_fill_shape,
    inplace=True,
    vjp=lambda ctx, grad: (
        grad.masked_fill(ctx.inputs[1], 0) if _needs(ctx)[0] else None,
        None,
        tp.where(ctx.inputs[1], grad, 0.0) if _needs(ctx)[2] else None,
    ),
    jvp=lambda ctx, tx, tmask, tv: (
        None
        if tx is None and tv is None
        else tp.where(ctx.inputs[1], 0.0 if tv is None else tv, 0.0 if tx is None else tx)
    ),
)

# ---- copies ---------------------------------------------------------------------------------

op(
    "clone",
    "input, *, memory_format=None",
    kernel=lambda xp, a, memory_format=None: a.copy(),
    shape=_same_shape,
    promote="first",
    vjp=lambda ctx, grad: (grad,),
    jvp=_same_op("clone"),
)
op(
    "contiguous_copy",
    "input",
    kernel=lambda xp, a: a.copy(order="C"),
    shape=_same_shape,
    promote="first",
    method=False,
    vjp=lambda ctx, grad: (grad,),
    jvp=_same_op("contiguous_copy"),
)


def _to_dtype_rule(d, params):
    return d, params["dtype"]


op(
    "_to_copy",
    "input, dtype",
    kind="other",
    kernel=lambda xp, a, dtype: a,  # the dispatcher casts the result to ``dtype``
    shape=_same_shape,
    dtype=_to_dtype_rule,
    promote="first",
    method=False,
    vjp=lambda ctx, grad: (grad,),  # fit_grad casts the gradient back to the input's dtype
    jvp=lambda ctx, t: None if t is None else OPS["_to_copy"].fn(t, ctx.params["dtype"]),
)

# ---- advanced indexing (``x[idx]`` / ``x[idx] = v`` with tensor, list or mask indices) -----------
# ``indices`` is a tuple of numpy/CuPy index arrays, slices and None, already checked by
# _indexing.py; these rows exist so that autograd records advanced indexing.


def _host(i):
    return i.get() if hasattr(i, "get") and not isinstance(i, np.ndarray) else i


def _index_shape(input, *, indices):
    probe = np.broadcast_to(np.empty((), np.int8), tuple(input.shape))
    return probe[tuple(_host(i) for i in indices)].shape


def _index_put(xp, a, v, *, indices, accumulate=False):
    out = a.copy()
    if not accumulate:
        out[indices] = v
        return out
    if xp is np:
        np.add.at(out, indices, v)
        return out
    # CuPy's add.at covers a few dtypes only: accumulate on the host (as scatter does)
    host = out.get()
    np.add.at(host, tuple(_host(i) for i in indices), _host(v))
    return xp.asarray(host)


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
    zeros = tp.zeros(x.shape, dtype=grad.dtype, device=grad.device)
    return (OPS["_index_put"].fn(zeros, grad, indices=ctx.params["indices"], accumulate=True),)


def _index_put_vjp(ctx, grad):
    need_x, need_v = _needs(ctx)
    idx, acc = ctx.params["indices"], ctx.params["accumulate"]
    gx = None
    if need_x:
        # overwritten positions got no gradient through the input (unless accumulated)
        gx = (
            grad
            if acc
            else OPS["_index_put"].fn(
                grad, tp.zeros((), dtype=grad.dtype, device=grad.device), indices=idx
            )
        )
    gv = OPS["_index"].fn(grad, indices=idx) if need_v else None
    return (gx, gv)


def _index_put_jvp(ctx, tx, tv=None):
    if tx is None and tv is None:
        return None
    x, v = ctx.inputs
    tx = tp.zeros_like(x) if tx is None else tx
    tv = tp.zeros((), dtype=x.dtype, device=x.device) if tv is None else tv
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

# ---- views ------------------------------------------------------------------------------------


def view_op(name, params, geometry, **kw):
    return op(name, params, kind="view", shape=geometry, promote="first", **kw)


def _reshape_back(ctx, grad):
    return (grad.reshape(ctx.inputs[0].shape),)


def _inverse_permutation(ctx, grad):
    dims = ctx.params["dims"]
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    axes = [M.wrap_dim(d, grad.dim(), "permute") for d in dims]
    return (grad.permute(*sorted(range(len(axes)), key=axes.__getitem__)),)


_RESHAPE = {
    "vjp": _reshape_back,
    "jvp": lambda ctx, t: None if t is None else t.reshape(ctx.out.shape),
}


def _same_view(name, vjp):
    return {"vjp": vjp, "jvp": _same_op(name)}


view_op("view", "input, *shape", V.view, **_RESHAPE)
view_op("reshape", "input, *shape", V.reshape, **_RESHAPE)
view_op("permute", "input, *dims", V.permute, **_same_view("permute", _inverse_permutation))
view_op(
    "transpose",
    "input, dim0, dim1",
    V.transpose,
    **_same_view(
        "transpose",
        lambda ctx, grad: (grad.transpose(ctx.params["dim0"], ctx.params["dim1"]),),
    ),
)
view_op("t", "input", V.t_, **_same_view("t", lambda ctx, grad: (grad.t(),)))
# expand: the gradient comes back expanded; autograd sums it down to the input's shape
view_op("expand", "input, *sizes", V.expand, **_same_view("expand", lambda ctx, grad: (grad,)))
view_op(
    "expand_as",
    "input, other",
    V.expand_as,
    n_inputs=1,
    **_same_view("expand_as", lambda ctx, grad: (grad,)),
)
view_op("squeeze", "input, dim=None", V.squeeze, **_RESHAPE)
view_op("unsqueeze", "input, dim", V.unsqueeze, **_RESHAPE)
view_op("flatten", "input, start_dim=0, end_dim=-1", V.flatten, **_RESHAPE)
view_op("unflatten", "input, dim, sizes", V.unflatten, **_RESHAPE)
view_op("narrow", "input, dim, start, length", V.narrow, **_by_positions("narrow"))
view_op("select", "input, dim, index", V.select, **_by_positions("select"))
view_op(
    "as_strided",
    "input, size, stride, storage_offset=None",
    V.as_strided,
    vjp=_as_strided_vjp,
    jvp=_as_strided_jvp,
)
view_op(
    "movedim",
    "input, source, destination",
    V.movedim,
    **_same_view(
        "movedim",
        lambda ctx, grad: (grad.movedim(ctx.params["destination"], ctx.params["source"]),),
    ),
)
view_op("diagonal", "input, offset=0, dim1=0, dim2=1", V.diagonal, **_by_positions("diagonal"))
view_op(
    "unbind",
    "input, dim=0",
    V.unbind,
    multi=True,
    **_same_view("unbind", lambda ctx, grads: (tp.stack(grads, ctx.params["dim"]),)),
)
view_op(
    "split",
    "input, split_size_or_sections, dim=0",
    V.split,
    multi=True,
    **_same_view("split", lambda ctx, grads: (tp.cat(grads, ctx.params["dim"]),)),
)
view_op(
    "chunk",
    "input, chunks, dim=0",
    V.chunk,
    multi=True,
    **_same_view("chunk", lambda ctx, grads: (tp.cat(grads, ctx.params["dim"]),)),
)
