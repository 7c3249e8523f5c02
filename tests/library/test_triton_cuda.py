"""triton_op on the GPU: a compiled Triton kernel launched on TensorPlay CUDA tensors
through wrap_triton (needs CUDA, CuPy and triton; run on the H200)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import library


@pytest.mark.cuda
def test_triton_op_on_cuda_matches_numpy(qualname, monkeypatch):
    if not tp.cuda.is_available():
        pytest.skip("CUDA not available")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    triton = pytest.importorskip("triton", reason="triton not installed")
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):  # noqa: N803
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)

    kernel = library.wrap_triton(scale_kernel)

    @library.triton_op(qualname("scale"), mutates_args=(), device_types="cuda")
    def scale(x, alpha: float):
        out = tp.empty_like(x)
        n = x.numel()
        kernel[(triton.cdiv(n, 1024),)](x, out, n, alpha, BLOCK=1024)
        return out

    scale.register_fake(lambda x, alpha: tp.empty_like(x))
    scale.register_autograd(
        lambda ctx, g: (g * ctx.alpha, None),
        setup_context=lambda ctx, inputs, output: setattr(ctx, "alpha", inputs[1]),
    )
    host = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    x = tp.tensor(host, device="cuda", requires_grad=True)
    y = scale(x, 3.0)
    np.testing.assert_allclose(y.detach().cpu().numpy(), host * 3.0, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), np.full(5000, 3.0, np.float32))
    with pytest.raises(NotImplementedError, match="'cpu'"):
        scale(tp.tensor(host), 3.0)
    assert library.opcheck(scale, (tp.tensor(host[:64], device="cuda"), 2.0)) == {}
