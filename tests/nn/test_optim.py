"""Optimisers, learning-rate schedulers and gradient clipping, checked against torch."""

from __future__ import annotations

import copy
import math
import pickle
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.nn.utils import clip_grad_norm_, clip_grad_value_, get_total_norm
from tensorplay.optim import lr_scheduler as tp_sched
from tensorplay.optim.adagrad import Adagrad
from tensorplay.optim.adam import Adam
from tensorplay.optim.adamw import AdamW
from tensorplay.optim.optimizer import Optimizer
from tensorplay.optim.rmsprop import RMSprop
from tensorplay.optim.sgd import SGD

try:  # the oracle: tests that compare with torch.optim skip without it
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(
    torch is None,
    reason="torch (the test oracle) is not installed: pip install /opt/wheels/torch-2.13.0*.whl",
)

TP_OPTIMS = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW, "RMSprop": RMSprop, "Adagrad": Adagrad}
SHAPES = [(3, 4), (5,), ()]
RTOL, ATOL = 1e-5, 1e-6


def _init_arrays(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _grad_arrays(n_steps: int, seed: int = 1) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(n_steps)]


def _tp_params(arrays):
    return [tp.tensor(a.copy(), requires_grad=True) for a in arrays]


def _torch_params(arrays):
    return [torch.tensor(a.copy(), requires_grad=True) for a in arrays]


def _set_grads(params, grads, lib):
    for p, g in zip(params, grads):
        p.grad = lib.tensor(g.copy())


def _torch_optim(name, params, kwargs):
    kwargs = dict(kwargs)
    if name != "SGD" or "foreach" not in kwargs:
        kwargs["foreach"] = False
    return getattr(torch.optim, name)(params, **kwargs)


def _assert_params_close(tp_params, torch_params):
    for a, b in zip(tp_params, torch_params):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=RTOL, atol=ATOL)


def _run_both(name, kwargs, n_steps=8, groups=None):
    """Step a tensorplay and a torch optimiser side by side on the same gradients."""
    arrays = _init_arrays()
    tps, tos = _tp_params(arrays), _torch_params(arrays)
    if groups is None:
        tp_in, to_in = tps, tos
    else:  # groups: list of (slice, extra kwargs)
        tp_in = [{"params": tps[s], **g} for s, g in groups]
        to_in = [{"params": tos[s], **g} for s, g in groups]
    opt_tp = TP_OPTIMS[name](tp_in, **kwargs)
    opt_to = _torch_optim(name, to_in, kwargs)
    for grads in _grad_arrays(n_steps):
        _set_grads(tps, grads, tp)
        _set_grads(tos, grads, torch)
        opt_tp.step()
        opt_to.step()
    _assert_params_close(tps, tos)
    return opt_tp, opt_to, tps, tos


CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "maximize": True}),
    ("Adam", {}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "maximize": True, "weight_decay": 0.05}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("AdamW", {}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True, "maximize": True}),
    ("RMSprop", {}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9}),
    ("RMSprop", {"lr": 0.01, "centered": True}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5, "maximize": True}),
    ("Adagrad", {}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.1}),
    ("Adagrad", {"lr": 0.1, "initial_accumulator_value": 0.5, "eps": 1e-6, "maximize": True}),
]


@needs_torch
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=lambda x: str(x))
def test_matches_torch(name, kwargs):
    _run_both(name, kwargs)


@needs_torch
@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop"])
def test_quadratic_loss_matches_torch(name):
    """Gradients from a real backward pass (loss = sum((w * x - y)^2))."""
    rng = np.random.default_rng(3)
    w0, x, y = (rng.standard_normal(6).astype(np.float32) for _ in range(3))
    kw = {"lr": 0.05, "momentum": 0.9} if name != "Adam" else {"lr": 0.05}
    w_tp = tp.tensor(w0.copy(), requires_grad=True)
    w_to = torch.tensor(w0.copy(), requires_grad=True)
    opt_tp = TP_OPTIMS[name]([w_tp], **kw)
    opt_to = _torch_optim(name, [w_to], kw)
    for _ in range(10):
        opt_tp.zero_grad()
        ((w_tp * tp.tensor(x) - tp.tensor(y)) ** 2).sum().backward()
        opt_tp.step()
        opt_to.zero_grad()
        ((w_to * torch.tensor(x) - torch.tensor(y)) ** 2).sum().backward()
        opt_to.step()
    np.testing.assert_allclose(w_tp.detach().numpy(), w_to.detach().numpy(), rtol=RTOL, atol=ATOL)


