"""The multi-tensor (``foreach``) updates of SGD, Adam(W), RMSprop and Adagrad against the
reference single-tensor loop
and against torch: same values (bit for bit on the CPU, where both run the same float ops
in the same order), same state, the version counters bumped, and the reference loop taken
wherever the fast path does not apply."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.optim import _foreach

CONFIGS = [
    ("Adam", {}),
    ("Adam", {"weight_decay": 0.1}),
    ("Adam", {"amsgrad": True, "maximize": True}),
    ("AdamW", {}),
    ("AdamW", {"weight_decay": 0.3, "amsgrad": True}),
    ("SGD", {"momentum": 0.9}),
    ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"momentum": 0.5, "dampening": 0.2, "maximize": True}),
    ("RMSprop", {}),
    ("RMSprop", {"centered": True, "momentum": 0.9, "weight_decay": 0.1}),
    ("RMSprop", {"momentum": 0.5, "maximize": True}),
    ("Adagrad", {}),
    ("Adagrad", {"lr_decay": 0.1, "weight_decay": 0.1, "maximize": True}),
]

SHAPES = [(7, 5), (3,), (), (40000,)]  # the last spans several CUDA blocks


def _values(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def _run(name, kwargs, foreach, device="cpu", dtype=np.float32, steps=4):
    """Parameters after ``steps`` updates with fixed per-step gradients."""
    params = [tp.tensor(v, device=device, requires_grad=True) for v in _values(dtype)]
    opt = getattr(tp.optim, name)(params, lr=0.05, foreach=foreach, **kwargs)
    for k in range(steps):
        for p, g in zip(params, _values(dtype, seed=k + 1)):
            p.grad = tp.tensor(g, device=device)
        opt.step()
    return [p.detach().cpu().numpy() for p in params], opt


@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_foreach_matches_reference_loop_bitwise_on_cpu(name, kwargs, dtype):
    fast, fast_opt = _run(name, kwargs, foreach=None, dtype=dtype)
    ref, ref_opt = _run(name, kwargs, foreach=False, dtype=dtype)
    for a, b in zip(fast, ref):
        np.testing.assert_array_equal(a, b)
    for pa, pb in zip(fast_opt.param_groups[0]["params"], ref_opt.param_groups[0]["params"]):
        for key, va in fast_opt.state[pa].items():
            np.testing.assert_array_equal(va.numpy(), ref_opt.state[pb][key].numpy(), key)


@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=str)
def test_foreach_matches_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    fast, _ = _run(name, kwargs, foreach=True, dtype=np.float64)
    tparams = [torch.tensor(v, requires_grad=True) for v in _values(np.float64)]
    topt = getattr(torch.optim, name)(tparams, lr=0.05, foreach=True, **kwargs)
    for k in range(4):
        for p, g in zip(tparams, _values(np.float64, seed=k + 1)):
            p.grad = torch.tensor(g)
        topt.step()
    for a, b in zip(fast, tparams):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_the_fast_path_runs_and_bumps_versions(monkeypatch):
    calls = []
    real = _foreach.adam
    monkeypatch.setattr(_foreach, "adam", lambda *a, **k: calls.append(1) or real(*a, **k))
    p = tp.ones(4, requires_grad=True)
    p.grad = tp.ones(4)
    opt = tp.optim.Adam([p])
    before = p._version
    opt.step()
    assert calls == [1]
    assert p._version == before + 1
    assert opt.state[p]["exp_avg"]._version == 1
    np.testing.assert_allclose(p.detach().numpy(), np.full(4, 1 - 1e-3), rtol=1e-6)


def test_reference_loop_where_the_fast_path_does_not_apply(monkeypatch):
    monkeypatch.setattr(_foreach, "adam", lambda *a, **k: pytest.fail("fast path taken"))
    base = tp.ones(4, 3)
    strided = base.t().detach().requires_grad_()  # not contiguous
    strided.grad = tp.ones(3, 4)
    tp.optim.Adam([strided]).step()
    half = tp.ones(3, dtype=tp.float16, requires_grad=True)  # not float32/float64
    half.grad = tp.ones(3, dtype=tp.float16)
    tp.optim.Adam([half]).step()
    plain = tp.ones(3, requires_grad=True)
    plain.grad = tp.ones(3)
    tp.optim.Adam([plain], foreach=False).step()
    seen = []

    class Watch(tp.overrides.TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Watch():  # ops are observed: the reference loop shows each of them
        tp.optim.Adam([plain]).step()
    assert len(seen) > 5
    np.testing.assert_allclose(strided.detach().numpy(), np.full((3, 4), 1 - 1e-3), rtol=1e-6)
    np.testing.assert_allclose(half.detach().numpy(), np.full(3, 1 - 1e-3), rtol=1e-3)


def test_parameters_at_different_step_counts():
    def run(foreach):
        a, b = tp.ones(3, requires_grad=True), tp.ones(2, requires_grad=True)
        opt = tp.optim.Adam([a, b], lr=0.1, foreach=foreach)
        a.grad = tp.full((3,), 0.5)
        opt.step()  # b has no gradient: skipped
        a.grad, b.grad = tp.full((3,), 0.5), tp.full((2,), -1.0)
        opt.step()  # a at step 2, b at step 1, in one group
        assert opt.state[a]["step"].item() == 2 and opt.state[b]["step"].item() == 1
        return a.detach().numpy(), b.detach().numpy()

    for got, want in zip(run(None), run(False)):
        np.testing.assert_array_equal(got, want)


# ---- CUDA: the one-launch kernels ------------------------------------------------------------


@pytest.fixture
def cuda():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")


@pytest.mark.cuda
@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_foreach_on_cuda_matches_the_cpu(cuda, name, kwargs, dtype):
    got, opt = _run(name, kwargs, foreach=True, device="cuda", dtype=dtype)
    want, _ = _run(name, kwargs, foreach=False, device="cpu", dtype=dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    assert all(p.device.type == "cuda" for p in opt.param_groups[0]["params"])


@pytest.mark.cuda
def test_foreach_on_cuda_uses_one_launch(cuda, monkeypatch):
    launches = []
    real = _foreach._kernel
    monkeypatch.setattr(_foreach, "_kernel", lambda *a: (launches.append(a[1]), real(*a))[1])
    params = [tp.ones(n, device="cuda", requires_grad=True) for n in (5, 70000, 3)]
    for p in params:
        p.grad = tp.ones_like(p)
    opt = tp.optim.AdamW(params)
    opt.step()
    opt.step()
    assert launches == ["adam_f32", "adam_f32"]


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize("kwargs", [{}, {"amsgrad": True, "weight_decay": 0.1, "maximize": True}])
def test_capturable_keeps_the_step_on_the_device_and_matches(name, kwargs):
    got, opt = _run(name, {"capturable": True, **kwargs}, foreach=None, dtype=np.float64)
    want, ref = _run(name, kwargs, foreach=False, dtype=np.float64)
    # the corrections come from a float32 step tensor, as in torch's capturable mode:
    # 1 - 0.999**1 loses ~1e-5 of its value to float32 cancellation
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert opt.param_groups[0]["capturable"] is True
    # a loaded state dict keeps the step count on the host; capturable moves it back
    state = ref.state_dict()
    ref.load_state_dict(state)
    assert all(s["step"].device.type == "cpu" for s in ref.state.values())
    opt.load_state_dict(opt.state_dict())
    for p in opt.param_groups[0]["params"]:
        p.grad = tp.ones_like(p)
    opt.step()
    assert all(s["step"].item() == 5 for s in opt.state.values())


@pytest.mark.parametrize(
    ("name", "fn"), [("RMSprop", "rmsprop"), ("Adagrad", "adagrad"), ("SGD", "sgd_momentum")]
)
def test_each_optimizer_takes_its_fast_path(monkeypatch, name, fn):
    calls = []
    real = getattr(_foreach, fn)
    monkeypatch.setattr(_foreach, fn, lambda *a, **k: calls.append(1) or real(*a, **k))
    p = tp.ones(4, requires_grad=True)
    kwargs = {"momentum": 0.9} if name == "SGD" else {}
    opt = getattr(tp.optim, name)([p], lr=0.1, **kwargs)
    for _ in range(2):
        p.grad = tp.ones(4)
        opt.step()
    assert len(calls) == (1 if name == "SGD" else 2)  # SGD's first step creates the buffer


def test_adagrad_parameters_at_different_step_counts():
    def run(foreach):
        a, b = tp.ones(3, requires_grad=True), tp.ones(2, requires_grad=True)
        opt = tp.optim.Adagrad([a, b], lr=0.1, lr_decay=0.5, foreach=foreach)
        a.grad = tp.full((3,), 0.5)
        opt.step()
        a.grad, b.grad = tp.full((3,), 0.5), tp.full((2,), -1.0)
        opt.step()  # a at step 2, b at step 1: two decayed rates in one group
        return a.detach().numpy(), b.detach().numpy()

    for got, want in zip(run(None), run(False)):
        np.testing.assert_array_equal(got, want)
