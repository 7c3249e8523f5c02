"""``tp.func`` transforms (issue 19): grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian
and functional_call against torch.func on values; vmap over forward mode (batched tangents
and batched primals); compositions (forward over reverse, reverse over forward, reverse
over reverse); gradcheck's check_batched_grad catching a wrong vmap rule."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd import Function, GradcheckError, forward_ad as fwAD, gradcheck

pytestmark = pytest.mark.filterwarnings("ignore::tensorplay._vmap.PerformanceWarning")

F = tp.func


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _close(got, want, rtol=1e-10, atol=1e-12):
    """``got`` (TensorPlay) against ``want`` (torch or numpy), nested alike."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys()
        for k in want:
            _close(got[k], want[k], rtol, atol)
        return
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _close(g, w, rtol, atol)
        return
    w = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    assert tuple(got.shape) == w.shape, (tuple(got.shape), w.shape)
    np.testing.assert_allclose(got.detach().numpy(), w, rtol=rtol, atol=atol)


W = _rand(4, 3, seed=1)


def _scalar(m):
    """A scalar function of two arguments, written once for both frameworks."""
    w = m.tensor(W, dtype=m.float64)
    return lambda x, y: (m.tanh(w @ x) * 2).sum() + (y * x).sin().sum()


def _pair(m):
    """Two outputs (a tuple) of two arguments."""
    w = m.tensor(W, dtype=m.float64)
    return lambda x, y: (m.tanh(w @ x), (y * x).exp())


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _args(m):
    return m.tensor(_rand(3, seed=2), dtype=m.float64), m.tensor(
        _rand(2, 3, seed=3), dtype=m.float64
    )


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=str)
@pytest.mark.parametrize("name", ["grad", "jacrev", "jacfwd", "hessian"])
def test_transform_matches_torch_func(torch, name, argnums):
    f = _scalar if name in ("grad", "hessian") else _pair
    got = getattr(F, name)(f(tp), argnums=argnums)(*_args(tp))
    want = getattr(torch.func, name)(f(torch), argnums=argnums)(*_args(torch))
    _close(got, want)


def test_grad_and_value_vjp_jvp_match_torch_func(torch):
    _close(
        F.grad_and_value(_scalar(tp), argnums=(0, 1))(*_args(tp)),
        torch.func.grad_and_value(_scalar(torch), argnums=(0, 1))(*_args(torch)),
    )
    out, vjp_fn = F.vjp(_pair(tp), *_args(tp))
    tout, tvjp_fn = torch.func.vjp(_pair(torch), *_args(torch))
    cts = (_rand(4, seed=4), _rand(2, 3, seed=5))
    _close(out, tout)
    _close(vjp_fn(tuple(tp.tensor(c) for c in cts)), tvjp_fn(tuple(torch.tensor(c) for c in cts)))
    tangents = (_rand(3, seed=6), _rand(2, 3, seed=7))
    _close(
        F.jvp(_pair(tp), _args(tp), tuple(tp.tensor(t) for t in tangents)),
        torch.func.jvp(_pair(torch), _args(torch), tuple(torch.tensor(t) for t in tangents)),
    )


def test_has_aux_and_pytrees_match_torch_func(torch):
    for name in ("jacrev", "jacfwd"):
        got = getattr(F, name)(lambda v: (v.sin(), {"c": v.cos()}), has_aux=True)(_args(tp)[0])
        want = getattr(torch.func, name)(lambda v: (v.sin(), {"c": v.cos()}), has_aux=True)(
            _args(torch)[0]
        )
        _close(got, want)
    got = F.grad(lambda v: ((v**3).sum(), v * 2), has_aux=True)(_args(tp)[0])
    want = torch.func.grad(lambda v: ((v**3).sum(), v * 2), has_aux=True)(_args(torch)[0])
    _close(got, want)

    def loss(m):
        return lambda p, x: (m.tanh(x @ p["w"]) + p["b"]).pow(2).sum()

    params = {"w": _rand(3, 2, seed=8), "b": _rand(2, seed=9)}
    x = _rand(5, 3, seed=10)
    _close(
        F.grad(loss(tp))({k: tp.tensor(v) for k, v in params.items()}, tp.tensor(x)),
        torch.func.grad(loss(torch))(
            {k: torch.tensor(v) for k, v in params.items()}, torch.tensor(x)
        ),  # fmt: skip
    )
    # a tuple of outputs by a tuple of arguments: blocks [output][argument]
    _close(
        F.jacfwd(_pair(tp), argnums=(0, 1))(*_args(tp)),
        torch.func.jacfwd(_pair(torch), argnums=(0, 1))(*_args(torch)),
    )