@needs_torch
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_param_groups_with_different_lrs(name):
    kwargs = {"lr": 0.01} if name != "SGD" else {"lr": 0.01, "momentum": 0.9}
    groups = [(slice(0, 1), {"lr": 0.1}), (slice(1, 3), {})]
    opt_tp, _, _, _ = _run_both(name, kwargs, groups=groups)
    assert opt_tp.param_groups[0]["lr"] == 0.1
    assert opt_tp.param_groups[1]["lr"] == 0.01


def test_params_without_grad_are_skipped():
    arrays = _init_arrays()
    tps = _tp_params(arrays)
    opt = Adam(tps, lr=0.1)
    tps[0].grad = tp.ones_like(tps[0])
    opt.step()
    assert not np.allclose(tps[0].detach().numpy(), arrays[0])
    np.testing.assert_array_equal(tps[1].detach().numpy(), arrays[1])
    assert len(opt.state[tps[1]]) == 0
    assert float(opt.state[tps[0]]["step"]) == 1.0


def test_step_writes_in_place_and_keeps_leaf():
    p = tp.tensor([1.0, 2.0], requires_grad=True)
    alias = p
    opt = SGD([p], lr=0.5)
    p.grad = tp.tensor([1.0, 1.0])
    opt.step()
    assert alias is opt.param_groups[0]["params"][0]
    np.testing.assert_allclose(p.detach().numpy(), [0.5, 1.5])
    assert p.requires_grad and p.is_leaf and p.grad_fn is None


@needs_torch
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
        ("Adam", {"lr": 0.01, "amsgrad": True}),
        ("AdamW", {"lr": 0.01}),
        ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
        ("Adagrad", {"lr": 0.1, "lr_decay": 0.01}),
    ],
)
def test_state_dict_round_trip(name, kwargs):
    """A fresh optimiser loaded from the state dict continues exactly like the original."""
    arrays = _init_arrays()
    grads = _grad_arrays(8)
    pa = _tp_params(arrays)
    opt_a = TP_OPTIMS[name](pa, **kwargs)
    for g in grads[:4]:
        _set_grads(pa, g, tp)
        opt_a.step()
    sd = opt_a.state_dict()
    # torch's format: parameters by index, hyperparameters as values
    assert sorted(sd.keys()) == ["param_groups", "state"]
    assert sd["param_groups"][0]["params"] == [0, 1, 2]
    assert set(sd["state"].keys()) <= {0, 1, 2}
    torch_keys = _torch_optim(name, _torch_params(arrays), kwargs).state_dict()
    assert set(sd["param_groups"][0]) <= set(torch_keys["param_groups"][0])

    pb = [tp.tensor(p.detach().numpy().copy(), requires_grad=True) for p in pa]
    opt_b = TP_OPTIMS[name](pb, **{**kwargs, "lr": 123.0})  # lr comes from the state dict
    opt_b.load_state_dict(copy.deepcopy(sd))
    assert opt_b.param_groups[0]["lr"] == kwargs["lr"]
    assert opt_b.param_groups[0]["params"][0] is pb[0]
    # loaded state is a copy, not an alias of the original's
    for i, p in enumerate(pb):
        for key, v in opt_b.state[p].items():
            if isinstance(v, tp.Tensor):
                assert v is not opt_a.state[pa[i]][key]
    for g in grads[4:]:
        _set_grads(pa, g, tp)
        _set_grads(pb, g, tp)
        opt_a.step()
        opt_b.step()
    for a, b in zip(pa, pb):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


@needs_torch
def test_state_dict_matches_torch_layout():
    opt_tp, opt_to, _, _ = _run_both("Adam", {"lr": 0.01, "amsgrad": True}, n_steps=3)
    sd_tp, sd_to = opt_tp.state_dict(), opt_to.state_dict()
    assert sd_tp["state"].keys() == sd_to["state"].keys()
    for k in sd_to["state"]:
        assert sd_tp["state"][k].keys() == sd_to["state"][k].keys()
        for key, v in sd_to["state"][k].items():
            np.testing.assert_allclose(
                sd_tp["state"][k][key].numpy(), v.numpy(), rtol=RTOL, atol=ATOL
            )
        assert sd_tp["state"][k]["step"].dtype == tp.float32


