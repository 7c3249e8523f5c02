"""TileLang operators (CUDA only): ``tpk::gemm`` and ``tpk::attention``.

Each kernel is a TileLang program specialised to its shapes and dtype, compiled once per
specialisation (cached) and launched through ``wrap_tilelang``. TensorPlay allocates
every output and passes all tensors in (``out_idx=None``: TileLang allocates nothing);
the kernels are compiled with TileLang's tvm-ffi execution backend, which takes DLPack
tensors, so TensorPlay tensors cross zero-copy. Where a TileLang build only accepts torch
tensors, the same memory is handed over as torch views (``torch.from_dlpack``; TileLang
requires torch anyway).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels._capability import tilelang_unavailable_reason
from tensorplay.kernels._common import check_same, check_tensor, fake_like

__all__ = ["gemm", "attention"]

_HALF = (tp.float16, tp.bfloat16)


def _ensure_tilelang(op: str) -> Any:
    why = tilelang_unavailable_reason()
    if why is not None:
        raise RuntimeError(f"{op}: cannot run the TileLang kernel: {why}")
    import tilelang  # noqa: PLC0415 - optional dependency (requires torch and CUDA)

    return tilelang


def _compile(tilelang: Any, prim_func: Any) -> Any:
    try:
        kernel = tilelang.compile(
            prim_func, out_idx=None, target="cuda", execution_backend="tvm_ffi"
        )
    except Exception as first:  # noqa: BLE001 - a TileLang without the tvm-ffi backend
        try:
            kernel = tilelang.compile(prim_func, out_idx=None, target="cuda")
        except Exception as second:
            raise second from first  # both errors shown: the kernel itself is at fault
    return library.wrap_tilelang(kernel)


def _launch(kernel: Any, *tensors: tp.Tensor) -> None:
    try:
        kernel(*tensors)
    except (TypeError, ValueError, AttributeError):
        import torch  # noqa: PLC0415 - TileLang's own hard dependency

        kernel(*(torch.from_dlpack(t) for t in tensors))


def _name(dtype: tp.dtype) -> str:
    return str(dtype).split(".")[-1]


# ---- GEMM ---------------------------------------------------------------------------------


@functools.cache
def _gemm_kernel(m: int, n: int, k: int, dtype: str) -> Any:
    tilelang = _ensure_tilelang("tpk::gemm")
    import tilelang.language as T  # noqa: PLC0415, N812 - TileLang's own spelling

    # 128x256x64 tiles, 3 stages, 256 threads: a Hopper-friendly shape for bf16/fp16
    bm, bn, bk, stages, threads = 128, 256, 64, 3, 256

    @T.prim_func
    def main(
        A: T.Tensor((m, k), dtype),  # noqa: N803
        B: T.Tensor((k, n), dtype),  # noqa: N803
        C: T.Tensor((m, n), dtype),  # noqa: N803
    ):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(m, bm), threads=threads) as (bx, by):
            a_s = T.alloc_shared((bm, bk), dtype)
            b_s = T.alloc_shared((bk, bn), dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=stages):
                T.copy(A[by * bm, ko * bk], a_s)
                T.copy(B[ko * bk, bx * bn], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, C[by * bm, bx * bn])

    return _compile(tilelang, main)


@library.tile_lang_op(
    "tpk::gemm", mutates_args=(), device_types="cuda", schema="(Tensor a, Tensor b) -> Tensor"
)
def gemm(a: tp.Tensor, b: tp.Tensor) -> tp.Tensor:
    """``a @ b`` (2-d, float16/bfloat16, float32 accumulation) as a TileLang kernel."""
    op = "tpk::gemm"
    check_tensor(op, "a", a, _HALF)
    check_tensor(op, "b", b, _HALF)
    check_same(op, ("a", "b"), a, b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"{op}: expected a (M, K) and b (K, N), got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    m, k = a.shape
    n = b.shape[1]
    out = tp.empty((m, n), dtype=a.dtype, device=a.device)
    if m and n:
        _launch(_gemm_kernel(m, n, k, _name(a.dtype)), a.contiguous(), b.contiguous(), out)
    return out


gemm.register_fake(lambda a, b: fake_like(a, (a.shape[0], b.shape[1])))


def _gemm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    ga = gemm(grad, b.t().contiguous()) if ctx.needs_input_grad[0] else None
    gb = gemm(a.t().contiguous(), grad) if ctx.needs_input_grad[1] else None
    return ga, gb


gemm.register_autograd(
    _gemm_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs)
)


# ---- attention ----------------------------------------------------------------------------


@functools.cache
def _attention_kernel(
    batch: int, heads: int, seq_q: int, seq_kv: int, dim: int, causal: bool, dtype: str
) -> Any:
    tilelang = _ensure_tilelang("tpk::attention")
    import tilelang.language as T  # noqa: PLC0415, N812

    bm, bn, stages, threads = 128, 128, 2, 256
    scale = (1.0 / dim) ** 0.5 * 1.4426950408889634  # folded into exp2: exp(x) = 2**(x*log2 e)
    past = seq_kv - seq_q  # causal: query i sees keys up to i + past
    acc_t = "float32"

    @T.prim_func
    def main(
        # shapes spelled out: TileLang evaluates these annotations with the names the body
        # uses (a name used only here, like a local tuple, is not visible to it)
        Q: T.Tensor((batch, heads, seq_q, dim), dtype),  # noqa: N803
        K: T.Tensor((batch, heads, seq_kv, dim), dtype),  # noqa: N803
        V: T.Tensor((batch, heads, seq_kv, dim), dtype),  # noqa: N803
        O: T.Tensor((batch, heads, seq_q, dim), dtype),  # noqa: N803, E741
    ):
        with T.Kernel(T.ceildiv(seq_q, bm), heads, batch, threads=threads) as (bx, by, bz):
            q_s = T.alloc_shared((bm, dim), dtype)
            k_s = T.alloc_shared((bn, dim), dtype)
            v_s = T.alloc_shared((bn, dim), dtype)
            o_s = T.alloc_shared((bm, dim), dtype)
            s = T.alloc_fragment((bm, bn), acc_t)
            p = T.alloc_fragment((bm, bn), dtype)
            o = T.alloc_fragment((bm, dim), acc_t)
            m_new = T.alloc_fragment((bm,), acc_t)
            m_old = T.alloc_fragment((bm,), acc_t)
            rescale = T.alloc_fragment((bm,), acc_t)
            row_sum = T.alloc_fragment((bm,), acc_t)
            denom = T.alloc_fragment((bm,), acc_t)

            T.copy(Q[bz, by, bx * bm : (bx + 1) * bm, :], q_s)
            T.fill(o, 0)
            T.fill(denom, 0)
            T.fill(m_new, -T.infinity(acc_t))
            steps = (
                T.min(T.ceildiv(seq_kv, bn), T.ceildiv((bx + 1) * bm + past, bn))
                if causal
                else T.ceildiv(seq_kv, bn)
            )
            for kb in T.Pipelined(steps, num_stages=stages):
                T.copy(K[bz, by, kb * bn : (kb + 1) * bn, :], k_s)
                if causal:
                    for i, j in T.Parallel(bm, bn):
                        s[i, j] = T.if_then_else(
                            bx * bm + i + past >= kb * bn + j, 0, -T.infinity(acc_t)
                        )
                else:
                    T.clear(s)
                T.gemm(q_s, k_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                # online softmax: new running max, rescale what was accumulated so far
                T.copy(m_new, m_old)
                T.reduce_max(s, m_new, dim=1, clear=False)
                for i in T.Parallel(bm):
                    rescale[i] = T.exp2(m_old[i] * scale - m_new[i] * scale)
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = T.exp2(s[i, j] * scale - m_new[i] * scale)
                T.reduce_sum(s, row_sum, dim=1)
                for i in T.Parallel(bm):
                    denom[i] = denom[i] * rescale[i] + row_sum[i]
                T.copy(s, p)
                for i, j in T.Parallel(bm, dim):
                    o[i, j] *= rescale[i]
                T.copy(V[bz, by, kb * bn : (kb + 1) * bn, :], v_s)
                T.gemm(p, v_s, o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(bm, dim):
                o[i, j] /= denom[i]
            T.copy(o, o_s)
            T.copy(o_s, O[bz, by, bx * bm : (bx + 1) * bm, :])

    return _compile(tilelang, main)


@library.tile_lang_op(
    "tpk::attention",
    mutates_args=(),
    device_types="cuda",
    schema="(Tensor q, Tensor k, Tensor v, bool causal=False) -> Tensor",
)
def attention(q: tp.Tensor, k: tp.Tensor, v: tp.Tensor, causal: bool = False) -> tp.Tensor:
    """Scaled dot-product attention ``softmax(q k^T / sqrt(d)) v`` for (batch, heads, seq, d)
    float16/bfloat16 tensors, as a TileLang flash-attention kernel; ``causal`` masks keys
    after each query (aligned to the end when k is longer than q)."""
    op = "tpk::attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(op, name, t, _HALF)
        if t.dim() != 4:
            raise ValueError(f"{op}: {name} must be (batch, heads, seq, dim), got {tuple(t.shape)}")
    check_same(op, ("q", "k"), q, k)
    check_same(op, ("q", "v"), q, v)
    b, h, sq, d = q.shape
    if tuple(k.shape) != tuple(v.shape) or tuple(k.shape[:2]) != (b, h) or k.shape[3] != d:
        raise ValueError(
            f"{op}: k and v must be ({b}, {h}, seq_kv, {d}) like q; got {tuple(k.shape)} and "
            f"{tuple(v.shape)}"
        )
    skv = k.shape[2]
    if causal and skv < sq:
        raise ValueError(f"{op}: causal attention needs seq_kv >= seq_q, got {skv} < {sq}")
    out = tp.empty(tuple(q.shape), dtype=q.dtype, device=q.device)
    if out.numel():
        kernel = _attention_kernel(b, h, sq, skv, d, bool(causal), _name(q.dtype))
        _launch(kernel, q.contiguous(), k.contiguous(), v.contiguous(), out)
    return out


attention.register_fake(lambda q, k, v, causal=False: fake_like(q))


def reference_attention(
    q: tp.Tensor, k: tp.Tensor, v: tp.Tensor, causal: bool = False
) -> tuple[tp.Tensor, tp.Tensor]:
    """The same attention in TensorPlay ops (float32): ``(output, probabilities)``."""
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        qi = tp.arange(sq, device=q.device).reshape(sq, 1) + (skv - sq)
        kj = tp.arange(skv, device=q.device).reshape(1, skv)
        scores = tp.where(kj > qi, float("-inf"), scores)
    p = scores.softmax(dim=-1)
    return p @ vf, p


def _attention_setup(ctx, inputs, output):
    q, k, v, causal = inputs
    ctx.causal = causal
    ctx.save_for_backward(q, k, v)


def _attention_backward(ctx, grad):
    # recompute the probabilities P in float32: dV = P^T dO, dS = P * (dP - rowsum(dP * P))
    # with dP = dO V^T; dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d)
    q, k, v = ctx.saved_tensors
    _, p = reference_attention(q, k, v, ctx.causal)
    g = grad.float()
    dv = p.transpose(-1, -2) @ g
    dp = g @ v.float().transpose(-1, -2)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True)) / math.sqrt(q.shape[-1])
    dq = ds @ k.float()
    dk = ds.transpose(-1, -2) @ q.float()
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None


attention.register_autograd(_attention_backward, setup_context=_attention_setup)
