"""The ``linear`` row (``torch.nn.functional.linear``) against torch: values and gradients
(input, weight, bias) for every weight and bias form, second-order and forward-mode
derivatives, dtypes, and shape errors that name both shapes.

The op-table tests (``test_optable.py``, ``test_autograd_ops.py``) check the row against
numpy and finite differences; here torch is the oracle. Each test that needs torch skips by
itself when it is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd import forward_ad as fwAD
from tensorplay.utils._python_dispatch import TensorPlayDispatchMode


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is the oracle of these tests")


def _np(t):
    return np.asarray(t.detach().cpu()) if isinstance(t, tp.Tensor) else t.detach().numpy()


def _arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [None if s is None else rng.standard_normal(s) for s in shapes]


def _run(lib, arrays, device="cpu", layout=lambda t: t):
    """linear(*leaves) in ``lib`` (``layout`` applied to the input), backpropagated against a
    fixed random cotangent: (output, gradients)."""
    if lib is tp:
        leaves = [
            None if a is None else tp.tensor(a, device=device, requires_grad=True) for a in arrays
        ]
        fn = tp.linear
    else:
        leaves = [None if a is None else lib.tensor(a, requires_grad=True) for a in arrays]
        fn = lib.nn.functional.linear
    out = fn(layout(leaves[0]), *leaves[1:])
    cot = np.random.default_rng(1).standard_normal(tuple(out.shape))
    cot_t = tp.tensor(cot, device=device) if lib is tp else lib.tensor(cot)
    (out * cot_t).sum().backward()
    return out, [None if t is None else t.grad for t in leaves]


def _compare(torch, shapes, device="cpu", layout=lambda t: t):
    arrays = _arrays(shapes)
    out_a, grads_a = _run(tp, arrays, device, layout)
    out_b, grads_b = _run(torch, arrays, layout=layout)
    assert tuple(out_a.shape) == tuple(out_b.shape)
    np.testing.assert_allclose(_np(out_a), _np(out_b), rtol=1e-10, atol=1e-10)
    for i, (ga, gb) in enumerate(zip(grads_a, grads_b)):
        if gb is None:
            assert ga is None, f"input {i}: tensorplay has a gradient, torch none"
            continue
        assert tuple(ga.shape) == tuple(gb.shape), f"input {i}"
        np.testing.assert_allclose(_np(ga), _np(gb), rtol=1e-10, atol=1e-10, err_msg=f"input {i}")


# ---- values and gradients -----------------------------------------------------------------

CASES = {
    "matrix": [(4, 3), (5, 3), (5,)],
    "no_bias": [(4, 3), (5, 3), None],
    "batch_1": [(1, 128), (16, 128), (16,)],
    "vector_input": [(3,), (5, 3), (5,)],
    "batched_3d": [(2, 4, 3), (5, 3), (5,)],
    "batched_4d": [(2, 2, 4, 3), (5, 3), (5,)],
    "vector_weight": [(2, 4, 3), (3,), None],
    "vector_weight_0d_bias": [(2, 4, 3), (3,), ()],
    "vector_input_and_weight": [(3,), (3,), ()],
    "bias_0d": [(4, 3), (5, 3), ()],
    "bias_broadcast": [(2, 4, 3), (5, 3), (2, 1, 5)],
    "empty_batch": [(0, 3), (5, 3), (5,)],
    "empty_in_features": [(4, 0), (5, 0), (5,)],
    "empty_out_features": [(4, 3), (0, 3), (0,)],
}


@pytest.mark.parametrize("shapes", CASES.values(), ids=CASES.keys())
def test_values_and_grads_match_torch(torch, device, shapes):
    _compare(torch, shapes, device)


def test_noncontiguous_input_matches_torch(torch, device):
    _compare(torch, [(4, 2, 3), (5, 3), (5,)], device, layout=lambda t: t.transpose(0, 1))


def test_is_one_op_and_one_node():
    x = tp.randn(2, 3, requires_grad=True)
    w = tp.randn(4, 3, requires_grad=True)
    b = tp.randn(4, requires_grad=True)

    class Log(TensorPlayDispatchMode):
        def __init__(self):
            self.ops = []

        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func.name)
            return func(*args, **(kwargs or {}))

    with Log() as log:
        y = tp.linear(x, w, b)
    assert log.ops == ["linear"]
    assert y.grad_fn.name() == "LinearBackward0"
    assert [type(n).__name__ for n, _ in y.grad_fn.next_functions] == ["AccumulateGrad"] * 3


def test_second_order_gradients_match_torch(torch):
    """Gradients of the gradients (create_graph=True): the derivatives are built from rows."""
    arrays = _arrays([(2, 4, 3), (5, 3), (5,)])
    results = []
    for lib in (tp, torch):
        x, w, b = (lib.tensor(a, requires_grad=True) for a in arrays)
        fn = tp.linear if lib is tp else torch.nn.functional.linear
        y = fn(x, w, b)
        gx, gw, gb = lib.autograd.grad(y.pow(2).sum(), [x, w, b], create_graph=True)
        (gx.pow(3).sum() + (gw * gw).sum() + gb.pow(2).sum()).backward()
        results.append([_np(t) for t in (gx, gw, gb, x.grad, w.grad, b.grad)])
    for a, b_ in zip(*results):
        np.testing.assert_allclose(a, b_, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shapes", [[(2, 4, 3), (5, 3), (5,)], [(2, 4, 3), (3,), ()]])
def test_forward_mode_matches_torch(torch, shapes):
    arrays = _arrays(shapes)
    tangents = _arrays(shapes, seed=7)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(tp.tensor(a), tp.tensor(t)) for a, t in zip(arrays, tangents)]
        got = fwAD.unpack_dual(tp.linear(*duals)).tangent
    tfw = torch.autograd.forward_ad
    with tfw.dual_level():
        duals = [tfw.make_dual(torch.tensor(a), torch.tensor(t)) for a, t in zip(arrays, tangents)]
        want = tfw.unpack_dual(torch.nn.functional.linear(*duals)).tangent
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-10, atol=1e-10)


def test_complex_values_and_grads_match_torch(torch):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in [(4, 3), (5, 3), (5,)]]
    _, grads_a = _run(tp, arrays)
    out_a = tp.linear(*(tp.tensor(a) for a in arrays))
    out_b = torch.nn.functional.linear(*(torch.tensor(a) for a in arrays))
    np.testing.assert_allclose(_np(out_a), out_b.numpy(), rtol=1e-12, atol=1e-12)
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = torch.nn.functional.linear(*leaves)
    cot = np.random.default_rng(1).standard_normal(tuple(out.shape))
    (out * torch.tensor(cot)).sum().abs().backward()
    leaves_tp = [tp.tensor(a, requires_grad=True) for a in arrays]
    (tp.linear(*leaves_tp) * tp.tensor(cot)).sum().abs().backward()
    for ga, gb in zip(leaves_tp, leaves):
        np.testing.assert_allclose(_np(ga.grad), gb.grad.numpy(), rtol=1e-10, atol=1e-10)


# ---- dtypes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["int64", "int32"])
def test_integer_dtypes_match_torch(torch, name):
    x = np.arange(12).reshape(4, 3) % 7 - 3
    w = np.arange(15).reshape(5, 3) % 5 - 2
    b = np.arange(5) - 2
    got = tp.linear(*(tp.tensor(a, dtype=getattr(tp, name)) for a in (x, w, b)))
    want = torch.nn.functional.linear(
        *(torch.tensor(a, dtype=getattr(torch, name)) for a in (x, w, b))
    )
    assert got.dtype is getattr(tp, name)
    np.testing.assert_array_equal(_np(got), want.numpy())


def test_bool_is_refused():
    with pytest.raises(NotImplementedError, match="linear.*bool"):
        tp.linear(tp.ones(2, 3, dtype=tp.bool), tp.ones(4, 3, dtype=tp.bool))


@pytest.mark.parametrize("dt", [tp.float16, tp.bfloat16])
def test_half_precision_keeps_its_dtype(dt):
    x, w, b = tp.randn(2, 3), tp.randn(4, 3), tp.randn(4)
    got = tp.linear(x.to(dt), w.to(dt), b.to(dt))
    want = tp.linear(x.to(dt).float(), w.to(dt).float(), b.to(dt).float())
    assert got.dtype is dt
    np.testing.assert_allclose(_np(got.float()), _np(want), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_mixed_dtypes_are_refused_as_in_torch(which):
    args = [tp.randn(2, 3), tp.randn(4, 3), tp.randn(4)]
    i = 1 if which == "weight" else 2
    args[i] = args[i].double()
    with pytest.raises(RuntimeError, match=r"linear\(\): .*same dtype.*float32 and float64"):
        tp.linear(*args)


def test_autocast_runs_it_in_lower_precision():
    x, w, b = tp.randn(2, 3), tp.randn(4, 3), tp.randn(4)
    with tp.autocast("cpu"):
        y = tp.linear(x, w, b)
    assert y.dtype is tp.bfloat16


# ---- errors -------------------------------------------------------------------------------------


def test_in_features_mismatch_names_both_shapes():
    with pytest.raises(
        RuntimeError,
        match=r"linear\(\): input shape \(2, 4, 2\) and weight shape \(5, 3\) cannot be "
        r"multiplied: input's last dimension \(2\) must equal weight's in_features \(3\)",
    ):
        tp.linear(tp.zeros(2, 4, 2), tp.zeros(5, 3))


def test_shape_errors_on_meta_tensors_too():
    with pytest.raises(RuntimeError, match=r"input shape \(4, 6\) and weight shape \(3, 5\)"):
        tp.linear(tp.zeros(4, 6, device="meta"), tp.zeros(3, 5, device="meta"))


def test_zero_dim_arguments_are_refused():
    with pytest.raises(RuntimeError, match="at least 1D, but they are 0D and 2D"):
        tp.linear(tp.tensor(1.0), tp.zeros(5, 3))
    with pytest.raises(RuntimeError, match="at least 1D, but they are 2D and 0D"):
        tp.linear(tp.zeros(2, 3), tp.tensor(1.0))


def test_three_dim_weight_is_refused():
    with pytest.raises(RuntimeError, match=r"weight must be 1-D .* or 2-D .*got shape \(1, 5, 3\)"):
        tp.linear(tp.zeros(2, 3), tp.zeros(1, 5, 3))


@pytest.mark.parametrize("bias_shape", [(3,), (2, 5), (1, 4, 5)])
def test_bias_that_does_not_broadcast_names_the_shapes(bias_shape):
    with pytest.raises(
        RuntimeError,
        match=rf"bias shape \({bias_shape[0]},.*does not broadcast to the output shape \(4, 5\)",
    ):
        tp.linear(tp.zeros(4, 3), tp.zeros(5, 3), tp.zeros(bias_shape))


def test_arguments_that_are_not_tensors_are_refused():
    with pytest.raises(TypeError, match="argument 'bias' must be a Tensor or None, not float"):
        tp.linear(tp.zeros(2, 3), tp.zeros(4, 3), 1.0)
    with pytest.raises(TypeError, match="argument 'weight' must be a Tensor, not float"):
        tp.linear(tp.zeros(2, 3), 2.0)