def test_vmap_over_jvp_with_batched_tangents_and_primals(torch):
    x, y = _args(tp)
    ts = tp.tensor(_rand(5, 3, seed=11))
    xs = tp.tensor(_rand(5, 3, seed=12))

    def push(m, y):
        return lambda p, t: m.func.jvp(lambda v: _pair(m)(v, y), (p,), (t,))[1]

    tx, ty = _args(torch)
    t_ts, t_xs = torch.tensor(ts.numpy()), torch.tensor(xs.numpy())
    # only the tangent batched: the primal is computed once
    _close(
        tp.vmap(lambda t: push(tp, y)(x, t))(ts),
        torch.vmap(lambda t: push(torch, ty)(tx, t))(t_ts),
    )
    # primal and tangent batched together
    _close(tp.vmap(push(tp, y))(xs, ts), torch.vmap(push(torch, ty))(t_xs, t_ts))
    # forward mode outside vmap
    _close(
        F.jvp(tp.vmap(lambda v: _pair(tp)(v, y)), (xs,), (ts,)),
        torch.func.jvp(torch.vmap(lambda v: _pair(torch)(v, ty)), (t_xs,), (t_ts,)),
    )

    # the dual-tensor API itself, as in the issue
    def tangent_of(t):
        with fwAD.dual_level():
            return fwAD.unpack_dual(_pair(tp)(fwAD.make_dual(x, t), y)[0]).tangent

    _close(tp.vmap(tangent_of)(ts), tp.stack([tangent_of(t) for t in ts]))


def test_per_sample_jacobians_and_hessians_match_torch(torch):
    x, y = _args(tp)
    xs = tp.tensor(_rand(4, 3, seed=13))
    tx, ty = _args(torch)
    t_xs = torch.tensor(xs.numpy())
    _close(
        tp.vmap(F.jacfwd(lambda v: _pair(tp)(v, y)))(xs),
        torch.vmap(torch.func.jacfwd(lambda v: _pair(torch)(v, ty)))(t_xs),
    )
    _close(
        tp.vmap(F.hessian(lambda v: _scalar(tp)(v, y)))(xs),
        torch.vmap(torch.func.hessian(lambda v: _scalar(torch)(v, ty)))(t_xs),
    )


def test_every_composition_of_the_two_modes_gives_the_hessian(torch):
    x, y = _args(tp)
    tx, ty = _args(torch)
    want = torch.func.hessian(lambda v: _scalar(torch)(v, ty))(tx)
    f = lambda v: _scalar(tp)(v, y)  # noqa: E731
    _close(F.jacfwd(F.jacrev(f))(x), want)  # forward over reverse (hessian)
    _close(F.jacrev(F.jacfwd(f))(x), want)  # reverse over forward
    _close(F.jacrev(F.jacrev(f))(x), want)  # reverse over reverse
    # forward over reverse as a Hessian-vector product
    v = tp.tensor(_rand(3, seed=14))
    _close(F.jvp(F.grad(f), (x,), (v,))[1], want.numpy() @ v.numpy())
    with pytest.raises(NotImplementedError, match="forward mode inside forward mode"):
        F.jacfwd(F.jacfwd(f))(x)


def test_results_stay_differentiable_for_the_caller():
    x = tp.tensor(_rand(3, seed=15), requires_grad=True)
    g = F.grad(lambda v: (v**3).sum())(x)  # 3 x^2, a function of x
    (gg,) = tp.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 6 * x.detach().numpy())
    plain = F.grad(lambda v: (v**3).sum())(x.detach())
    assert not plain.requires_grad


def test_functional_call_matches_torch(torch):
    nn = pytest.importorskip("tensorplay.nn")
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    tmodel = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)
    ).double()
    params = {k: tp.tensor(_rand(*v.shape, seed=i)) for i, (k, v) in
              enumerate(model.named_parameters())}  # fmt: skip
    tparams = {k: torch.tensor(v.numpy()) for k, v in params.items()}
    xs = _rand(6, 3, seed=20)
    ys = _rand(6, 2, seed=21)

    def loss(m, mod):
        def fn(p, x, y):
            return ((m.func.functional_call(mod, p, (x,)) - y) ** 2).sum()

        return fn

    got = tp.vmap(F.grad(loss(tp, model)), in_dims=(None, 0, 0))(
        params, tp.tensor(xs), tp.tensor(ys)
    )
    want = torch.vmap(torch.func.grad(loss(torch, tmodel)), in_dims=(None, 0, 0))(
        tparams, torch.tensor(xs), torch.tensor(ys)
    )
    _close(got, want)
    # the module's own parameters are back, and names it lacks are an error
    assert not np.allclose(model[0].weight.detach().numpy(), params["0.weight"].numpy())
    with pytest.raises(RuntimeError, match="are not parameters or buffers"):
        F.functional_call(model, {"nope": tp.zeros(1)}, (tp.zeros(3),))
    with pytest.raises(RuntimeError, match="strict=True"):
        F.functional_call(model, {"0.weight": params["0.weight"]}, (tp.zeros(3),), strict=True)


