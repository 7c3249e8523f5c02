"""Elementwise ``tpk`` operators: unary activations/math, broadcasting binary ops, and the
fused ``bias_act`` (``act(x + bias)`` in one pass over memory).

Forward passes are Triton kernels; the derivatives are written with TensorPlay ops (one
line per activation in ``DERIVATIVES``), so each op is one node in the autograd graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels._common import (
    acc_type,
    check_same,
    check_tensor,
    ensure_triton,
    fake_like,
)

__all__ = ["UNARY", "BINARY", "ACTIVATIONS", "DERIVATIVES", "unary_ops", "binary_ops", "bias_act"]

_SQRT_2PI = math.sqrt(2 * math.pi)
_TANH_C = math.sqrt(2 / math.pi)


def _gelu_tanh_derivative(x: tp.Tensor) -> tp.Tensor:
    t = (_TANH_C * (x + 0.044715 * x * x * x)).tanh()
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _TANH_C * (1 + 3 * 0.044715 * x * x)


def _silu_derivative(x: tp.Tensor) -> tp.Tensor:
    s = x.sigmoid()
    return s * (1 + x * (1 - s))


# d act(x) / dx, in TensorPlay ops. NOTE: relu's is (x > 0): the gradient at 0 is 0 (torch).
DERIVATIVES: dict[str, Callable[[tp.Tensor], tp.Tensor]] = {
    "relu": lambda x: (x > 0).to(x.dtype),
    "gelu": lambda x: 0.5 * (1 + (x / math.sqrt(2)).erf()) + x * (-0.5 * x * x).exp() / _SQRT_2PI,
    "gelu_tanh": _gelu_tanh_derivative,
    "silu": _silu_derivative,
    "sigmoid": lambda x: x.sigmoid() * (1 - x.sigmoid()),
    "tanh": lambda x: 1 - x.tanh() * x.tanh(),
    "exp": lambda x: x.exp(),
    "neg": lambda x: tp.full_like(x, -1.0),
    "abs": lambda x: x.sign(),
    "sqrt": lambda x: 0.5 / x.sqrt(),
    "none": lambda x: tp.ones_like(x),
}
UNARY = tuple(k for k in DERIVATIVES if k != "none")
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")


# ---- unary --------------------------------------------------------------------------------


def _make_unary(name: str) -> library.CustomOpDef:
    qualname = f"tpk::{name}"

    def body(x: tp.Tensor) -> tp.Tensor:
        check_tensor(qualname, "x", x)
        k = ensure_triton(qualname, x.device.type)
        x = x.contiguous()
        shape = x.shape
        out = tp.empty(shape, dtype=x.dtype, device=x.device)
        n = math.prod(shape)
        if n:
            grid, meta = k.elementwise_launch(n)
            half = k.is_half(x.dtype)
            k.unary[grid](x, out, n, ACT=name, ACC=acc_type(x.dtype), HALF=half, **meta)
        return out

    body.__name__ = name
    body.__doc__ = f"``{name}(x)`` elementwise (a Triton kernel; float16/bfloat16/32/64)."
    op = library.triton_op(qualname, body, mutates_args=(), schema="(Tensor x) -> Tensor")
    op.register_fake(lambda x: fake_like(x))
    derivative = DERIVATIVES[name]

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * derivative(x)

    op.register_autograd(backward, setup_context=setup_context)
    return op


unary_ops: dict[str, library.CustomOpDef] = {name: _make_unary(name) for name in UNARY}


# ---- binary with broadcasting -------------------------------------------------------------


def _padded(t: tp.Tensor, shape: tuple[int, ...]) -> list[int]:
    """``t``'s element strides seen from the 4-d output shape (0 along broadcast dims)."""
    strides = [0] * (4 - t.dim()) + list(t.stride())
    sizes = [1] * (4 - t.dim()) + list(t.shape)
    return [0 if sz == 1 and full != 1 else st for st, sz, full in zip(strides, sizes, shape)]


def _as_tensor(qualname: str, name: str, value: object, like: tp.Tensor) -> tp.Tensor:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return tp.full((), float(value), dtype=like.dtype, device=like.device)
    check_tensor(qualname, name, value)  # a Tensor subclass passes, anything else raises
    return value  # type: ignore[return-value]


def _unbroadcast(grad: tp.Tensor, shape: tuple[int, ...]) -> tp.Tensor:
    """Sum ``grad`` over the dimensions broadcasting added or stretched to reach it."""
    extra = grad.dim() - len(shape)
    if extra:
        grad = grad.sum(dim=tuple(range(extra)))
    stretched = tuple(i for i, s in enumerate(shape) if s == 1 and grad.shape[i] != 1)
    return grad.sum(dim=stretched, keepdim=True) if stretched else grad


def _binary_grads(name: str, a: tp.Tensor, b: tp.Tensor, g: tp.Tensor):
    if name == "add":
        return g, g
    if name == "sub":
        return g, -g
    if name == "mul":
        return g * b, g * a
    if name == "div":
        return g / b, -g * a / (b * b)
    # maximum/minimum: the gradient goes to the winner, split evenly on ties (as in torch)
    wins = (a > b) if name == "maximum" else (a < b)
    share = wins.to(g.dtype) + 0.5 * (a == b).to(g.dtype)
    return g * share, g * (1 - share)


