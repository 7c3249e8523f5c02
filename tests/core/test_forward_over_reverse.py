"""Forward over reverse by hand: a backward pass run inside a dual level differentiates the
formulas that read saved tensors (a saved output or input unpacks as a dual tensor, as
torch's SavedVariable does), compared with torch.autograd.forward_ad."""

import gc

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.autograd.forward_ad as fwAD

torch = pytest.importorskip("torch")
import torch.autograd.forward_ad as torch_fwAD  # noqa: E402

# each f is written once for both libraries (methods and operators only)
FUNCTIONS = {
    "tanh": lambda x: x.tanh(),
    "exp": lambda x: x.exp(),
    "sigmoid": lambda x: x.sigmoid(),
    "softmax": lambda x: x.softmax(-1) * x.detach(),
    "log_softmax": lambda x: x.log_softmax(-1) ** 2,
    "matmul": lambda x: (x @ x.T) ** 2,
    "mul": lambda x: x * x * x,
    "sqrt": lambda x: (x * x + 1).sqrt(),
    # the tanh output reaches the sum only through a view, whose node keeps no reference
    # to it: the output is gone when backward runs
    "tanh_through_a_view": lambda x: x.tanh().reshape(-1).exp(),
}


def _forward_over_reverse(lib, fw, f, p, t, create_graph):
    with fw.dual_level():
        x = fw.make_dual(lib.tensor(p).requires_grad_(), lib.tensor(t))
        y = f(x)
        gc.collect()
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=create_graph)
        primal, tangent = fw.unpack_dual(g)
        return primal.detach().numpy(), None if tangent is None else tangent.detach().numpy()


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_tangent_of_a_gradient_matches_torch(name):
    rng = np.random.RandomState(0)
    p, t = rng.randn(3, 4), rng.randn(3, 4)
    f = FUNCTIONS[name]
    g, gt = _forward_over_reverse(tp, fwAD, f, p, t, create_graph=True)
    expected_g, expected_gt = _forward_over_reverse(torch, torch_fwAD, f, p, t, True)
    np.testing.assert_allclose(g, expected_g, rtol=1e-10, atol=1e-12)
    assert gt is not None
    np.testing.assert_allclose(gt, expected_gt, rtol=1e-10, atol=1e-12)


def test_a_saved_output_unpacks_with_its_tangent_only_inside_the_dual_level():
    x = tp.randn(3, dtype=tp.float64, requires_grad=True)
    with fwAD.dual_level():
        y = fwAD.make_dual(x, tp.ones(3, dtype=tp.float64)).exp()
        (saved,) = [s for s in y.grad_fn._saved[1] if s is not None]
        inside = fwAD.unpack_dual(saved.unpack()).tangent
        np.testing.assert_allclose(inside.detach().numpy(), y.detach().numpy())
    assert "_fw_tangent" not in saved.unpack().__dict__


def test_saved_tensor_hooks_keep_the_tangent():
    rng = np.random.RandomState(1)
    p, t = rng.randn(4), rng.randn(4)
    with tp.autograd.graph.saved_tensors_hooks(lambda x: x.detach().clone(), lambda x: x):
        _, gt = _forward_over_reverse(tp, fwAD, lambda x: x.sin(), p, t, create_graph=True)
    _, expected = _forward_over_reverse(torch, torch_fwAD, lambda x: x.sin(), p, t, True)
    np.testing.assert_allclose(gt, expected, rtol=1e-12)


@pytest.mark.parametrize("name", ["tanh", "softmax", "log_softmax", "matmul"])
def test_func_jvp_of_grad_matches_torch(name):
    f = FUNCTIONS[name]
    rng = np.random.RandomState(2)
    p, t = rng.randn(3, 4), rng.randn(3, 4)
    got = tp.func.jvp(tp.func.grad(lambda x: f(x).sum()), (tp.tensor(p),), (tp.tensor(t),))[1]
    expected = torch.func.jvp(
        torch.func.grad(lambda x: f(x).sum()), (torch.tensor(p),), (torch.tensor(t),)
    )[1]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)
