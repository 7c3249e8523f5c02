"""Under graph capture and tp.compile each tpk op is one opaque node (Triton and TileLang
launches are never traced into); report() names the route, and the compiled run gives
the eager values. The seed's debugging order: eager vs default, capture, marker, run.

Cross-component: tensorplay-kernels + tensorplay-compile (tensorplay.graph, tp.compile)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import graph
from tensorplay.kernels import triton_unavailable_reason


def rand(*shape: int, seed: int = 0):
    """A float32 tensor of normal values and its float64 numpy copy (the oracle's input)."""
    values = np.random.default_rng(seed).standard_normal(shape)
    t = tp.tensor(values, dtype=tp.float64).to(tp.float32)
    return t, t.to(tp.float64).numpy()


@pytest.fixture
def cpu_triton() -> None:
    why = triton_unavailable_reason("cpu")
    if why is not None:
        pytest.skip(f"Triton interpreter not available: {why}")


def _calls(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.usefixtures("cpu_triton")
def test_triton_ops_are_one_node_each_and_compile_to_the_eager_values():
    def block(x, w, b):
        h = tp.ops.tpk.layer_norm(x, w, b)
        return tp.ops.tpk.softmax(tp.ops.tpk.gelu(h)) * 2

    x, xn = rand(4, 16)
    w, _ = rand(16, seed=1)
    b, _ = rand(16, seed=2)
    eager = block(x, w, b)
    # 1. eager kernel vs the default implementation (numpy)
    h = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5)
    h = h * w.numpy() + b.numpy()
    g = tp.gelu(tp.tensor(h)).numpy().astype(np.float64)
    ref = np.exp(g - g.max(-1, keepdims=True))
    np.testing.assert_allclose(eager.numpy(), 2 * ref / ref.sum(-1, keepdims=True), rtol=1e-4)
    # 2. capture: one node per operator, nothing from inside the kernels
    gm = graph.symbolic_trace(block)
    names = [str(getattr(n.target, "name", n.target)) for n in _calls(gm)]
    assert names[:3] == ["tpk::layer_norm", "tpk::gelu", "tpk::softmax"] and len(names) == 4
    # 3. the codegen marker: the report routes each to its Triton op
    compiled = tp.compile(block)
    out = compiled(x, w, b)
    routes = {row.op: row.route for row in compiled.report()}
    assert routes["tpk::layer_norm"] == routes["tpk::softmax"] == "triton_op", routes
    # 4. the compiled run matches eager
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6)


def test_tilelang_ops_capture_as_tile_lang_op_nodes_without_a_gpu():
    # capture propagates shapes with the fake kernels only: no TileLang, no CUDA needed
    def f(q, k, v, a, b):
        return tp.ops.tpk.attention(q, k, v, causal=True), tp.ops.tpk.gemm(a, b)

    q = tp.empty(1, 2, 64, 32, dtype=tp.float16, device="meta")
    a = tp.empty(64, 32, dtype=tp.bfloat16, device="meta")
    b = tp.empty(32, 48, dtype=tp.bfloat16, device="meta")
    gm = graph.symbolic_trace(f)
    kinds = [
        (str(n.target.name), n.target.is_tile_lang_op)
        for n in _calls(gm)
        if hasattr(n.target, "name")
    ]
    assert kinds == [("tpk::attention", True), ("tpk::gemm", True)]
    out, c = f(q, q, q, a, b)
    assert tuple(out.shape) == (1, 2, 64, 32) and tuple(c.shape) == (64, 48)