def test_load_state_dict_errors():
    p = tp.tensor([1.0], requires_grad=True)
    q = tp.tensor([2.0], requires_grad=True)
    sd = SGD([p, q], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        SGD([p], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        SGD([{"params": [p]}, {"params": [q]}], lr=0.1).load_state_dict(sd)


def test_load_state_dict_casts_to_param_dtype():
    p = tp.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([p], lr=0.1, momentum=0.9)
    p.grad = tp.tensor([1.0, 1.0])
    opt.step()
    sd = opt.state_dict()
    p64 = tp.tensor([1.0, 2.0], dtype=tp.float64, requires_grad=True)
    opt64 = SGD([p64], lr=0.1, momentum=0.9)
    opt64.load_state_dict(sd)
    assert opt64.state[p64]["momentum_buffer"].dtype == tp.float64


def test_zero_grad_both_ways():
    p = tp.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    p.grad = tp.tensor([3.0, 4.0])
    g = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is g
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert p.grad is None
    opt.zero_grad()  # no grad: nothing to do
    assert p.grad is None


@needs_torch
def test_closure_runs_with_grad_and_returns_loss():
    w = tp.tensor([1.0, -2.0], requires_grad=True)
    w_to = torch.tensor([1.0, -2.0], requires_grad=True)
    opt = SGD([w], lr=0.1, momentum=0.9)
    opt_to = torch.optim.SGD([w_to], lr=0.1, momentum=0.9, foreach=False)
    calls = []

    def closure():
        calls.append(tp.is_grad_enabled())
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    def closure_to():
        opt_to.zero_grad()
        loss = (w_to * w_to).sum()
        loss.backward()
        return loss

    for _ in range(3):
        with tp.no_grad():
            loss = opt.step(closure)
        loss_to = opt_to.step(closure_to)
        assert float(loss) == pytest.approx(float(loss_to.detach()), rel=1e-6)
    assert calls == [True, True, True]
    np.testing.assert_allclose(w.detach().numpy(), w_to.detach().numpy(), rtol=RTOL)
    assert opt.step() is None


def test_add_param_group():
    p = tp.tensor([1.0], requires_grad=True)
    q = tp.tensor([2.0], requires_grad=True)
    opt = Adagrad([p], lr=0.1)
    opt.add_param_group({"params": q, "lr": 0.5})
    assert len(opt.param_groups) == 2
    assert opt.param_groups[1]["lr"] == 0.5
    assert opt.param_groups[1]["lr_decay"] == 0
    assert len(opt.param_groups[1]["params"]) == 1 and opt.param_groups[1]["params"][0] is q
    q.grad = tp.tensor([1.0])
    opt.step()  # state for the added group is created on first use
    assert float(q.detach().numpy()[0]) == pytest.approx(2.0 - 0.5, rel=1e-5)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [p]})
    with pytest.raises(TypeError, match="param_group must be a dict"):
        opt.add_param_group([q])