def test_argument_errors_are_clear():
    with pytest.raises(TypeError, match="func must be callable"):
        F.jacfwd(3)
    with pytest.raises(RuntimeError, match="scalar Tensor"):
        F.grad(lambda v: v * 2)(tp.ones(3))
    with pytest.raises(RuntimeError, match="independent of the inputs"):
        F.jvp(lambda v: tp.ones(2), (tp.ones(3),), (tp.ones(3),), strict=True)
    with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
        F.jvp(tp.sin, tp.ones(3), (tp.ones(3),))
    with pytest.raises(RuntimeError, match=r"\(output, aux\)"):
        F.jacrev(lambda v: v, has_aux=True)(tp.ones(3))
    with pytest.raises(RuntimeError, match="argnums"):
        F.grad(lambda a, b: (a * b).sum(), argnums=2)(tp.ones(3), tp.ones(3))


# ---- gradcheck(check_batched_grad=True) ----------------------------------------------------


class _DoubleGrad(Function):
    """Doubles its input; its vmap rule is wrong (it mixes the samples)."""

    @staticmethod
    def forward(ctx, g):
        return g * 2

    @staticmethod
    def vmap(info, in_dims, g):
        return g.sum(0) * 2, None


class _Double(Function):
    """x * 2, whose backward is right for each sample but goes through _DoubleGrad."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return _DoubleGrad.apply(g)

    @staticmethod
    def jvp(ctx, t):
        return _DoubleGrad.apply(t)


def test_check_batched_grad_catches_a_wrong_vmap_rule():
    x = tp.tensor(_rand(3, seed=30), requires_grad=True)
    assert gradcheck(_Double.apply, (x,))  # each grad_output alone is right
    with pytest.raises(GradcheckError, match="testing batched gradient"):
        gradcheck(_Double.apply, (x,), check_batched_grad=True)
    with pytest.raises(GradcheckError, match="check_batched_forward_grad=False"):
        gradcheck(
            _Double.apply,
            (x,),
            check_backward_ad=False,
            check_forward_ad=True,
            check_batched_forward_grad=True,
        )


def test_check_batched_grad_passes_on_correct_ops():
    a = tp.tensor(_rand(3, 2, seed=31), requires_grad=True)
    b = tp.tensor(_rand(2, seed=32), requires_grad=True)
    idx = tp.tensor([2, 0])

    def f(a, b):
        return tp.cat([(a.sin() * b).sum(0), a[idx, 1].tanh(), a.gather(0, idx[None, :])[0]])

    assert gradcheck(f, (a, b), check_batched_grad=True)
    assert gradcheck(
        f, (a, b), check_forward_ad=True, check_batched_forward_grad=True, check_batched_grad=True
    )
    assert tp.autograd.gradgradcheck(
        lambda a: (a.tanh() ** 2).sum(0), (a,), check_batched_grad=True
    )


@pytest.mark.parametrize(
    "f",
    [lambda x: x.tanh(), lambda x: x * x * x, lambda x: (x @ x.T) ** 2],
    ids=["tanh", "cube", "matmul"],
)
def test_a_gradient_without_create_graph_keeps_its_tangent_as_in_torch(torch, f):
    import torch.autograd.forward_ad as torch_fwAD  # (torch is optional: the fixture skips)

    p, t = _rand(3, 4, seed=5), _rand(3, 4, seed=6)

    def forward_over_reverse(lib, fw):
        with fw.dual_level():
            x = fw.make_dual(lib.tensor(p).requires_grad_(), lib.tensor(t))
            (g,) = lib.autograd.grad(f(x).sum(), x)  # create_graph=False
            primal, tangent = fw.unpack_dual(g)
            return g.requires_grad, primal, tangent

    got_rg, got, got_t = forward_over_reverse(tp, fwAD)
    want_rg, want, want_t = forward_over_reverse(torch, torch_fwAD)
    assert got_rg is want_rg is False
    assert want_t is not None and got_t is not None
    _close(got, want)
    _close(got_t, want_t)
