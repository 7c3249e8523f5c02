"""Elementwise tpk ops against numpy: unary activations, broadcasting binaries, bias_act;
their gradients and opcheck (CPU through Triton's interpreter)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_helpers import TOL, rand, to_numpy

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels import ACTIVATIONS, BINARY, UNARY

pytestmark = pytest.mark.usefixtures("cpu_triton")

_erf = np.vectorize(math.erf)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


NUMPY_UNARY = {
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "exp": np.exp,
    "neg": np.negative,
    "abs": np.abs,
    "sqrt": lambda x: np.sqrt(np.abs(x)),
    "none": lambda x: x,
}
NUMPY_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


def _input(name, *shape, dtype=tp.float32, seed=0):
    x, xn = rand(*shape, dtype=dtype, seed=seed)
    if name == "sqrt":  # its domain
        x = x.abs()
    return x, xn


@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_numpy_float32_and_float64(name):
    op = getattr(tp.ops.tpk, name)
    for dtype in (tp.float32, tp.float64):
        x, xn = _input(name, 3, 70, dtype=dtype)
        y = op(x)
        assert y.dtype is dtype and tuple(y.shape) == (3, 70)
        np.testing.assert_allclose(to_numpy(y), NUMPY_UNARY[name](xn), **TOL[dtype])


@pytest.mark.parametrize("dtype", [tp.float16, tp.bfloat16])
def test_unary_half_types_compute_in_float32(dtype):
    x, xn = rand(257, dtype=dtype)
    y = tp.ops.tpk.gelu(x)
    assert y.dtype is dtype
    np.testing.assert_allclose(to_numpy(y), NUMPY_UNARY["gelu"](xn), **TOL[dtype])


@pytest.mark.parametrize("dtype, ulp", [(tp.float16, 2.0**-10), (tp.bfloat16, 2.0**-7)])
def test_half_gelu_is_within_one_ulp_of_the_exact_value(dtype, ulp):
    # half types use a cheaper erf (absolute error <= 1.5e-7, see _one_plus_erf): after
    # rounding to the half type the result must still be the exact one to within an ulp,
    # over the whole range, tails included
    xn = np.linspace(-12.0, 12.0, 4001)
    x = tp.tensor(xn, dtype=tp.float64).to(dtype)
    exact = NUMPY_UNARY["gelu"](to_numpy(x))
    got = to_numpy(tp.ops.tpk.gelu(x))
    assert np.all(np.abs(got - exact) <= ulp * np.abs(exact) + 1e-6)
    assert got[0] <= 0 and got[-1] == pytest.approx(12.0, rel=ulp)


def test_unary_keeps_precision_at_the_edges():
    x = tp.tensor([-80.0, -1e-6, 1e-8, 0.0, 30.0, float("nan")])  # -80: no denormals
    xn = x.numpy().astype(np.float64)
    np.testing.assert_allclose(
        tp.ops.tpk.sigmoid(x).numpy(), _sigmoid(xn), rtol=1e-6, atol=0, equal_nan=True
    )
    np.testing.assert_allclose(tp.ops.tpk.tanh(x).numpy(), np.tanh(xn), rtol=1e-6, equal_nan=True)
    relu = tp.ops.tpk.relu(x).numpy()
    np.testing.assert_array_equal(relu[:5], np.maximum(x.numpy()[:5], 0))
    assert np.isnan(relu[5])  # NaN propagates, as np.maximum(nan, 0)


def test_unary_reads_strided_input():
    x, xn = rand(6, 5)
    np.testing.assert_allclose(tp.ops.tpk.exp(x.t()).numpy(), np.exp(xn.T), rtol=1e-6)


@pytest.mark.parametrize(
    "shape_a, shape_b",
    [
        ((5, 7), (5, 7)),
        ((5, 7), (7,)),
        ((5, 1), (1, 7)),
        ((2, 3, 4), (3, 1)),
        ((2, 1, 3, 4), (5, 1, 1)),
        ((), (4,)),
    ],
)
@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcasts_like_numpy(name, shape_a, shape_b):
    a, an = rand(*shape_a, seed=1)
    b, bn = rand(*shape_b, seed=2)
    y = getattr(tp.ops.tpk, name)(a, b)
    expected = NUMPY_BINARY[name](an, bn)
    assert tuple(y.shape) == expected.shape
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_binary_reads_transposed_and_expanded_views_in_place():
    a, an = rand(6, 4)
    b, bn = rand(6, 1, seed=3)
    y = tp.ops.tpk.mul(a.t(), b.expand(6, 4).t())
    np.testing.assert_allclose(y.numpy(), an.T * np.broadcast_to(bn, (6, 4)).T, rtol=1e-6)


def test_binary_over_four_dims_and_python_scalars():
    a, an = rand(2, 3, 1, 2, 3)
    b, bn = rand(3, 4, 1, 1, seed=4)
    np.testing.assert_allclose(tp.ops.tpk.add(a, b).numpy(), an + bn, rtol=1e-6)
    np.testing.assert_allclose(tp.ops.tpk.mul(a, 2.5).numpy(), an * 2.5, rtol=1e-6)


def test_binary_nan_propagates_through_maximum_and_minimum():
    a = tp.tensor([float("nan"), 1.0, 2.0])
    b = tp.tensor([0.0, float("nan"), 1.0])
    for name in ("maximum", "minimum"):
        out = getattr(tp.ops.tpk, name)(a, b).numpy()
        assert np.isnan(out[0]) and np.isnan(out[1])
    assert tp.ops.tpk.maximum(a, b).numpy()[2] == 2.0


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_bias_act_is_act_of_x_plus_bias(activation):
    x, xn = rand(4, 33)
    bias, bn = rand(33, seed=5)
    y = tp.ops.tpk.bias_act(x, bias, activation)
    ref = NUMPY_UNARY[activation](xn + bn)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_gradients_match_numpy_derivatives():
    x, xn = rand(3, 4)
    x.requires_grad_(True)
    tp.ops.tpk.tanh(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(xn) ** 2, rtol=1e-5)
    a, an = rand(3, 4, seed=1)
    b, bn = rand(4, seed=2)
    a.requires_grad_(True)
    b.requires_grad_(True)
    tp.ops.tpk.mul(a, b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(bn, (3, 4)), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), an.sum(axis=0), rtol=1e-5)


def test_maximum_splits_the_gradient_on_ties():
    a = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = tp.tensor([1.0, 5.0, 0.0], requires_grad=True)
    tp.ops.tpk.maximum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 0.0, 1.0] and b.grad.tolist() == [0.5, 1.0, 0.0]


@pytest.mark.parametrize("name", ["relu", "gelu", "silu", "sigmoid", "sqrt"])
def test_unary_opcheck(name):
    x, _ = _input(name, 3, 4, seed=7)
    x = x + 0.1 if name == "sqrt" else x  # keep clear of sqrt's kink at 0 for gradcheck
    assert library.opcheck(getattr(tp.ops.tpk, name), (x,), test_utils="all") == {}


@pytest.mark.parametrize("name", ["add", "div", "maximum"])
def test_binary_opcheck_with_broadcasting(name):
    a, _ = rand(3, 4, seed=8)
    b, _ = rand(4, seed=9)
    assert library.opcheck(getattr(tp.ops.tpk, name), (a, b.abs() + 0.5), test_utils="all") == {}


def test_bias_act_opcheck():
    x, _ = rand(3, 5)
    bias, _ = rand(5, seed=1)
    assert library.opcheck(tp.ops.tpk.bias_act, (x, bias, "gelu"), test_utils="all") == {}


def test_fake_kernels_give_shapes_on_meta():
    a = tp.empty(2, 1, 5, device="meta")
    b = tp.empty(3, 1, device="meta")
    assert tuple(tp.ops.tpk.add(a, b).shape) == (2, 3, 5)
    assert tp.ops.tpk.gelu(a).device.type == "meta"
    assert tuple(tp.ops.tpk.bias_act(a, tp.empty(5, device="meta")).shape) == (2, 1, 5)


def test_bad_arguments_name_the_argument_and_the_fix():
    x = tp.ones(2, 3)
    with pytest.raises(TypeError, match=r"tpk::add: a is .*float32 but b is .*float64.*b.to"):
        tp.ops.tpk.add(x, x.double())
    with pytest.raises(TypeError, match=r"tpk::relu: x has dtype .*int64.*to\(tp.float32\)"):
        tp.ops.tpk.relu(tp.arange(3))
    with pytest.raises(ValueError, match=r"tpk::bias_act: bias must have shape \(3,\)"):
        tp.ops.tpk.bias_act(x, tp.ones(2))
    with pytest.raises(ValueError, match="activation must be one of"):
        tp.ops.tpk.bias_act(x, tp.ones(3), "swish")
    with pytest.raises(TypeError, match="tpk::mul: b must be a Tensor"):
        tp.ops.tpk.mul(x, "2")


def test_broadcast_kernels_index_in_int64_only_when_offsets_can_pass_int32():
    from tensorplay.kernels._common import triton_src

    k = triton_src()
    assert not k.wide_index((1, 1, 1024, 1024), [0, 0, 1024, 1], [0, 0, 0, 1])
    assert k.wide_index((1, 1, 1 << 16, 1 << 15), [0, 0, 1 << 15, 1], [0, 0, 0, 1])  # 2**31
    assert k.wide_index((1, 1, 2, 4), [0, 0, 1 << 31, 1], [0, 0, 0, 1])  # a far stride


@pytest.mark.parametrize(
    "shape_a, shape_b",
    [
        ((3, 300), (300,)),  # a per-column vector: the bias/scale pattern
        ((2, 4, 1, 300), (5, 300)),  # broadcasting on both sides
        ((3, 1), (3, 300)),  # the vector along the long dimension is the other way
        ((2, 3, 5, 260), (1, 3, 1, 260)),
    ],
)
def test_broadcasting_over_a_long_last_dimension(shape_a, shape_b):
    # a last dimension >= 256 runs the row kernel (_binary_rows), shorter ones _binary
    a, an = rand(*shape_a, seed=5)
    b, bn = rand(*shape_b, seed=6)
    for name in ("mul", "sub"):
        got = to_numpy(getattr(tp.ops.tpk, name)(a, b))
        np.testing.assert_allclose(got, NUMPY_BINARY[name](an, bn), **TOL[tp.float32])


def test_row_kernel_reads_strided_views_in_place():
    a, an = rand(300, 4, seed=7)
    b, bn = rand(4, 1, seed=8)
    got = tp.ops.tpk.add(a.t(), b)  # last-dimension stride 4 for a, 0 for b
    np.testing.assert_allclose(to_numpy(got), an.T + bn, **TOL[tp.float32])