def test_named_parameters_groups():
    p = tp.tensor([1.0], requires_grad=True)
    opt = SGD([("w", p)], lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["w"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["w"]


def test_construction_errors():
    p = tp.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more than one"):
        SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors"):
        SGD([p, 1.0], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors or dicts"):
        SGD(p, lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        SGD([{"params": {p}}], lr=0.1)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        SGD([p * 2], lr=0.1)


@needs_torch
@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (SGD, {"lr": -0.1}, "Invalid learning rate: -0.1"),
        (SGD, {"lr": 0.1, "momentum": -1.0}, "Invalid momentum value: -1.0"),
        (SGD, {"lr": 0.1, "weight_decay": -1.0}, "Invalid weight_decay value: -1.0"),
        (SGD, {"lr": 0.1, "nesterov": True}, "Nesterov momentum requires a momentum"),
        (Adam, {"lr": -1e-3}, "Invalid learning rate: -0.001"),
        (Adam, {"eps": -1.0}, "Invalid epsilon value: -1.0"),
        (Adam, {"betas": (1.0, 0.999)}, "Invalid beta parameter at index 0: 1.0"),
        (Adam, {"betas": (0.9, -0.1)}, "Invalid beta parameter at index 1: -0.1"),
        (Adam, {"weight_decay": -0.1}, "Invalid weight_decay value: -0.1"),
        (AdamW, {"betas": (0.9, 1.5)}, "Invalid beta parameter at index 1: 1.5"),
        (RMSprop, {"alpha": -0.5}, "Invalid alpha value: -0.5"),
        (RMSprop, {"momentum": -0.5}, "Invalid momentum value: -0.5"),
        (RMSprop, {"eps": -0.5}, "Invalid epsilon value: -0.5"),
        (Adagrad, {"lr_decay": -0.5}, "Invalid lr_decay value: -0.5"),
        (
            Adagrad,
            {"initial_accumulator_value": -1.0},
            "Invalid initial_accumulator_value value: -1.0",
        ),
    ],
)
def test_invalid_hyperparameters(cls, kwargs, message):
    p = tp.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        cls([p], **kwargs)
    # torch raises the same message
    name = cls.__name__
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        getattr(torch.optim, name)([torch.tensor([1.0], requires_grad=True)], **kwargs)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad"])
def test_repr_matches_torch_layout(name):
    p = tp.tensor([1.0], requires_grad=True)
    text = repr(TP_OPTIMS[name]([p], lr=0.5))
    assert text.startswith(f"{name} (\nParameter Group 0\n")
    assert "    lr: 0.5\n" in text
    assert text.endswith(")")
    lines = [ln.strip().split(":")[0] for ln in text.splitlines()[2:-1]]
    assert lines == sorted(lines)


@needs_torch
def test_tensor_lr_with_scheduler():
    """A 1-element tensor lr works and a scheduler updates it in place, like torch."""
    p = tp.tensor([1.0, 2.0], requires_grad=True)
    p_to = torch.tensor([1.0, 2.0], requires_grad=True)
    lr, lr_to = tp.tensor(0.1), torch.tensor(0.1)
    opt = Adam([p], lr=lr, weight_decay=0.1)
    opt_to = torch.optim.Adam([p_to], lr=lr_to, weight_decay=0.1, foreach=False)
    s = tp_sched.StepLR(opt, step_size=1, gamma=0.5)
    s_to = torch.optim.lr_scheduler.StepLR(opt_to, step_size=1, gamma=0.5)
    for _ in range(4):
        p.grad = tp.tensor([1.0, -1.0])
        p_to.grad = torch.tensor([1.0, -1.0])
        opt.step()
        opt_to.step()
        s.step()
        s_to.step()
    assert opt.param_groups[0]["lr"] is lr
    assert float(lr) == pytest.approx(float(lr_to))
    np.testing.assert_allclose(p.detach().numpy(), p_to.detach().numpy(), rtol=RTOL)


def test_optimizer_pickles():
    p = tp.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    opt2 = pickle.loads(pickle.dumps(opt))
    assert opt2.param_groups[0]["lr"] == 0.1
    assert isinstance(opt2, Optimizer)


# ---- learning-rate schedulers ---------------------------------------------------------------


def _make_pair(n_groups=2, opt="SGD"):
    lrs = [0.1, 0.05][:n_groups]
    tp_groups = [{"params": [tp.tensor([1.0], requires_grad=True)], "lr": lr} for lr in lrs]
    to_groups = [{"params": [torch.tensor([1.0], requires_grad=True)], "lr": lr} for lr in lrs]
    if opt == "SGD":
        return SGD(tp_groups, lr=0.1, momentum=0.9), torch.optim.SGD(
            to_groups, lr=0.1, momentum=0.9
        )
    return Adam(tp_groups, lr=0.1), torch.optim.Adam(to_groups, lr=0.1)


def _lr_sequences(make_tp, make_to, n_steps=20, opt="SGD", n_groups=2):
    opt_tp, opt_to = _make_pair(n_groups, opt)
    s_tp, s_to = make_tp(opt_tp), make_to(opt_to)
    seq_tp, seq_to = [s_tp.get_last_lr()], [s_to.get_last_lr()]
    for _ in range(n_steps):
        opt_tp.step()
        opt_to.step()
        s_tp.step()
        s_to.step()
        seq_tp.append(s_tp.get_last_lr())
        seq_to.append(s_to.get_last_lr())
        assert [g["lr"] for g in opt_tp.param_groups] == seq_tp[-1]
    return seq_tp, seq_to, opt_tp, opt_to, s_tp, s_to


SCHEDULERS = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [2, 5, 5, 11], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("CosineAnnealingLR", {"T_max": 7}),
    ("CosineAnnealingLR", {"T_max": 5, "eta_min": 0.001}),
    ("LinearLR", {}),
    ("LinearLR", {"start_factor": 0.25, "end_factor": 0.9, "total_iters": 8}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 4}),
    ("PolynomialLR", {"total_iters": 10, "power": 2.0}),
    ("OneCycleLR", {"max_lr": 0.5, "total_steps": 20}),
    ("OneCycleLR", {"max_lr": [0.5, 0.2], "total_steps": 20, "anneal_strategy": "linear"}),
    ("OneCycleLR", {"max_lr": 0.5, "epochs": 4, "steps_per_epoch": 5, "three_phase": True}),
]


