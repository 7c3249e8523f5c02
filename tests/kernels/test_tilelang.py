"""TileLang ops (tpk::gemm, tpk::attention): CUDA-only kernels. Without a GPU (or without
TileLang, which needs torch) the GPU tests skip with the reason; the CPU side checks
the contract that needs no GPU: clear errors and fake kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_helpers import rand, to_numpy

import tensorplay as tp
from tensorplay import library


def _attention_numpy(q, k, v, causal):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        mask = np.arange(skv)[None, :] > np.arange(sq)[:, None] + (skv - sq)
        s = np.where(mask, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_tilelang_ops_on_cpu_say_they_are_cuda_only():
    with pytest.raises(NotImplementedError, match="tpk::gemm has no kernel for device 'cpu'"):
        tp.ops.tpk.gemm(tp.ones(2, 2, dtype=tp.float16), tp.ones(2, 2, dtype=tp.float16))
    assert tp.ops.tpk.gemm.is_tile_lang_op and tp.ops.tpk.attention.is_tile_lang_op


def test_tilelang_fake_kernels_on_meta():
    q = tp.empty(2, 4, 128, 64, dtype=tp.bfloat16, device="meta")
    assert tuple(tp.ops.tpk.attention(q, q, q).shape) == (2, 4, 128, 64)
    a = tp.empty(256, 64, dtype=tp.float16, device="meta")
    b = tp.empty(64, 512, dtype=tp.float16, device="meta")
    c = tp.ops.tpk.gemm(a, b)
    assert tuple(c.shape) == (256, 512) and c.dtype is tp.float16


@pytest.mark.cuda
@pytest.mark.usefixtures("cuda_tilelang")
@pytest.mark.parametrize("m, n, k", [(256, 512, 128), (1024, 1024, 1024), (200, 300, 72)])
@pytest.mark.parametrize("dtype", [tp.bfloat16, tp.float16])
def test_gemm_matches_numpy_on_cuda(m, n, k, dtype):
    a, an = rand(m, k, dtype=dtype, device="cuda")
    b, bn = rand(k, n, dtype=dtype, device="cuda", seed=1)
    c = tp.ops.tpk.gemm(a, b)
    assert c.device.type == "cuda" and c.dtype is dtype
    ref = an @ bn
    np.testing.assert_allclose(to_numpy(c), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


@pytest.mark.cuda
@pytest.mark.usefixtures("cuda_tilelang")
def test_gemm_autograd_and_opcheck_on_cuda():
    a, an = rand(128, 64, dtype=tp.float16, device="cuda")
    b, bn = rand(64, 256, dtype=tp.float16, device="cuda", seed=1)
    a.requires_grad_(True)
    b.requires_grad_(True)
    g, gn = rand(128, 256, dtype=tp.float16, device="cuda", seed=2)
    tp.ops.tpk.gemm(a, b).backward(g)
    np.testing.assert_allclose(to_numpy(a.grad), gn @ bn.T, rtol=2e-2, atol=0.3)
    np.testing.assert_allclose(to_numpy(b.grad), an.T @ gn, rtol=2e-2, atol=0.3)
    assert library.opcheck(tp.ops.tpk.gemm, (a.detach(), b.detach())) == {}


@pytest.mark.cuda
@pytest.mark.usefixtures("cuda_tilelang")
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_numpy_on_cuda(causal):
    q, qn = rand(2, 3, 256, 64, dtype=tp.float16, device="cuda")
    k, kn = rand(2, 3, 384, 64, dtype=tp.float16, device="cuda", seed=1)
    v, vn = rand(2, 3, 384, 64, dtype=tp.float16, device="cuda", seed=2)
    out = tp.ops.tpk.attention(q, k, v, causal=causal)
    np.testing.assert_allclose(to_numpy(out), _attention_numpy(qn, kn, vn, causal), atol=2e-2)


@pytest.mark.cuda
@pytest.mark.usefixtures("cuda_tilelang")
def test_attention_backward_and_opcheck_on_cuda():
    q, qn = rand(1, 2, 128, 64, dtype=tp.bfloat16, device="cuda")
    k, _ = rand(1, 2, 128, 64, dtype=tp.bfloat16, device="cuda", seed=1)
    v, _ = rand(1, 2, 128, 64, dtype=tp.bfloat16, device="cuda", seed=2)
    q.requires_grad_(True)
    out = tp.ops.tpk.attention(q, k, v)
    out.float().sum().backward()
    assert q.grad is not None and tuple(q.grad.shape) == (1, 2, 128, 64)
    assert np.isfinite(to_numpy(q.grad)).all()
    assert library.opcheck(tp.ops.tpk.attention, (q.detach(), k, v, False)) == {}
