"""tp.autograd.functional (vjp jvp jacobian hessian vhp hvp) and jacrev/jacfwd, against
closed forms and against torch.autograd.functional / torch.func on the same values."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.autograd.functional as F

torch = pytest.importorskip("torch")
TF = torch.autograd.functional
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.func internals

RNG = np.random.default_rng(1234)
XN, YN, VN = RNG.standard_normal(3), RNG.standard_normal(3), RNG.standard_normal(3)


def _np(t):
    return t.detach().numpy() if isinstance(t, tp.Tensor) else t.detach().cpu().numpy()


def assert_same(ours, theirs):
    """Same nesting (tuple vs single tensor) and same values. (torch's forward-mode jacobian
    nests in lists where its reverse mode uses tuples; ours uses tuples for both.)"""
    if isinstance(theirs, list):
        theirs = tuple(theirs)
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same(a, b)
        return
    assert isinstance(ours, tp.Tensor), type(ours)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-10, atol=1e-12)


def pair(*arrays):
    return tuple(tp.tensor(a) for a in arrays), tuple(torch.tensor(a) for a in arrays)


# the same Python function works on both libraries (operators and methods only)
def f_vec(x):
    return (x * x).sin() * x.exp()


def f_two(x, y):
    return (x * y).sum() * x, y.exp()


def f_scalar(x):
    return (x * x * x).sum() + (x * 2).sin().sum()


def f_scalar2(x, y):
    return (x * y * y).sum() + (x * x).sum() * y.sum()


# ---- vjp / jvp ---------------------------------------------------------------------------------


def test_vjp_single():
    (x, v), (tx, tv) = pair(XN, VN)
    assert_same(F.vjp(f_vec, x, v), TF.vjp(f_vec, tx, tv))


def test_vjp_tuples():
    (x, y, v), (tx, ty, tv) = pair(XN, YN, VN)
    out, res = F.vjp(f_two, (x, y), (v, v))
    assert_same((out, res), TF.vjp(f_two, (tx, ty), (tv, tv)))
    assert isinstance(res, tuple) and len(res) == 2


def test_vjp_scalar_output_without_v_and_closed_form():
    (x,), _ = pair(XN)
    out, g = F.vjp(lambda t: (t * t).sum(), x)
    np.testing.assert_allclose(_np(g), 2 * XN)
    np.testing.assert_allclose(float(out), (XN * XN).sum())


def test_vjp_v_required_for_non_scalar_output():
    (x,), _ = pair(XN)
    with pytest.raises(RuntimeError, match="The vector v can only be None"):
        F.vjp(f_vec, x)


def test_vjp_v_shape_checked():
    (x,), _ = pair(XN)
    with pytest.raises(RuntimeError, match="v has invalid size"):
        F.vjp(f_vec, x, tp.ones(4, dtype=tp.float64))


def test_jvp_single_and_closed_form():
    (x, v), (tx, tv) = pair(XN, VN)
    assert_same(F.jvp(f_vec, x, v), TF.jvp(f_vec, tx, tv))
    _, jv = F.jvp(lambda t: t * t * t, x, v)
    np.testing.assert_allclose(_np(jv), 3 * XN**2 * VN)


def test_jvp_tuples():
    (x, y, v), (tx, ty, tv) = pair(XN, YN, VN)
    assert_same(F.jvp(f_two, (x, y), (v, v)), TF.jvp(f_two, (tx, ty), (tv, tv)))


def test_seed_name_jvp():
    (x, v), _ = pair(XN, VN)
    assert tp.autograd.jvp is F.jvp
    _, jv = tp.autograd.jvp(lambda t: t.exp(), x, v)
    np.testing.assert_allclose(_np(jv), np.exp(XN) * VN)


def test_results_are_detached_without_create_graph():
    x = tp.tensor(XN, requires_grad=True)
    out, g = F.vjp(lambda t: (t * t).sum(), x)
    assert not out.requires_grad and not g.requires_grad


def test_create_graph_keeps_results_differentiable():
    x = tp.tensor(XN, requires_grad=True)
    _, g = F.vjp(lambda t: (t * t * t).sum(), x, create_graph=True)
    assert g.requires_grad
    g.sum().backward()
    np.testing.assert_allclose(_np(x.grad), 6 * XN)


def test_strict_mode_independent_output():
    (x, y), _ = pair(XN, YN)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        F.vjp(lambda a, b: (a * a).sum(), (x, y), strict=True)
    _, (gx, gy) = F.vjp(lambda a, b: (a * a).sum(), (x, y))
    np.testing.assert_array_equal(_np(gy), np.zeros(3))
    with pytest.raises(RuntimeError, match="does not require gradients"):
        F.vjp(lambda a: tp.ones(3, dtype=tp.float64), x, tp.ones(3, dtype=tp.float64), strict=True)


def test_inputs_type_checked():
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        F.vjp(f_vec, [tp.tensor(XN)], tp.tensor(VN))


# ---- jacobian / hessian ------------------------------------------------------------------------


def test_jacobian_single_and_closed_form():
    (x,), (tx,) = pair(XN)
    J = F.jacobian(f_vec, x)
    assert_same(J, TF.jacobian(f_vec, tx))
    J2 = F.jacobian(lambda t: t * t, x)
    np.testing.assert_allclose(_np(J2), np.diag(2 * XN))


def test_jacobian_structure_matches_torch():
    (x, y), (tx, ty) = pair(XN, YN)
    assert_same(F.jacobian(f_two, (x, y)), TF.jacobian(f_two, (tx, ty)))  # tuple x tuple
    assert_same(
        F.jacobian(lambda a: (a * 2, a.sum()), x), TF.jacobian(lambda a: (a * 2, a.sum()), tx)
    )  # single input, tuple output
    assert_same(
        F.jacobian(lambda a, b: a * b, (x, y)), TF.jacobian(lambda a, b: a * b, (tx, ty))
    )  # tuple input, single output


def test_jacobian_matrix_input_shape():
    a = RNG.standard_normal((2, 3))
    (x,), (tx,) = pair(a)
    J = F.jacobian(lambda t: t.sum(dim=0) * t.sum(), x)
    assert tuple(J.shape) == (3, 2, 3)
    assert_same(J, TF.jacobian(lambda t: t.sum(dim=0) * t.sum(), tx))


def test_jacobian_forward_mode():
    (x, y), (tx, ty) = pair(XN, YN)
    ours = F.jacobian(f_two, (x, y), strategy="forward-mode", vectorize=True)
    theirs = TF.jacobian(f_two, (tx, ty), strategy="forward-mode", vectorize=True)
    assert_same(ours, theirs)
    with pytest.raises(NotImplementedError, match="vectorize=True"):
        F.jacobian(f_two, (x, y), strategy="forward-mode")


def test_jacobian_strict_independent_output():
    (x, y), _ = pair(XN, YN)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent"):
        F.jacobian(lambda a, b: a * 2, (x, y), strict=True)
    J = F.jacobian(lambda a, b: a * 2, (x, y))
    np.testing.assert_array_equal(_np(J[1]), np.zeros((3, 3)))


def test_hessian_single_and_closed_form():
    (x,), (tx,) = pair(XN)
    assert_same(F.hessian(f_scalar, x), TF.hessian(f_scalar, tx))
    H = F.hessian(lambda t: (t * t * t).sum(), x)
    np.testing.assert_allclose(_np(H), np.diag(6 * XN))


def test_hessian_tuple_inputs():
    (x, y), (tx, ty) = pair(XN, YN)
    assert_same(F.hessian(f_scalar2, (x, y)), TF.hessian(f_scalar2, (tx, ty)))


def test_hessian_requires_scalar_function():
    (x,), _ = pair(XN)
    with pytest.raises(RuntimeError, match="should contain a single element"):
        F.hessian(lambda t: t * t, x)


def test_vhp_hvp():
    (x, v), (tx, tv) = pair(XN, VN)
    assert_same(F.vhp(f_scalar, x, v), TF.vhp(f_scalar, tx, tv))
    assert_same(F.hvp(f_scalar, x, v), TF.hvp(f_scalar, tx, tv))
    (x, y), (tx, ty) = pair(XN, YN)
    vs, tvs = (tp.tensor(VN), tp.tensor(YN)), (torch.tensor(VN), torch.tensor(YN))
    assert_same(F.vhp(f_scalar2, (x, y), vs), TF.vhp(f_scalar2, (tx, ty), tvs))
    assert_same(F.hvp(f_scalar2, (x, y), vs), TF.hvp(f_scalar2, (tx, ty), tvs))


def test_hvp_closed_form():
    (x, v), _ = pair(XN, VN)
    _, hv = F.hvp(lambda t: (t * t * t).sum(), x, v)
    np.testing.assert_allclose(_np(hv), 6 * XN * VN)


# ---- jacrev / jacfwd ---------------------------------------------------------------------------


def test_jacrev_jacfwd_single():
    (x,), (tx,) = pair(XN)
    assert_same(tp.autograd.jacrev(f_vec)(x), torch.func.jacrev(f_vec)(tx))
    assert_same(tp.autograd.jacfwd(f_vec)(x), torch.func.jacfwd(f_vec)(tx))


def test_jacrev_jacfwd_argnums():
    (x, y), (tx, ty) = pair(XN, YN)
    for ours, theirs in ((F.jacrev, torch.func.jacrev), (F.jacfwd, torch.func.jacfwd)):
        assert_same(ours(f_two, argnums=1)(x, y), theirs(f_two, argnums=1)(tx, ty))
        assert_same(ours(f_two, argnums=(0, 1))(x, y), theirs(f_two, argnums=(0, 1))(tx, ty))
        g = lambda a, b: a * b.sum()  # noqa: E731
        assert_same(ours(g, argnums=(1,))(x, y), theirs(g, argnums=(1,))(tx, ty))


def test_jacrev_has_aux():
    (x,), _ = pair(XN)
    jac, aux = F.jacrev(lambda t: (t * t, "aux"), has_aux=True)(x)
    assert aux == "aux"
    np.testing.assert_allclose(_np(jac), np.diag(2 * XN))


def test_jacrev_nested_is_hessian():
    (x,), (tx,) = pair(XN)
    ours = F.jacrev(F.jacrev(f_scalar))(x)
    assert_same(ours, torch.func.hessian(f_scalar)(tx))


def test_exports():
    for name in ("jvp", "jacrev", "jacfwd", "functional"):
        assert name in tp.autograd.__all__
    assert tp.autograd.jacrev is F.jacrev and tp.autograd.jacfwd is F.jacfwd