@needs_torch
@pytest.mark.parametrize(("name", "kwargs"), SCHEDULERS, ids=lambda x: str(x))
def test_scheduler_matches_torch(name, kwargs):
    n = 19 if name == "OneCycleLR" else 20
    seq_tp, seq_to, opt_tp, opt_to, _, _ = _lr_sequences(
        lambda o: getattr(tp_sched, name)(o, **kwargs),
        lambda o: getattr(torch.optim.lr_scheduler, name)(o, **kwargs),
        n_steps=n,
    )
    assert seq_tp == seq_to  # exact: the same float operations in the same order
    for g_tp, g_to in zip(opt_tp.param_groups, opt_to.param_groups):
        assert g_tp["initial_lr"] == g_to["initial_lr"]
        assert g_tp["momentum"] == g_to["momentum"]


@needs_torch
def test_one_cycle_cycles_adam_beta1():
    kwargs = {"max_lr": 0.3, "total_steps": 10}
    _, _, opt_tp, opt_to, _, _ = _lr_sequences(
        lambda o: tp_sched.OneCycleLR(o, **kwargs),
        lambda o: torch.optim.lr_scheduler.OneCycleLR(o, **kwargs),
        n_steps=6,
        opt="Adam",
    )
    assert opt_tp.param_groups[0]["betas"] == opt_to.param_groups[0]["betas"]


@needs_torch
def test_one_cycle_too_many_steps():
    opt_tp, _ = _make_pair(1)
    s = tp_sched.OneCycleLR(opt_tp, max_lr=0.1, total_steps=2)
    opt_tp.step()
    s.step()
    s.step()
    with pytest.raises(ValueError, match="Tried to step 3 times"):
        s.step()


@needs_torch
def test_lambda_lr_matches_torch():
    def f1(e):
        return 0.95**e

    def f2(e):
        return 1.0 / (1 + e)

    seq_tp, seq_to, *_ = _lr_sequences(
        lambda o: tp_sched.LambdaLR(o, [f1, f2]),
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, [f1, f2]),
    )
    assert seq_tp == seq_to
    seq_tp, seq_to, *_ = _lr_sequences(
        lambda o: tp_sched.MultiplicativeLR(o, f1),
        lambda o: torch.optim.lr_scheduler.MultiplicativeLR(o, f1),
    )
    assert seq_tp == seq_to


@needs_torch
def test_sequential_lr_matches_torch():
    def make(mod):
        def build(o):
            warm = mod.LinearLR(o, start_factor=0.1, total_iters=4)
            cos = mod.CosineAnnealingLR(o, T_max=10, eta_min=1e-4)
            step = mod.StepLR(o, step_size=2, gamma=0.5)
            return mod.SequentialLR(o, [warm, cos, step], milestones=[4, 12])

        return build

    seq_tp, seq_to, *_ = _lr_sequences(make(tp_sched), make(torch.optim.lr_scheduler), 20)
    assert seq_tp == seq_to


