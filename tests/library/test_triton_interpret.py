"""triton_op + wrap_triton with a real Triton kernel, run by Triton's CPU interpreter
(TRITON_INTERPRET=1) directly on TensorPlay tensors. Skipped when triton is not installed
(it is an optional extra: pip install triton==3.6.0)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import capture, library


@pytest.fixture
def triton(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when @triton.jit runs
    return pytest.importorskip("triton", reason="triton not installed (optional extra)")


def _add_op(triton, qualname):
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # noqa: N803
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(
            out_ptr + offs,
            tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
            mask=mask,
        )

    kernel = library.wrap_triton(add_kernel)
    launches = []

    @library.triton_op(qualname("add"), mutates_args=())
    def add(x, y):
        out = tp.empty_like(x)
        n = x.numel()
        launches.append(n)
        kernel[(triton.cdiv(n, 8),)](x, y, out, n, BLOCK=8)
        return out

    add.register_fake(lambda x, y: tp.empty_like(x))
    add.register_autograd(lambda ctx, g: (g, g))
    return add, kernel, launches


def test_triton_kernel_runs_on_tensorplay_tensors(triton, qualname):
    add, _, launches = _add_op(triton, qualname)
    x = np.arange(19, dtype=np.float32)
    out = add(tp.tensor(x), tp.ones(19))
    np.testing.assert_array_equal(out.numpy(), x + 1)
    assert launches == [19] and add.is_triton_op


def test_triton_op_autograd_and_opcheck(triton, qualname):
    add, _, _ = _add_op(triton, qualname)
    a, b = tp.randn(5, requires_grad=True), tp.randn(5, requires_grad=True)
    add(a, b).sum().backward()
    assert a.grad.tolist() == [1.0] * 5 and b.grad.tolist() == [1.0] * 5
    # the four default checks (capture runs the real tracer when tensorplay-compile has one)
    failures = library.opcheck(add, (tp.randn(6), tp.randn(6)), raise_exception=False)
    assert failures == {}


def test_triton_op_captures_as_one_node_and_raw_launch_refuses_proxies(triton, qualname):
    add, kernel, launches = _add_op(triton, qualname)

    class P(capture.Proxy):
        pass

    class Rec:
        def __init__(self):
            self.calls = []

        def record_call(self, target, args, kwargs):
            self.calls.append(target)
            return P()

    rec = Rec()
    with capture.tracing(rec):
        add(P(), P())
        with pytest.raises(capture.GraphCaptureError, match="triton_op"):
            kernel[(1,)](P(), P(), P(), 4, BLOCK=8)
    assert rec.calls == [add] and launches == []
