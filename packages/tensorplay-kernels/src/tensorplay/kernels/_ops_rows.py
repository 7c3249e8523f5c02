"""Row-wise ``tpk`` operators over the last dimension: reductions (sum/max/mean), softmax
(+ backward) and layer norm (+ backward).

Each kernel runs one program per row of the input seen as a contiguous ``(rows, n)``
matrix. A row of up to ``SINGLE_MAX`` elements is loaded once into one block (the fast
path that reaches bandwidth); longer rows are walked in chunks.
"""

from __future__ import annotations

import math

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels._common import acc_type, check_same, check_tensor, ensure_triton, fake_like
from tensorplay.kernels._launch import next_power_of_2

__all__ = [
    "sum_rows",
    "max_rows",
    "mean_rows",
    "softmax",
    "softmax_backward",
    "layer_norm",
    "layer_norm_backward",
    "row_launch",
]

SINGLE_MAX = 16384  # elements of a row held in one block (fp32: 64 KiB of registers)
_CHUNK = 4096


def row_launch(n_cols: int) -> dict:
    """Block size, single-block flag and warps for a row of ``n_cols`` elements."""
    single = n_cols <= SINGLE_MAX
    block = next_power_of_2(n_cols) if single else _CHUNK
    warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
    return {"SINGLE": single, "BLOCK": block, "num_warps": warps}


def _rows(x: tp.Tensor) -> tuple[tp.Tensor, int, int]:
    x = x.contiguous()
    n = x.shape[-1] if x.dim() else 1
    return x, (x.numel() // n if n else 0), n


# ---- reductions ---------------------------------------------------------------------------


def _make_reduction(kind: str) -> library.CustomOpDef:
    qualname = f"tpk::{kind}_rows"

    def body(x: tp.Tensor) -> tp.Tensor:
        check_tensor(qualname, "x", x, min_dim=1)
        if x.shape[-1] == 0 and kind == "max":
            raise ValueError(f"{qualname}: the last dimension of x is empty; max has no identity")
        k = ensure_triton(qualname, x.device.type)
        x, rows, n = _rows(x)
        out = tp.empty(tuple(x.shape[:-1]), dtype=x.dtype, device=x.device)
        if n == 0:  # the empty sum is 0 and the empty mean NaN (as torch)
            return out.fill_(0.0 if kind == "sum" else float("nan"))
        if rows:
            block = min(next_power_of_2(max(n, 1)), _CHUNK)
            k.row_reduce[(rows,)](x, out, n, OP=kind, ACC=acc_type(x.dtype), BLOCK=block)
        return out

    body.__name__ = f"{kind}_rows"
    body.__doc__ = f"The {kind} over the last dimension of ``x`` (a Triton kernel)."
    op = library.triton_op(qualname, body, mutates_args=(), schema="(Tensor x) -> Tensor")
    op.register_fake(lambda x: fake_like(x, tuple(x.shape[:-1])))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)

    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        g = grad.unsqueeze(-1)
        if kind == "sum":
            return g.expand(*x.shape).contiguous()
        if kind == "mean":
            return (g / x.shape[-1]).expand(*x.shape).contiguous()
        # max: the gradient is shared by the elements equal to the max (as torch's amax)
        hit = (x == out.unsqueeze(-1)).to(grad.dtype)
        return g * hit / hit.sum(dim=-1, keepdim=True)

    op.register_autograd(backward, setup_context=setup_context)
    return op


sum_rows = _make_reduction("sum")
max_rows = _make_reduction("max")
mean_rows = _make_reduction("mean")


# ---- softmax ------------------------------------------------------------------------------


@library.triton_op("tpk::softmax", mutates_args=(), schema="(Tensor x) -> Tensor")
def softmax(x: tp.Tensor) -> tp.Tensor:
    """Softmax over the last dimension of ``x`` (a Triton kernel)."""
    check_tensor("tpk::softmax", "x", x, min_dim=1)
    k = ensure_triton("tpk::softmax", x.device.type)
    x, rows, n = _rows(x)
    out = tp.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    if rows and n:
        k.softmax[(rows,)](x, out, n, ACC=acc_type(x.dtype), **row_launch(n))
    return out


softmax.register_fake(lambda x: fake_like(x))


@library.triton_op(
    "tpk::softmax_backward", mutates_args=(), schema="(Tensor grad, Tensor out) -> Tensor"
)
def softmax_backward(grad: tp.Tensor, out: tp.Tensor) -> tp.Tensor:
    """The gradient of ``softmax`` given its output: ``out * (grad - sum(grad * out))``."""
    op = "tpk::softmax_backward"
    check_tensor(op, "grad", grad, min_dim=1)
    check_tensor(op, "out", out, min_dim=1)
    check_same(op, ("grad", "out"), grad, out)
    if tuple(grad.shape) != tuple(out.shape):
        raise ValueError(f"{op}: grad {tuple(grad.shape)} and out {tuple(out.shape)} differ")
    k = ensure_triton(op, grad.device.type)
    grad, rows, n = _rows(grad)
    out = out.contiguous()
    dx = tp.empty(tuple(grad.shape), dtype=grad.dtype, device=grad.device)
    if rows and n:
        k.softmax_backward[(rows,)](grad, out, dx, n, ACC=acc_type(grad.dtype), **row_launch(n))
    return dx


