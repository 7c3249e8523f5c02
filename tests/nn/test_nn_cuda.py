"""tensorplay-nn on CUDA (issue 16/17): a module and its optimiser train on the GPU, a
module graphed with ``tp.cuda.make_graphed_callables`` trains as its eager twin, and a whole
training step with ``optimizer.step()`` is captured into one CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn

pytestmark = pytest.mark.cuda


@pytest.fixture
def cuda():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    tp.cuda.synchronize()


def _twins():
    tp.manual_seed(0)
    a = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("cuda")
    b = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("cuda")
    b.load_state_dict(a.state_dict())
    return a, b


def _data(rng, n=8):
    x = tp.tensor(rng.standard_normal((n, 16)).astype(np.float32), device="cuda")
    y = tp.tensor(rng.integers(0, 4, n), device="cuda")
    return x, y


def _assert_same(a, b):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_allclose(
            p.detach().cpu().numpy(), q.detach().cpu().numpy(), atol=1e-6, err_msg=name
        )


def test_a_graphed_module_trains_as_its_eager_twin(cuda):
    graphed, eager = _twins()
    rng = np.random.default_rng(0)
    sample = tp.zeros((8, 16), device="cuda")
    assert tp.cuda.make_graphed_callables(graphed, (sample,)) is graphed
    opts = [tp.optim.SGD(m.parameters(), lr=0.1) for m in (graphed, eager)]
    for _ in range(3):
        x, y = _data(rng)
        for m, opt in zip((graphed, eager), opts):
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
    _assert_same(graphed, eager)


def test_a_whole_step_with_the_optimiser_is_one_graph(cuda):
    model, eager = _twins()
    opt = tp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_eager = tp.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(1)
    static_x, static_y = _data(rng)

    def step(m, o, x, y):
        o.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        return loss

    # the first eager step creates .grad and the momentum buffers outside the capture
    x0, y0 = _data(rng)
    step(model, opt, x0, y0)
    step(eager, opt_eager, x0, y0)
    g = tp.cuda.CUDAGraph()
    with tp.cuda.graph(g):
        static_loss = step(model, opt, static_x, static_y)
    for _ in range(3):
        x, y = _data(rng)
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        want = step(eager, opt_eager, x, y)
        assert static_loss.item() == pytest.approx(want.item(), rel=1e-5)
    _assert_same(model, eager)


def test_a_whole_step_with_a_capturable_adamw_is_one_graph(cuda):
    model, eager = _twins()
    opt = tp.optim.AdamW(model.parameters(), lr=0.01, capturable=True)
    opt_eager = tp.optim.AdamW(eager.parameters(), lr=0.01)  # host step count, fused path
    rng = np.random.default_rng(2)
    static_x, static_y = _data(rng)

    def step(m, o, x, y):
        o.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        return loss

    x0, y0 = _data(rng)
    step(model, opt, x0, y0)  # .grad and the state exist before the capture
    step(eager, opt_eager, x0, y0)
    assert all(s["step"].device.type == "cuda" for s in opt.state.values())
    g = tp.cuda.CUDAGraph()
    with tp.cuda.graph(g):
        static_loss = step(model, opt, static_x, static_y)
    for _ in range(4):  # each replay advances the device step count: the corrections follow
        x, y = _data(rng)
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        want = step(eager, opt_eager, x, y)
        assert static_loss.item() == pytest.approx(want.item(), rel=1e-4)
    assert all(s["step"].item() == 5 for s in opt.state.values())
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(
            p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-4, atol=1e-5, err_msg=name
        )


def test_a_plain_adam_refuses_capture(cuda):
    model, _ = _twins()
    opt = tp.optim.Adam(model.parameters())
    x, y = _data(np.random.default_rng(3))
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    g = tp.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="capturable=True"):
        with tp.cuda.graph(g):
            opt.step()
