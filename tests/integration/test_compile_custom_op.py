"""A real custom op (tensorplay-library) inside a function compiled by the TVM backend
(tensorplay-compile): the op is a fusion barrier between TVM regions, and gradients flow
through both."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import library
from tensorplay.compiler import tvm_status


def test_real_custom_op_in_the_middle_of_a_chain():
    status = tvm_status()
    if not status:
        pytest.skip(str(status))
    name = "compile_tests::scaled"
    op = library.get_op(name) if library.has_op(name) else None
    if op is None:

        @library.custom_op(name, mutates_args=())
        def op(x: tp.Tensor) -> tp.Tensor:
            return tp.mul(x, 2.0)

        op.register_fake(lambda x: tp.empty_like(x))
        op.register_autograd(lambda ctx, g: (tp.mul(g, 2.0),))

    def f(x):
        return op(x.exp() + 1).tanh() * x

    x = tp.randn(32, requires_grad=True)
    cf = tp.compile(f, backend="tvm")
    y = cf(x)
    report = cf.report()
    assert [r.route for r in report] == ["tvm", "tvm", "custom_op", "tvm", "tvm"]
    assert "fusion barrier" in report["compile_tests_scaled"].reason
    y.sum().backward()
    got = x.grad.numpy().copy()
    x.grad = None
    f(x).sum().backward()
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-5, atol=1e-6)
