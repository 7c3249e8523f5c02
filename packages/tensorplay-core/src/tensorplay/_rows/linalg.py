"""Linear algebra rows: ``matmul``, ``mm``, ``bmm``, ``dot``, ``outer`` (and its old name
``ger``), ``einsum``, ``linear``."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tensorplay import _cublas, _device_checks, _dtype as D, _meta as M
from tensorplay._dispatch import OpDef
from tensorplay._factories import eye, ones
from tensorplay._rows import row_maker
from tensorplay._tensor import Tensor
from tensorplay.autograd._derivatives import (
    bilinear_jvp,
    conj,
    einsum,
    pointwise_rule,
    total,
)

ROWS: list[OpDef] = []
op = row_maker(ROWS)


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


def _matmul_vjp(ctx, grad):
    # 1-D operands act as a row (left) / column (right) matrix; batch dimensions that were
    # broadcast are summed by autograd (fit_grad)
    a, b = ctx.inputs
    need_a, need_b = ctx.needs_input_grad
    if a.dim() + b.dim() == 3 and grad.dim() == 1:
        # a vector and a matrix: a matrix-vector product and an outer product (one op each,
        # where the general form below unsqueezes, transposes and squeezes around them)
        outer = _OUTER.fn
        if a.dim() == 1:
            return (conj(b) @ grad if need_a else None, outer(conj(a), grad) if need_b else None)
        return (outer(grad, conj(b)) if need_a else None, conj(a).mT @ grad if need_b else None)
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    g = grad.unsqueeze(-1) if b.dim() == 1 else grad
    g = g.unsqueeze(-2) if a.dim() == 1 else g
    ga = g @ conj(b2).mT if need_a else None
    gb = None
    if need_b:
        if b.dim() == 2 and a2.dim() > 2:
            # a weight shared by every batch: one product over the flattened batch (as
            # torch's), not a batched product summed over the batch afterwards
            k, n = a2._shape[-1], g._shape[-1]
            gb = conj(a2).reshape(-1, k).mT @ g.reshape(-1, n)
        else:
            gb = conj(a2).mT @ g
    if ga is not None and a.dim() == 1:
        ga = ga.squeeze(-2)
    if gb is not None and b.dim() == 1:
        gb = gb.squeeze(-1)
    return ga, gb


def _matmul_kernel(xp, a, b):
    """numpy's or CuPy's matmul (numpy's dot for two matrices); on CUDA, cuBLAS called
    directly where it applies (it also runs inside a CUDA graph capture, where CuPy's matmul
    refuses to)."""
    if xp is not np:
        r = _cublas.matmul(a, b)
        if r is not None:
            return r
        if _device_checks._capturing:
            raise RuntimeError(
                f"matmul(): the product of {a.dtype} operands shaped {tuple(a.shape)} and "
                f"{tuple(b.shape)} goes through CuPy's matmul, which cannot run while a CUDA "
                "graph is being captured; inside a captured region use float16/32/64 "
                "operands of at least 2 dims whose batch shapes are equal (or 2-D weights)"
            )
    elif a.ndim == 2 and b.ndim == 2:
        # numpy's matmul leaves BLAS for a contraction of length 1 (a batch-1 weight
        # gradient is such an outer product); its dot calls BLAS for every 2-D pair
        return np.dot(a, b)
    return xp.matmul(a, b)


_mm = dict(n_inputs=2, promote="same", allow="ifc", out=True, vjp=_matmul_vjp)
op(
    "matmul",
    "input, other",
    kernel=_matmul_kernel,
    shape=_matmul_shape,
    dunders=("__matmul__", "__rmatmul__"),
    jvp=bilinear_jvp("matmul"),
    **_mm,
)
op(
    "mm",
    "input, mat2",
    kernel=_matmul_kernel,
    shape=_mm_shape("mm", 2),
    jvp=bilinear_jvp("mm"),
    **_mm,
)
op(
    "bmm",
    "input, mat2",
    kernel=_matmul_kernel,
    shape=_mm_shape("bmm", 3),
    jvp=bilinear_jvp("bmm"),
    **_mm,
)
op(
    "dot",
    "input, other",
    kernel=lambda xp, a, b: xp.dot(a, b),
    shape=_dot_shape,
    jvp=bilinear_jvp("dot"),
    **dict(_mm, vjp=pointwise_rule(lambda a, b: b, lambda a, b: a)["vjp"]),
)


def _outer_shape(input, vec2):
    if input.dim() != 1 or vec2.dim() != 1:
        raise RuntimeError(f"outer(): expected 1D vectors, got {input.dim()}D and {vec2.dim()}D")
    return input._shape + vec2._shape


_OUTER = op(
    "outer",
    "input, vec2",
    n_inputs=2,
    kernel=lambda xp, a, b: xp.multiply.outer(a, b),
    shape=_outer_shape,
    out=True,
    vjp=lambda ctx, grad: (
        grad @ conj(ctx.inputs[1]) if ctx.needs_input_grad[0] else None,
        conj(ctx.inputs[0]) @ grad if ctx.needs_input_grad[1] else None,
    ),
    jvp=bilinear_jvp("outer"),
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
        return D.int64 if private else d

    result = own_sum(0)
    for i in range(1, len(terms)):
        operand = own_sum(i)
        shared = [c for c in terms[i] if c not in out and owners[c] > 1 and last[c] == i]
        if not shared:
            result = D.promote_types(result, operand)
        elif result is not operand:
            raise RuntimeError(
                f"einsum(): {params['equation']!r} on {d} operands contracts an int64 "
                f"partial sum with a {d} operand, which torch refuses ('expected scalar "
                "type Long'); convert the operands with .long() first"
            )
        elif result is D.bool:
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
        if not ctx.needs_input_grad[i]:
            grads.append(None)
            continue
        parts = [(s, conj(t)) for j, (s, t) in enumerate(zip(terms, ops)) if j != i]
        parts.append((out, grad))
        target, fresh = "", iter(free)
        for c, n in zip(terms[i], x.shape):
            if c in target:
                f = next(fresh)
                parts.append((c + f, eye(n, dtype=grad.dtype, device=grad.device)))
                c = f
            target += c
        for c, n in zip(target, x.shape):
            if not any(c in s for s, _ in parts):
                parts.append((c, ones(n, dtype=grad.dtype, device=grad.device)))
        spec = ",".join(s for s, _ in parts) + "->" + target
        grads.append(einsum(spec, *(t for _, t in parts)))
    return tuple(grads)


def _einsum_jvp(ctx, *tangents):
    ops, eq = ctx.inputs, ctx.params["equation"]
    return total(
        einsum(eq, *ops[:i], t, *ops[i + 1 :]) for i, t in enumerate(tangents) if t is not None
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


# ---- linear (nn.Linear's op) ---------------------------------------------------------------


def _linear_shape(input, weight, bias=None):
    for name, t in (("input", input), ("weight", weight)):
        if not isinstance(t, Tensor):
            raise TypeError(f"linear(): argument '{name}' must be a Tensor, not {type(t).__name__}")
    if bias is not None and not isinstance(bias, Tensor):
        raise TypeError(
            f"linear(): argument 'bias' must be a Tensor or None, not {type(bias).__name__}"
        )
    xs, ws = input._shape, weight._shape
    if not xs or not ws:
        raise RuntimeError(
            f"linear(): both arguments to linear need to be at least 1D, but they are "
            f"{len(xs)}D and {len(ws)}D"
        )
    if len(ws) > 2:
        raise RuntimeError(
            f"linear(): weight must be 1-D (in_features,) or 2-D (out_features, in_features), "
            f"got shape {ws}"
        )
    if xs[-1] != ws[-1]:
        raise RuntimeError(
            f"linear(): input shape {xs} and weight shape {ws} cannot be multiplied: input's "
            f"last dimension ({xs[-1]}) must equal weight's in_features ({ws[-1]})"
        )
    out = xs[:-1] + ws[:-1]
    if bias is not None:
        bs = bias._shape
        # the bias is added in place to the product: it broadcasts to it, never enlarges it
        if len(bs) > len(out) or any(b not in (1, n) for b, n in zip(bs[::-1], out[::-1])):
            raise RuntimeError(
                f"linear(): bias shape {bs} does not broadcast to the output shape {out} of "
                f"input {xs} and weight {ws}"
                + (f"; a bias is usually ({ws[0]},)" if len(ws) == 2 else "")
            )
    return out


def _linear_kernel(xp, x, w, b=None):
    """One 2-D product: the input's leading dims flattened (a copy where they do not
    collapse), so numpy makes one BLAS call and CUDA one cuBLAS call (capturable)."""
    if x.ndim == 2 and w.ndim == 2:
        r = _matmul_kernel(xp, x, w.T)
    else:
        lead, out, k = x.shape[:-1], w.shape[:-1], x.shape[-1]
        r = _matmul_kernel(xp, x.reshape(math.prod(lead), k), w.reshape(math.prod(out), k).T)
        r = r.reshape(lead + out)
    if b is not None:
        r += b  # r is a fresh array: no second allocation
    return r


def _linear_vjp(ctx, grad):
    """With W as a matrix (a 1-D weight is one row whose output dim was dropped) and the
    input's leading dims flattened: grad_input = grad @ W, grad_weight = grad^T @ input,
    grad_bias = grad summed over the leading dims (autograd sums what is left over, for a
    bias broadcast along more dims)."""
    # saved inputs are read (and version-checked) only where a gradient needs them
    need, w = ctx.needs_input_grad, ctx.inputs[1]
    matrix = len(w._shape) == 2
    w2 = w if matrix else w.unsqueeze(0)
    g = grad if matrix else grad.unsqueeze(-1)
    gx = g @ conj(w2) if need[0] else None
    gw = None
    if need[1]:
        x = ctx.inputs[0]
        (o, k), m = w2._shape, math.prod(x._shape[:-1])
        g2 = g if len(g._shape) == 2 else g.reshape(m, o)
        x2 = x if len(x._shape) == 2 else x.reshape(m, k)
        gw = g2.mT @ conj(x2)
        gw = gw if matrix else gw.squeeze(0)
    gb = None
    if need[2]:
        lead = grad._shape[: len(grad._shape) - len(ctx.inputs[2]._shape)]
        if not lead:
            gb = grad
        elif math.prod(lead) == 1:  # a sum over dims of size 1 is a view
            gb = grad.reshape(grad._shape[len(lead) :])
        else:
            gb = grad.sum(dim=tuple(range(len(lead))))
    return gx, gw, gb


def _linear_jvp(ctx, tx, tw, tb=None):
    x, w = ctx.inputs[0], ctx.inputs[1]
    linear = _LINEAR.fn
    return total(
        [
            linear(tx, w) if tx is not None else None,
            linear(x, tw) if tw is not None else None,
            tb,
        ]
    )


_LINEAR = op(
    "linear",
    "input, weight, bias=None",
    kind="other",
    n_inputs=3,
    kernel=_linear_kernel,
    shape=_linear_shape,
    promote="same",
    allow="ifc",
    method=False,
    vjp=_linear_vjp,
    jvp=_linear_jvp,
    doc="linear(input, weight, bias=None): input @ weight.T + bias (torch.nn.functional."
    "linear); weight is (out_features, in_features) or (in_features,), bias broadcasts to "
    "the result; input, weight and bias have one dtype.",
)


# torch.ger: outer under its old name, the same row (kernel, rules, derivatives and any
# device kernel set for either name); not "pointwise" (outer's default kind), which it is not
ROWS.append(
    dataclasses.replace(
        _OUTER, name="ger", kind="other", doc="ger(input, vec2): outer's old name (torch.ger)"
    )
)