@needs_torch
def test_chained_scheduler_matches_torch():
    def make(mod):
        def build(o):
            return mod.ChainedScheduler(
                [mod.ExponentialLR(o, gamma=0.9), mod.StepLR(o, step_size=4, gamma=0.5)]
            )

        return build

    seq_tp, seq_to, *_ = _lr_sequences(make(tp_sched), make(torch.optim.lr_scheduler), 20)
    assert seq_tp == seq_to


@needs_torch
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("StepLR", {"step_size": 3, "gamma": 0.5}),
        ("MultiStepLR", {"milestones": [2, 5], "gamma": 0.3}),
        ("ExponentialLR", {"gamma": 0.9}),
        ("CosineAnnealingLR", {"T_max": 7}),
        ("LinearLR", {}),
    ],
)
def test_scheduler_closed_form_epoch_matches_torch(name, kwargs):
    opt_tp, opt_to = _make_pair()
    s_tp = getattr(tp_sched, name)(opt_tp, **kwargs)
    s_to = getattr(torch.optim.lr_scheduler, name)(opt_to, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in [3, 4, 9, 2]:
            s_tp.step(epoch)
            s_to.step(epoch)
            assert s_tp.get_last_lr() == s_to.get_last_lr()


@needs_torch
def test_scheduler_state_dict_round_trip():
    opt_a, _ = _make_pair()
    s_a = tp_sched.CosineAnnealingLR(opt_a, T_max=6)
    for _ in range(4):
        opt_a.step()
        s_a.step()
    sd = s_a.state_dict()
    assert "optimizer" not in sd and sd["last_epoch"] == 4
    opt_b, _ = _make_pair()
    s_b = tp_sched.CosineAnnealingLR(opt_b, T_max=6)
    s_b.load_state_dict(sd)
    opt_b.load_state_dict(opt_a.state_dict())
    for _ in range(5):
        opt_a.step()
        s_a.step()
        opt_b.step()
        s_b.step()
        assert s_a.get_last_lr() == s_b.get_last_lr()


@needs_torch
def test_scheduler_resume_needs_initial_lr():
    opt_tp, _ = _make_pair()
    with pytest.raises(KeyError, match="initial_lr"):
        tp_sched.StepLR(opt_tp, step_size=2, last_epoch=3)


@needs_torch
def test_scheduler_warns_when_stepped_before_optimizer():
    opt_tp, _ = _make_pair()
    s = tp_sched.StepLR(opt_tp, step_size=2)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        s.step()


def test_scheduler_requires_optimizer():
    with pytest.raises(TypeError, match="is not an Optimizer"):
        tp_sched.StepLR(object(), step_size=2)


# ---- gradient clipping ----------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    arrays = _init_arrays()
    grads = _grad_arrays(1)[0]
    tps, tos = _tp_params(arrays), _torch_params(arrays)
    _set_grads(tps, grads, tp)
    _set_grads(tos, grads, torch)
    tps.append(tp.tensor([1.0], requires_grad=True))  # no grad: ignored
    total_tp = clip_grad_norm_(tps, max_norm, norm_type=norm_type)
    total_to = torch.nn.utils.clip_grad_norm_(tos, max_norm, norm_type=norm_type)
    assert isinstance(total_tp, tp.Tensor) and total_tp.shape == ()
    np.testing.assert_allclose(float(total_tp), float(total_to), rtol=RTOL)
    for a, b in zip(tps, tos):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=ATOL)
    assert tps[-1].grad is None


def test_clip_grad_norm_single_tensor_and_nonfinite():
    p = tp.tensor([3.0, 4.0], requires_grad=True)
    p.grad = tp.tensor([3.0, 4.0])
    total = clip_grad_norm_(p, 1.0)
    assert float(total) == pytest.approx(5.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)
    p.grad = tp.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert float(get_total_norm([])) == 0.0


@needs_torch
def test_clip_grad_value_matches_torch():
    arrays = _init_arrays()
    grads = [g * 3 for g in _grad_arrays(1)[0]]
    tps, tos = _tp_params(arrays), _torch_params(arrays)
    _set_grads(tps, grads, tp)
    _set_grads(tos, grads, torch)
    assert clip_grad_value_(tps, 1.5) is None
    torch.nn.utils.clip_grad_value_(tos, 1.5)
    for a, b in zip(tps, tos):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
