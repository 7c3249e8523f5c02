"""The derivative helpers of the op table: combinators that build a row's ``vjp``/``jvp``
columns, and the pieces formulas share.

vjp(ctx, grad) -> one gradient per tensor input of the row (None where an input is a
number or needs none); jvp(ctx, *tangents) -> the output's tangent (tangents align with the
inputs, None meaning zero). ``ctx`` has ``inputs`` (as passed), ``params`` and ``out``.
Gradients may come back broadcast: autograd sums them to each input's shape. Formulas use
TensorPlay ops only, so that they are themselves differentiated (create_graph=True).
Complex follows PyTorch: the gradient is the conjugate Wirtinger derivative, so a
holomorphic op with derivative d(x) has vjp grad * conj(d) and jvp tangent * d.

A *rule* is ``{"vjp": ..., "jvp": ...}``, spread into a row (``op(..., **rule)``). The
formulas of one op live with its row (``tensorplay/_rows/``); what is here serves many.
"""

from __future__ import annotations

import functools
import operator

from tensorplay import _dtype as D, _meta as M
from tensorplay._dispatch import OPS, call
from tensorplay._factories import arange, zeros
from tensorplay._tensor import Tensor, strides_of
from tensorplay.autograd._formula_reads import reads, takes_out

# ``tp.zeros_like`` and friends for the formulas (``_rows/`` import them from here): the very
# functions users call, which honour ``__tensorplay_function__`` (handlers compare
# ``func is tp.zeros_like``)
from tensorplay.overrides import full_like, ones_like, zeros_like  # noqa: F401

# ---- the functions formulas call ---------------------------------------------------------
# Op-table functions are looked up when called: the rows register after this module loads.


def _row_function(name):
    def call_row(*args, **kwargs):
        return OPS[name].fn(*args, **kwargs)

    call_row.__name__ = call_row.__qualname__ = name
    return call_row


where, cat, stack, einsum = map(_row_function, ("where", "cat", "stack", "einsum"))


# ---- small pieces ------------------------------------------------------------------------


def conj(x):
    if isinstance(x, Tensor):
        return x.conj() if x.dtype.is_complex else x
    return x.conjugate() if isinstance(x, complex) else x


def times(g, d):
    if isinstance(d, Tensor) and d.dtype is D.bool:
        # a 0/1 partial selects: an inf gradient where it is 0 gives 0, not inf * 0 = nan
        # (torch masks with where/masked_fill the same way)
        return where(d, g, 0)
    return g if isinstance(d, (int, float)) and not isinstance(d, bool) and d == 1 else g * d


def total(terms):
    terms = [t for t in terms if t is not None]
    return functools.reduce(operator.add, terms) if terms else None


def _flat(inputs):
    return [y for x in inputs for y in (x if isinstance(x, (list, tuple)) else (x,))]


def sgn(x):
    """x / |x| (0 at 0): the gradient of |x| (torch's sgn; sign for real x)."""
    return where(x == 0, 0, x / x.abs()) if x.dtype.is_complex else x.sign()


def axes_of(x, dim):
    # a 0-d input accepts dim 0 / -1 but has no axis to name
    return M.reduce_dims(dim, x.dim(), "backward") if x.dim() else ()


def unreduce(g, x, dim, keepdim=False):
    """A reduction's output (or gradient) broadcast back over the input's shape."""
    if g.dim() == 0:  # a full reduction: expand broadcasts a 0-d tensor directly
        return g.expand(*x.shape)
    kept = M.reduced_shape(tuple(x.shape), axes_of(x, dim), True)
    return g.reshape(kept).expand(*x.shape)


# ---- rules -------------------------------------------------------------------------------


def pointwise_rule(*partials):
    """vjp and jvp of a pointwise op from its partial derivatives, one per input, each
    ``d(*inputs, out, **params)`` (a tensor or a number)."""

    def partial(d, ctx):
        out = (ctx.out,) if takes_out(d) else ()
        inputs = ctx.inputs
        read = reads(d)
        args = [inputs[i] if i >= len(read) or read[i] else None for i in range(len(inputs))]
        return d(*args, *out, **ctx.params)

    def vjp(ctx, grad):
        return tuple(
            times(grad, conj(partial(d, ctx))) if needed else None
            for d, needed in zip(partials, ctx.needs_input_grad)
        )

    def jvp(ctx, *tangents):
        return total(times(t, partial(d, ctx)) for d, t in zip(partials, tangents) if t is not None)

    # autograd saves the op's result only when a formula reads it (asked once per row)
    vjp.reads_out = lambda: any(takes_out(d) for d in partials)
    return {"vjp": vjp, "jvp": jvp}


