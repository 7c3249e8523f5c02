"""tp.compile(mode="reduce-overhead") (issue 16): calls on CUDA tensors replay CUDA graphs
of the artifact, forward and backward; a region that synchronises raises a clear error;
CPU calls are unaffected."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp


@pytest.fixture
def cuda():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")


def test_an_unknown_mode_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="mode must be one of 'default', 'reduce-overhead'"):
        tp.compile(lambda x: x, mode="max-autotune")


def test_cpu_calls_are_unaffected():
    f = tp.compile(lambda x: (x * 2.0).relu(), backend="eager", mode="reduce-overhead")
    a, b = f(tp.tensor([1.0, -1.0])), f(tp.tensor([3.0, -3.0]))
    assert a.tolist() == [2.0, 0.0] and b.tolist() == [6.0, 0.0]  # a is not overwritten


@pytest.mark.cuda
def test_inference_replays_a_graph_with_new_inputs(cuda):
    w = tp.randn(16, 8, device="cuda")
    f = tp.compile(lambda x: (x @ w).tanh().sum(dim=1), backend="eager", mode="reduce-overhead")
    rng = np.random.default_rng(0)
    for _ in range(4):
        xv = rng.standard_normal((4, 16)).astype(np.float32)
        with tp.no_grad():
            got = f(tp.tensor(xv, device="cuda")).cpu().numpy()
        want = np.tanh(xv @ w.cpu().numpy()).sum(axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    artifact = next(iter(f._tensorplay_cache.values()))
    assert artifact.cudagraph is not None  # the calls after the first replayed a graph


@pytest.mark.cuda
def test_training_replays_forward_and_backward_graphs(cuda):
    rng = np.random.default_rng(1)
    wv = rng.standard_normal((16, 8)).astype(np.float32)
    w1 = tp.tensor(wv, device="cuda", requires_grad=True)
    w2 = tp.tensor(wv, device="cuda", requires_grad=True)
    f = tp.compile(lambda x, w: (x @ w).relu().sum(), backend="eager", mode="reduce-overhead")
    for _ in range(3):
        x = tp.tensor(rng.standard_normal((4, 16)).astype(np.float32), device="cuda")
        f(x, w1).backward()
        (x @ w2).relu().sum().backward()
    np.testing.assert_allclose(w1.grad.cpu().numpy(), w2.grad.cpu().numpy(), rtol=1e-5)


@pytest.mark.cuda
def test_a_region_that_synchronises_raises_naming_the_problem(cuda):
    def f(x):
        return x[x > 0].sum() + x  # masked selection: its shape is read on the host

    g = tp.compile(f, backend="eager", mode="reduce-overhead")
    x = tp.ones(4, device="cuda")
    msg = r"cannot be captured into a CUDA graph: masked selection x\[mask\]"
    with pytest.raises(RuntimeError, match=msg):
        g(x)
        g(x)  # the graph is built at the first call that replays