softmax_backward.register_fake(lambda grad, out: fake_like(grad))
softmax.register_autograd(
    lambda ctx, grad: softmax_backward(grad, ctx.saved_tensors[0]),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output),
)


def _softmax_backward_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _softmax_double_backward(ctx, h):
    # s = y * (g - sum(g*y)): ds/dg is the softmax Jacobian itself; ds/dy gives
    # h * (g - sum(g*y)) - g * sum(h*y)
    g, y = ctx.saved_tensors
    gy = (g * y).sum(dim=-1, keepdim=True)
    hy = (h * y).sum(dim=-1, keepdim=True)
    return softmax_backward(h, y), h * (g - gy) - g * hy


softmax_backward.register_autograd(_softmax_double_backward, setup_context=_softmax_backward_setup)


# ---- layer norm ---------------------------------------------------------------------------


def _check_affine(op: str, name: str, p: tp.Tensor | None, x: tp.Tensor) -> None:
    if p is None:
        return
    check_tensor(op, name, p, min_dim=1)
    check_same(op, ("x", name), x, p)
    if tuple(p.shape) != (x.shape[-1],):
        raise ValueError(
            f"{op}: {name} must have shape ({x.shape[-1]},) (the last dimension of x), got "
            f"{tuple(p.shape)}"
        )


@library.triton_op(
    "tpk::layer_norm",
    mutates_args=(),
    schema="(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
)
def layer_norm(
    x: tp.Tensor,
    weight: tp.Tensor | None = None,
    bias: tp.Tensor | None = None,
    eps: float = 1e-5,
) -> tp.Tensor:
    """Layer norm over the last dimension: ``(x - mean) / sqrt(var + eps) * weight + bias``
    (biased variance, as torch); ``weight``/``bias`` of shape ``(x.shape[-1],)`` or None."""
    op = "tpk::layer_norm"
    check_tensor(op, "x", x, min_dim=1)
    _check_affine(op, "weight", weight, x)
    _check_affine(op, "bias", bias, x)
    if not (isinstance(eps, (int, float)) and eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"{op}: eps must be a finite number >= 0, got {eps!r}")
    k = ensure_triton(op, x.device.type)
    x, rows, n = _rows(x)
    out = tp.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    if rows and n:
        w = weight.contiguous() if weight is not None else x  # unused pointer when absent
        b = bias.contiguous() if bias is not None else x
        k.layer_norm[(rows,)](
            x,
            w,
            b,
            out,
            n,
            float(eps),
            HAS_W=weight is not None,
            HAS_B=bias is not None,
            ACC=acc_type(x.dtype),
            **row_launch(n),
        )
    return out


layer_norm.register_fake(lambda x, weight=None, bias=None, eps=1e-5: fake_like(x))


@library.triton_op(
    "tpk::layer_norm_backward",
    mutates_args=(),
    schema="(Tensor grad, Tensor x, Tensor? weight, float eps) -> (Tensor, Tensor, Tensor)",
)
def layer_norm_backward(
    grad: tp.Tensor, x: tp.Tensor, weight: tp.Tensor | None, eps: float
) -> tuple[tp.Tensor, tp.Tensor, tp.Tensor]:
    """Gradients of ``layer_norm`` for ``x``, ``weight`` and ``bias`` (two Triton kernels:
    one program per row for ``x``, one per column block for ``weight``/``bias``)."""
    op = "tpk::layer_norm_backward"
    check_tensor(op, "grad", grad, min_dim=1)
    check_tensor(op, "x", x, min_dim=1)
    check_same(op, ("grad", "x"), grad, x)
    _check_affine(op, "weight", weight, x)
    k = ensure_triton(op, x.device.type)
    x, rows, n = _rows(x)
    grad = grad.contiguous()
    dx = tp.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    dw = tp.empty((n,), dtype=x.dtype, device=x.device)
    db = tp.empty((n,), dtype=x.dtype, device=x.device)
    if not (rows and n):
        return dx, dw.zero_(), db.zero_()
    stat = tp.float64 if x.dtype is tp.float64 else tp.float32
    mean = tp.empty((rows,), dtype=stat, device=x.device)
    rstd = tp.empty((rows,), dtype=stat, device=x.device)
    acc = acc_type(x.dtype)
    w = weight.contiguous() if weight is not None else x
    block = min(next_power_of_2(n), _CHUNK)
    k.layer_norm_backward_dx[(rows,)](
        grad, x, w, dx, mean, rstd, n, float(eps), HAS_W=weight is not None, ACC=acc, BLOCK=block
    )
    block_n = 32
    k.layer_norm_backward_dwdb[((n + block_n - 1) // block_n,)](
        grad, x, mean, rstd, dw, db, rows, n, ACC=acc, BLOCK_M=32, BLOCK_N=block_n
    )
    return dx, dw, db


@layer_norm_backward.register_fake
def _(grad, x, weight, eps):
    n = x.shape[-1]
    return fake_like(x), fake_like(x, (n,)), fake_like(x, (n,))


def _layer_norm_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.eps = eps
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight)


def _layer_norm_grads(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dw, db = layer_norm_backward(grad, x, weight, ctx.eps)
    return (
        dx,
        dw if weight is not None else None,
        db if ctx.has_bias else None,
        None,
    )


layer_norm.register_autograd(_layer_norm_grads, setup_context=_layer_norm_setup)