def linear_pair_rule(sign):
    """add/sub (``a + sign * alpha * b``): derivatives are constants, so no saved input is
    read (and an in-place change of an input after the op does not invalidate backward)."""

    def vjp(ctx, grad):
        need_a, need_b = ctx.needs_input_grad
        k = sign * ctx.params["alpha"]
        return (grad if need_a else None, times(grad, conj(k)) if need_b else None)

    def jvp(ctx, ta, tb=None):
        k = sign * ctx.params["alpha"]
        return total([ta, times(tb, k) if tb is not None else None])

    vjp.reads_out = lambda: False
    return {"vjp": vjp, "jvp": jvp}


# piecewise constant (floor, sign, rounded division): zero almost everywhere, as in torch
ZERO_RULE = {
    "vjp": lambda ctx, grad: tuple(zeros_like(grad) if n else None for n in ctx.needs_input_grad),
    "jvp": lambda ctx, *tangents: zeros_like(ctx.out),
}


def real_jvp(rule):
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


def same_op_jvp(name):
    """The jvp of an op linear in its first input: the op itself, applied to the tangent."""

    def jvp(ctx, t, *rest):
        return None if t is None else call(OPS[name], (t, *ctx.inputs[1:]), ctx.params)

    return jvp


def bilinear_jvp(name):
    """The jvp of an op linear in each of its two inputs: f(ta, b) + f(a, tb)."""

    def jvp(ctx, ta, tb=None):
        a, b = ctx.inputs
        f = OPS[name].fn
        return total([f(ta, b) if ta is not None else None, f(a, tb) if tb is not None else None])

    return jvp


def reduction_rule(partial, *, dim_param="dim"):
    """vjp and jvp of a reduction from its elementwise partial ``partial(x, out, axes,
    **params)`` (``out`` broadcast back over x): vjp = grad * conj(partial),
    jvp = sum(partial * tangent) over the reduced dims."""

    def parts(ctx):
        x, dim = ctx.inputs[0], ctx.params.get(dim_param)
        out = (unreduce(ctx.out, x, dim),) if takes_out(partial) else ()
        return x, dim, partial(x, *out, axes_of(x, dim), **ctx.params)

    def vjp(ctx, grad):
        x, dim, d = parts(ctx)
        return (unreduce(grad, x, dim) * conj(d),)

    def jvp(ctx, t):
        if t is None:
            return None
        x, dim, d = parts(ctx)
        return (d * t).sum(dim=dim, keepdim=ctx.params.get("keepdim", False))

    return {"vjp": vjp, "jvp": jvp}


def _positions(name, x, params):
    """The flat index into x of each element of x's view by row ``name`` (a tuple of index
    tensors for multi-output views): the view applied to ``arange(x.numel())``."""
    index = arange(x.numel(), device=x.device).reshape(x.shape)
    return call(OPS[name], (index,), params)


def positions_rule(name):
    """vjp and jvp of view ``name`` through the flat positions it reads: the gradient is
    scattered (added, for overlapping views) into zeros shaped like the input; the tangent
    is gathered from them. Both are TensorPlay ops, so this is differentiable too."""

    def vjp(ctx, grad):
        x = ctx.inputs[0]
        pos = _positions(name, x, ctx.params).reshape(-1)
        flat = zeros(x.numel(), dtype=grad.dtype, device=grad.device)
        return (flat.scatter(0, pos, grad.reshape(-1), reduce="add").reshape(x.shape),)

    def jvp(ctx, t):
        if t is None:
            return None
        pos = _positions(name, ctx.inputs[0], ctx.params)
        return t.reshape(-1).index_select(0, pos.reshape(-1)).reshape(pos.shape)

    return {"vjp": vjp, "jvp": jvp}


# ---- storage geometry (as_strided, and views of a base changed in place) -----------------


def storage_cells(x, params):
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
    cells = arange(hi - lo, device=x.device)
    x_cells, view_cells = (cells.as_strided(sh, sts, o - lo).reshape(-1) for sh, sts, o in geos)
    return x_cells, view_cells, hi - lo