def _make_binary(name: str) -> library.CustomOpDef:
    qualname = f"tpk::{name}"

    def body(a: tp.Tensor, b: tp.Tensor) -> tp.Tensor:
        check_tensor(qualname, "a", a)
        if type(b) is not tp.Tensor:
            b = _as_tensor(qualname, "b", b, a)
        check_tensor(qualname, "b", b)
        check_same(qualname, ("a", "b"), a, b)
        k = ensure_triton(qualname, a.device.type)
        acc = k.ACC_TYPES[a.dtype]
        shape = a.shape
        if shape == b.shape and a.is_contiguous() and b.is_contiguous():
            out = tp.empty(shape, dtype=a.dtype, device=a.device)
            n = math.prod(shape)
            if n:
                grid, meta = k.elementwise_launch(n)
                k.binary_contig[grid](a, b, out, n, OP=name, ACC=acc, **meta)
            return out
        shape = tuple(tp.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
        out = tp.empty(shape, dtype=a.dtype, device=a.device)
        n = out.numel()
        if n == 0:
            return out
        if len(shape) > 4:  # the strided kernels walk at most 4 dimensions
            grid, meta = k.elementwise_launch(n)
            a, b = a.expand(*shape).contiguous(), b.expand(*shape).contiguous()
            k.binary_contig[grid](a, b, out, n, OP=name, ACC=acc, **meta)
            return out
        s4 = (1,) * (4 - len(shape)) + shape
        k.launch_broadcast(a, b, out, s4, _padded(a, s4), _padded(b, s4), name, acc)
        return out

    body.__name__ = name
    body.__doc__ = (
        f"``{name}(a, b)`` elementwise with broadcasting (a Triton kernel; a Python number "
        "for ``b`` is broadcast as a 0-d tensor of ``a``'s dtype)."
    )
    op = library.triton_op(qualname, body, mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")

    @op.register_fake
    def _(a, b):
        b_shape = tuple(b.shape) if isinstance(b, tp.Tensor) else ()
        return fake_like(a, tuple(tp.broadcast_shapes(tuple(a.shape), b_shape)))

    def setup_context(ctx, inputs, output):
        a, b = inputs
        ctx.b_is_tensor = isinstance(b, tp.Tensor)
        ctx.save_for_backward(a, b if ctx.b_is_tensor else tp.full((), float(b), dtype=a.dtype))

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ga, gb = _binary_grads(name, a, b, grad)
        ga = _unbroadcast(ga, tuple(a.shape))
        return ga, (_unbroadcast(gb, tuple(b.shape)) if ctx.b_is_tensor else None)

    op.register_autograd(backward, setup_context=setup_context)
    return op


binary_ops: dict[str, library.CustomOpDef] = {name: _make_binary(name) for name in BINARY}


# ---- fused bias + activation --------------------------------------------------------------


@library.triton_op(
    "tpk::bias_act",
    mutates_args=(),
    schema="(Tensor x, Tensor bias, str activation='gelu') -> Tensor",
)
def bias_act(x: tp.Tensor, bias: tp.Tensor, activation: str = "gelu") -> tp.Tensor:
    """``act(x + bias)`` in one kernel: ``bias`` has shape ``(x.shape[-1],)``;
    ``activation`` is one of ``ACTIVATIONS``."""
    op = "tpk::bias_act"
    check_tensor(op, "x", x, min_dim=1)
    check_tensor(op, "bias", bias, min_dim=1)
    check_same(op, ("x", "bias"), x, bias)
    if tuple(bias.shape) != (x.shape[-1],):
        raise ValueError(
            f"{op}: bias must have shape ({x.shape[-1]},) (the last dimension of x), got "
            f"{tuple(bias.shape)}"
        )
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    k = ensure_triton(op, x.device.type)
    x, bias = x.contiguous(), bias.contiguous()
    out = tp.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    n = x.numel()
    if n:
        grid, meta = k.elementwise_launch(n)
        k.bias_act[grid](
            x,
            bias,
            out,
            n,
            x.shape[-1],
            ACT=activation,
            ACC=acc_type(x.dtype),
            HALF=k.is_half(x.dtype),
            WIDE=n > k.INT32_MAX,
            **meta,
        )
    return out


bias_act.register_fake(lambda x, bias, activation="gelu": fake_like(x))


def _bias_act_setup(ctx, inputs, output):
    x, bias, activation = inputs
    ctx.activation = activation
    ctx.save_for_backward(x, bias)


def _bias_act_backward(ctx, grad):
    x, bias = ctx.saved_tensors
    dz = grad * DERIVATIVES[ctx.activation](x + bias)
    return dz, dz.reshape(-1, dz.shape[-1]).sum(dim=0), None


bias_act.register_autograd(_bias_act_backward, setup_context=_bias_act_setup)
