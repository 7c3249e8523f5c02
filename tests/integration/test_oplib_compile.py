"""An operator of a compiled operator library (tensorplay-oplib) under graph capture and
``tp.compile`` (tensorplay-compile): one node of its own, a fusion barrier between TVM
regions, values and gradients as in eager mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import oplib
from tensorplay.graph import symbolic_trace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "oplib" / "ops.yaml"


@pytest.fixture(scope="module")
def ops(cache_dir, tmp_path_factory):
    if oplib.loaded().get("oplib_example") is None:
        oplib.load(oplib.build(EXAMPLE, tmp_path_factory.mktemp("example"), cuda="off"))
    return tp.ops.oplib_example


def _f(ops):
    def f(x, b):
        return ops.fused_bias_gelu(x.exp() - 1.0, b, alpha=0.5).tanh() * x

    return f


def test_the_operator_is_one_node_of_the_traced_graph(ops):
    gm = symbolic_trace(_f(ops))
    calls = [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target is ops.fused_bias_gelu
    ]
    assert len(calls) == 1
    assert calls[0].kwargs.get("alpha") == 0.5
    x, b = tp.randn(4, 3), tp.randn(3)
    np.testing.assert_allclose(gm(x, b).numpy(), _f(ops)(x, b).numpy(), rtol=1e-6)


def test_compiled_values_and_gradients_match_eager(ops):
    from tensorplay.compiler import tvm_status

    status = tvm_status()
    if not status:
        pytest.skip(str(status))
    f = _f(ops)
    cf = tp.compile(f, backend="tvm")
    x = tp.randn(8, 5, requires_grad=True)
    b = tp.randn(5, requires_grad=True)
    y = cf(x, b)
    routes = {r.route for r in cf.report()}
    assert "tvm" in routes and "custom_op" in routes  # TVM around the op, the op itself
    y.sum().backward()
    got = (x.grad.numpy().copy(), b.grad.numpy().copy())
    x.grad = b.grad = None
    f(x, b).sum().backward()
    np.testing.assert_allclose(got[0], x.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], b.grad.numpy(), rtol=1e-5, atol=1e-6)
