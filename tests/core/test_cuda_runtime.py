"""tp.cuda's runtime surface (issue 16): streams and events, memory statistics,
``record_stream``, CUDA graphs (``CUDAGraph``, ``graph``, ``make_graphed_callables``) and
the proof that a training step has no hidden host synchronisation: it is captured whole.

Without CUDA, the GPU tests skip; the CPU tests check what torch gives on a machine
without CUDA (zero statistics, clear errors)."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import tensorplay as tp


@pytest.fixture
def cuda():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    tp.cuda.synchronize()


# ---- without CUDA ----------------------------------------------------------------------


def test_statistics_are_zero_and_capturing_false_without_cuda():
    if tp.cuda.is_available():
        pytest.skip("checks the machine without CUDA")
    assert tp.cuda.memory_allocated() == 0
    assert tp.cuda.max_memory_allocated() == 0
    assert tp.cuda.memory_reserved() == 0
    assert tp.cuda.memory_stats() == {}
    assert tp.cuda.is_current_stream_capturing() is False
    tp.cuda.empty_cache()  # a no-op, as in torch
    tp.cuda.reset_peak_memory_stats()


@pytest.mark.parametrize("make", [tp.cuda.CUDAGraph, tp.cuda.Stream, tp.cuda.Event])
def test_cuda_objects_say_why_without_cuda(make):
    if tp.cuda.is_available():
        pytest.skip("checks the machine without CUDA")
    with pytest.raises(RuntimeError, match="CUDA is not available: "):
        make()


def test_record_stream_refuses_a_cpu_tensor():
    with pytest.raises(RuntimeError, match="record_stream: expected a CUDA tensor, got one on cpu"):
        tp.ones(2).record_stream(None)


# ---- streams and events ------------------------------------------------------------------


@pytest.mark.cuda
def test_work_on_a_side_stream_and_events(cuda):
    s = tp.cuda.Stream()
    assert s != tp.cuda.current_stream() and s.cuda_stream != 0
    x = tp.arange(1 << 20, dtype=tp.float32, device="cuda")
    start, end = tp.cuda.Event(enable_timing=True), tp.cuda.Event(enable_timing=True)
    s.wait_stream(tp.cuda.current_stream())  # x is written on the current stream
    with tp.cuda.stream(s):
        assert tp.cuda.current_stream() == s
        start.record()
        y = (x * 2.0).sum()
        end.record()
    assert tp.cuda.current_stream() != s
    tp.cuda.current_stream().wait_stream(s)
    end.synchronize()
    assert end.query() and s.query()
    assert start.elapsed_time(end) >= 0.0
    assert y.item() == pytest.approx(float(np.arange(1 << 20, dtype=np.float64).sum() * 2))
    with pytest.raises(ValueError, match="enable_timing=True"):
        tp.cuda.Event().elapsed_time(tp.cuda.Event())


@pytest.mark.cuda
def test_memory_statistics_follow_allocations(cuda):
    gc.collect()
    tp.cuda.empty_cache()
    before = tp.cuda.memory_allocated()
    tp.cuda.reset_peak_memory_stats()
    x = tp.empty(1 << 20, dtype=tp.float32, device="cuda")  # 4 MiB
    assert tp.cuda.memory_allocated() - before >= 4 << 20
    assert tp.cuda.memory_reserved() >= tp.cuda.memory_allocated()
    y = x + 1.0
    peak = tp.cuda.max_memory_allocated()
    assert peak - before >= 8 << 20
    del x, y
    assert tp.cuda.memory_allocated() == before
    assert tp.cuda.max_memory_allocated() == peak  # a peak stays until reset
    tp.cuda.reset_peak_memory_stats()
    assert tp.cuda.max_memory_allocated() == before
    stats = tp.cuda.memory_stats()
    assert stats["allocated_bytes.all.current"] == before
    assert stats["allocation.all.allocated"] >= 2
    reserved = tp.cuda.memory_reserved()
    tp.cuda.empty_cache()  # the two freed 4 MiB blocks go back to the device
    assert tp.cuda.memory_reserved() <= reserved - (8 << 20)


@pytest.mark.cuda
def test_record_stream_holds_the_block_until_the_stream_passed_it(cuda):
    s = tp.cuda.Stream()
    x = tp.ones(1 << 20, device="cuda")
    ptr = x.data_ptr()
    x.record_stream(s)
    del x
    # the block is held: the next allocation of that size gets another one
    y = tp.empty(1 << 20, device="cuda")
    assert y.data_ptr() != ptr
    s.synchronize()
    from tensorplay import _cuda_memory

    for _ in range(200):  # an allocation lets the held block go once s has passed it
        tp.empty(16, device="cuda")
        if not _cuda_memory._held:
            break
        time.sleep(0.005)
    assert not _cuda_memory._held
    with pytest.raises(TypeError, match="expected a tp.cuda.Stream"):
        y.record_stream(3)


# ---- CUDA graphs -------------------------------------------------------------------------


@pytest.mark.cuda
def test_a_graph_replays_on_new_inputs(cuda):
    static_x = tp.zeros(1000, device="cuda")
    s = tp.cuda.Stream()
    with tp.cuda.stream(s):  # warm up: compile the kernels outside the capture
        (static_x * 2.0 + 1.0).relu().sum()
    tp.cuda.current_stream().wait_stream(s)
    g = tp.cuda.CUDAGraph()
    with tp.cuda.graph(g):
        static_y = (static_x * 2.0 + 1.0).relu()
        static_s = static_y.sum()
    assert tp.cuda.memory_stats()["graph_pools"] >= 1
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal(1000).astype(np.float32)
        static_x.copy_(tp.tensor(x, device="cuda"))
        g.replay()
        want = np.maximum(x * 2 + 1, 0)
        np.testing.assert_allclose(static_y.cpu().numpy(), want, rtol=1e-6)
        assert static_s.item() == pytest.approx(float(want.sum()), rel=1e-5)


@pytest.mark.cuda
def test_a_host_read_inside_a_capture_raises_and_ends_the_capture(cuda):
    x = tp.ones(4, device="cuda")
    g = tp.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=r"not allowed while a CUDA graph is being captured"):
        with tp.cuda.graph(g):
            (x * 2).sum().item()
    assert not tp.cuda.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="holds no capture"):
        g.replay()
    assert (x * 2).sum().item() == 8.0  # the stream works again
    with pytest.raises(RuntimeError, match="default stream"):
        tp.cuda.CUDAGraph().capture_begin()


@pytest.mark.cuda
def test_a_bad_index_met_in_a_replay_raises_at_the_next_sync(cuda):
    x = tp.arange(4.0, device="cuda")
    idx = tp.tensor([0, 1], device="cuda")
    x.gather(0, idx)  # warm-up
    g = tp.cuda.CUDAGraph()
    with tp.cuda.graph(g):
        y = x.gather(0, idx)
    tp.cuda.synchronize()  # nothing ran yet: no error
    idx.copy_(tp.tensor([1, 9], device="cuda"))
    g.replay()
    with pytest.raises(RuntimeError, match=r"gather\(\): index 9 is out of bounds"):
        tp.cuda.synchronize()
    idx.copy_(tp.tensor([3, 2], device="cuda"))
    g.replay()
    assert y.tolist() == [3.0, 2.0]


@pytest.mark.cuda
def test_attention_products_are_captured(cuda):
    """(B, H, S, D) products and their transposes run through cuBLAS inside a capture; a
    product cuBLAS is not called for says so instead of failing inside CuPy."""
    rng = np.random.default_rng(3)
    q = tp.tensor(rng.standard_normal((2, 4, 8, 16)).astype(np.float32), device="cuda")
    k = tp.tensor(rng.standard_normal((2, 4, 8, 16)).astype(np.float32), device="cuda")
    (q @ k.transpose(-2, -1)).softmax(dim=-1) @ k  # warm-up
    g = tp.cuda.CUDAGraph()
    with tp.cuda.graph(g):
        out = (q @ k.transpose(-2, -1)).softmax(dim=-1) @ k
    q.copy_(q * 2.0)
    g.replay()
    qn, kn = q.cpu().numpy().astype(np.float64), k.cpu().numpy().astype(np.float64)
    s = qn @ kn.transpose(0, 1, 3, 2)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ kn
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-4, atol=1e-5)
    v = tp.ones(16, device="cuda")
    with pytest.raises(RuntimeError, match=r"matmul\(\): the product of float32 operands"):
        with tp.cuda.graph(tp.cuda.CUDAGraph()):
            q[0, 0] @ v


def _mlp_params(lib, seed=0):
    rng = np.random.default_rng(seed)
    sizes = (64, 128, 10)
    ws = []
    for m, n in zip(sizes, sizes[1:]):
        ws += [rng.standard_normal((m, n)).astype(np.float32) * (2 / m) ** 0.5]
        ws += [np.zeros(n, np.float32)]
    return [lib.tensor(w, device="cuda").requires_grad_() for w in ws]


def _step(params, x, y, lr=0.05):
    h = (x @ params[0] + params[1]).relu()
    loss = -(h @ params[2] + params[3]).log_softmax(dim=1).gather(1, y).mean()
    loss.backward()
    with tp.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
    return loss


@pytest.mark.cuda
def test_a_whole_training_step_is_captured_and_replays_as_eager(cuda):
    """The proof of no hidden synchronisation: forward, backward and the update of an MLP
    are captured as one graph; replaying it trains exactly as the eager steps do."""
    rng = np.random.default_rng(1)
    batches = [
        (rng.standard_normal((32, 64)).astype(np.float32), rng.integers(0, 10, (32, 1)))
        for _ in range(4)
    ]
    eager = _mlp_params(tp)
    eager_losses = []
    for xb, yb in batches:
        loss = _step(eager, tp.tensor(xb, device="cuda"), tp.tensor(yb, device="cuda"))
        eager_losses.append(loss.item())

    params = _mlp_params(tp)
    static_x = tp.zeros((32, 64), device="cuda")
    static_y = tp.zeros((32, 1), dtype=tp.int64, device="cuda")
    # warm up on a side stream with a copy of the parameters (kernels, cuBLAS)
    warm = [p.detach().clone().requires_grad_() for p in params]
    s = tp.cuda.Stream()
    s.wait_stream(tp.cuda.current_stream())
    with tp.cuda.stream(s):
        _step(warm, static_x, static_y)
    tp.cuda.current_stream().wait_stream(s)
    g = tp.cuda.CUDAGraph()
    with tp.cuda.graph(g):
        static_loss = _step(params, static_x, static_y)
    graph_losses = []
    for xb, yb in batches:
        static_x.copy_(tp.tensor(xb, device="cuda"))
        static_y.copy_(tp.tensor(yb, device="cuda"))
        g.replay()
        graph_losses.append(static_loss.item())
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    for p, q in zip(params, eager):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), atol=1e-6)


class _Linear:
    """Enough of a module for make_graphed_callables: parameters(), forward, training."""

    def __init__(self, w):
        self.w, self.training = w, True

    def parameters(self):
        return [self.w]

    def forward(self, x):
        return (x @ self.w).tanh().sum(dim=1)

    def __call__(self, x):
        return self.forward(x)


@pytest.mark.cuda
def test_make_graphed_callables_matches_eager_forward_and_backward(cuda):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    graphed = _Linear(tp.tensor(w, device="cuda", requires_grad=True))
    eager = _Linear(tp.tensor(w, device="cuda", requires_grad=True))
    sample = tp.zeros((4, 16), device="cuda", requires_grad=True)
    assert tp.cuda.make_graphed_callables(graphed, (sample,)) is graphed
    assert graphed.w.grad is None  # warm-up and capture leave .grad alone
    for _ in range(2):
        xv = rng.standard_normal((4, 16)).astype(np.float32)
        x1 = tp.tensor(xv, device="cuda", requires_grad=True)
        x2 = tp.tensor(xv, device="cuda", requires_grad=True)
        out1, out2 = graphed(x1), eager(x2)
        np.testing.assert_allclose(
            out1.detach().cpu().numpy(), out2.detach().cpu().numpy(), rtol=1e-5
        )
        gv = tp.tensor(rng.standard_normal(4).astype(np.float32), device="cuda")
        out1.backward(gv)
        out2.backward(gv)
        np.testing.assert_allclose(x1.grad.cpu().numpy(), x2.grad.cpu().numpy(), rtol=1e-5)
    # the parameter's gradient accumulated over both calls, as eager
    np.testing.assert_allclose(graphed.w.grad.cpu().numpy(), eager.w.grad.cpu().numpy(), rtol=1e-5)
    graphed.training = False  # another state than the graphed one: the original forward
    x = tp.ones((5, 16), device="cuda")
    np.testing.assert_allclose(graphed(x).detach().cpu().numpy(), eager(x).detach().cpu().numpy())


@pytest.mark.cuda
def test_make_graphed_callables_checks_its_arguments(cuda):
    def fn(x):
        return x * 2.0

    graphed = tp.cuda.make_graphed_callables(fn, (tp.zeros((4, 16), device="cuda"),))
    np.testing.assert_allclose(graphed(tp.ones((4, 16), device="cuda")).cpu().numpy(), 2.0)
    with pytest.raises(ValueError, match="must match the sample"):
        graphed(tp.zeros((5, 16), device="cuda"))
    with pytest.raises(TypeError, match="must be a CUDA tensor"):
        tp.cuda.make_graphed_callables(fn, (tp.zeros((4, 16)),))
