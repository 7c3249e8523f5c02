"""``tpk::matmul``: a tiled Triton matrix multiply for 2-d float16/bfloat16/float32/float64.

float32 multiplies in full IEEE precision unless ``allow_tf32=True`` (TF32 tensor cores:
faster on the GPU, ~1e-3 relative error); half types use tensor cores and accumulate
in float32. Inputs may be strided (transposed views are read in place).
"""

from __future__ import annotations

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels._capability import interpreting
from tensorplay.kernels._common import acc_type, check_same, check_tensor, ensure_triton, fake_like

__all__ = ["matmul"]


def _grid(m: int, n: int):
    return lambda meta: (
        ((m + meta["BLOCK_M"] - 1) // meta["BLOCK_M"])
        * ((n + meta["BLOCK_N"] - 1) // meta["BLOCK_N"]),
    )


@library.triton_op(
    "tpk::matmul", mutates_args=(), schema="(Tensor a, Tensor b, bool allow_tf32=False) -> Tensor"
)
def matmul(a: tp.Tensor, b: tp.Tensor, allow_tf32: bool = False) -> tp.Tensor:
    """``a @ b`` for 2-d ``a`` (M, K) and ``b`` (K, N) of one floating dtype."""
    op = "tpk::matmul"
    check_tensor(op, "a", a)
    check_tensor(op, "b", b)
    check_same(op, ("a", "b"), a, b)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(
            f"{op}: expected 2-d a and b, got shapes {tuple(a.shape)} and {tuple(b.shape)}; "
            "reshape batches to 2-d or use tp.matmul"
        )
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"{op}: a is {tuple(a.shape)} and b is {tuple(b.shape)}: a.shape[1] must equal "
            "b.shape[0]"
        )
    k = ensure_triton(op, a.device.type)
    m, kk = a.shape
    n = b.shape[1]
    out = tp.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if kk == 0:
        return out.zero_()
    upcast = a.dtype is tp.bfloat16 and interpreting()
    precision = "tf32" if allow_tf32 and a.dtype is tp.float32 else "ieee"
    launcher = (
        k.matmul if a.dtype in (tp.float16, tp.bfloat16) or precision == "tf32" else k.matmul_fma
    )
    launcher[_grid(m, n)](
        a,
        b,
        out,
        m,
        n,
        kk,
        *a.stride(),
        *b.stride(),
        *out.stride(),
        PRECISION=precision,
        UPCAST=upcast,
        ACC=acc_type(a.dtype),
    )
    return out


@matmul.register_fake
def _(a, b, allow_tf32=False):
    return fake_like(a, (a.shape[0], b.shape[1]))


def _setup(ctx, inputs, output):
    a, b, allow_tf32 = inputs
    ctx.allow_tf32 = allow_tf32
    ctx.save_for_backward(a, b)


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    ga = matmul(grad, b.t(), ctx.allow_tf32) if ctx.needs_input_grad[0] else None
    gb = matmul(a.t(), grad, ctx.allow_tf32) if ctx.needs_input_grad[1] else None
    return ga, gb, None


matmul.register_autograd(_backward, setup_context=_setup)
