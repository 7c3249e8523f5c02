"""Edge cases where TensorPlay returned other numbers than torch 2.13, or raised where torch
works (issue 13): each computes the same call in torch and asserts the same values."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

NAN, INF = math.nan, math.inf


def _values(t) -> list:
    return t.tolist()


def _same(got, want) -> None:
    """Same dtype name, shape and values (NaN-aware; -0.0 == 0.0)."""
    assert str(got.dtype).rsplit(".", 1)[-1] == str(want.dtype).rsplit(".", 1)[-1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(np.asarray(_values(got)), np.asarray(want.tolist()))


def _grad(lib, fn, x, g):
    t = lib.tensor(x, dtype=lib.float64, requires_grad=True)
    out = fn(t)
    out.backward(lib.full(tuple(out.shape), g, dtype=lib.float64))
    return t.grad


# ---- 1. sign(nan) is 0, and the gradients that go through it ----


def test_sign_of_nan_is_zero():
    x = [NAN, 1.5, -2.0, 0.0, -0.0]
    for dt in ("float16", "bfloat16", "float32", "float64"):
        _same(
            tp.tensor(x, dtype=getattr(tp, dt)).sign(),
            torch.tensor(x, dtype=getattr(torch, dt)).sign(),
        )


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.abs().sum(),
        lambda t: t.norm(p=1),
        lambda t: t.norm(p=math.inf),
        lambda t: t.norm(p=-math.inf),
    ],
    ids=["abs", "norm1", "norm_inf", "norm_neg_inf"],
)
def test_gradients_through_sign_at_nan(fn):
    x = [NAN, 1.0, -2.0, 0.0]
    _same(_grad(tp, fn, x, 1.5), _grad(torch, fn, x, 1.5))


# ---- 2. arange with float bounds and an integer dtype ----


@pytest.mark.parametrize("dt", ["int64", "int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize(
    "args",
    [
        (-2, 1.25),
        (-2.5, 1.25),
        (0, 3.5, 1.5),
        (5.5, 0, -1),
        (3, -2.5, -1.5),
        (0, 5, 2.7),
        (0.9, 5, 2),
    ],
)
def test_arange_float_bounds_into_an_integer_dtype(dt, args):
    _same(tp.arange(*args, dtype=getattr(tp, dt)), torch.arange(*args, dtype=getattr(torch, dt)))


def test_arange_int64_truncates_the_bounds_before_sizing():
    assert tp.arange(-2, 1.25, dtype=tp.int64).tolist() == [-2, -1, 0]
    assert tp.arange(-2, 1.25, dtype=tp.int32).tolist() == [-2, -1, 0, 1]


def test_arange_integer_step_truncated_to_zero_is_refused():
    # torch: int64 raises, int32 repeats start ([1, 1, 1, 1]); TensorPlay raises for both
    with pytest.raises(RuntimeError, match="step 0.3 is 0 once converted"):
        tp.arange(1, 2, 0.3, dtype=tp.int32)


# ---- 3. linspace ----


@pytest.mark.parametrize(
    "dt",
    ["int64", "int32", "int8", "uint8", "float16", "bfloat16", "float32", "float64", "complex64"],
)
@pytest.mark.parametrize(
    "args",
    [
        (1, 2.5, 6),
        (-2.7, 3.9, 7),
        (5, -3, 4),
        (-3, 3, 9),
        (-36.761, 28.085, 15),  # integer steps: torch's fma, not a * b + c
        (83.199, -81.346, 27),
        (0.0005331293938399817, 955147215205095.8, 28),  # float32: one rounding
        (0, 255, 300),
        (2.9, 0, 1),
    ],
)
def test_linspace_matches_torch_exactly(dt, args):
    try:
        want = torch.linspace(*args, dtype=getattr(torch, dt))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            tp.linspace(*args, dtype=getattr(tp, dt))
        return
    _same(tp.linspace(*args, dtype=getattr(tp, dt)), want)


def test_linspace_into_an_integer_dtype_truncates():
    assert tp.linspace(1, 2.5, 6, dtype=tp.int64).tolist() == [1, 1, 1, 1, 1, 2]


def test_linspace_bool_raises_for_two_steps_or_more():
    with pytest.raises(NotImplementedError, match="bool"):
        tp.linspace(0, 1, 2, dtype=tp.bool)
    _same(tp.linspace(0, 1, 1, dtype=tp.bool), torch.linspace(0, 1, 1, dtype=torch.bool))


def test_linspace_complex_bounds():
    _same(tp.linspace(1 + 1j, 2, 3), torch.linspace(1 + 1j, 2, 3))
    with pytest.raises(RuntimeError, match="complex"):
        tp.linspace(1 + 1j, 2, 3, dtype=tp.float32)


# ---- 4. float16/bfloat16 numbers that round to the largest finite value ----


@pytest.mark.parametrize("dt, value", [("float16", 65519.0), ("bfloat16", 3.3929209206407866e38)])
def test_one_element_fill_rounds_to_the_largest_finite_value(dt, value):
    tdt, pdt = getattr(torch, dt), getattr(tp, dt)
    _same(tp.full((1,), value, dtype=pdt), torch.full((1,), value, dtype=tdt))
    _same(tp.zeros(1, dtype=pdt).fill_(value), torch.zeros(1, dtype=tdt).fill_(value))
    _same(
        tp.where(tp.tensor([True, False]), tp.zeros(2, dtype=pdt), value),
        torch.where(torch.tensor([True, False]), torch.zeros(2, dtype=tdt), value),
    )
    y, w = tp.zeros(3, dtype=pdt), torch.zeros(3, dtype=tdt)
    y[:] = value
    w[:] = value
    _same(y, w)


@pytest.mark.parametrize(
    "make",
    [
        lambda L, d: L.full((3,), 65519.0, dtype=d),
        lambda L, d: L.zeros(3, dtype=d).fill_(65519.0),
        lambda L, d: L.zeros(3, dtype=d).clamp(max=65519.0),
        lambda L, d: L.zeros(2, dtype=d).masked_fill(L.tensor([True, False]), 65519.0),
    ],
)
def test_many_element_fills_check_the_value_strictly(make):
    with pytest.raises(RuntimeError):
        make(torch, torch.float16)
    with pytest.raises(RuntimeError, match="float16"):
        make(tp, tp.float16)


def test_a_value_that_rounds_to_inf_is_refused():
    # torch's one-element path gives inf silently (docs/differences.md)
    assert torch.full((1,), 65520.0, dtype=torch.float16).item() == INF
    with pytest.raises(RuntimeError, match="float16"):
        tp.full((1,), 65520.0, dtype=tp.float16)


# ---- 5. cat skips legacy 1-d empty tensors ----


@pytest.mark.parametrize(
    "shapes, dim",
    [
        ([(0,)] * 3, 1),
        ([(0,)] * 3, 5),
        ([(0,), (2, 3), (0,)], 1),
        ([(2, 3), (0,)], -1),
        ([(0,), (3,)], 0),
    ],
)
def test_cat_skips_1d_empty_tensors(shapes, dim):
    got = tp.cat([tp.ones(*s, dtype=tp.float16) for s in shapes], dim=dim)
    _same(got, torch.cat([torch.ones(*s, dtype=torch.float16) for s in shapes], dim=dim))


def test_cat_of_only_empty_tensors_backpropagates_empty_gradients():
    z = tp.zeros(0, requires_grad=True)
    tp.cat([z, z], 1).sum().backward()
    assert tuple(z.grad.shape) == (0,)


# ---- 6. clamp of a bool tensor ----


def test_bool_clamp_by_one_bool_tensor_bound():
    for kw in ("min", "max"):
        got = tp.tensor([True, False]).clamp(**{kw: tp.tensor([False, True])})
        _same(got, torch.tensor([True, False]).clamp(**{kw: torch.tensor([False, True])}))


def test_bool_clamp_by_both_bool_tensor_bounds_raises():
    a, b = torch.tensor([True, False]), torch.tensor([False, True])
    with pytest.raises(NotImplementedError):
        a.clamp(b, b)
    with pytest.raises(NotImplementedError, match="one bound at a time"):
        tp.tensor([True, False]).clamp(tp.tensor([False, True]), tp.tensor([False, True]))


# ---- 7. Python ints that wrap where torch wraps ----


@pytest.mark.parametrize("alpha", [-1, -2, 255])
@pytest.mark.parametrize("op", ["add", "sub"])
def test_uint8_alpha_wraps(op, alpha):
    got = getattr(tp.tensor([6, 1], dtype=tp.uint8), op)(5, alpha=alpha)
    _same(got, getattr(torch.tensor([6, 1], dtype=torch.uint8), op)(5, alpha=alpha))


@pytest.mark.parametrize("dt, alpha", [("uint8", 256), ("int8", 200), ("float16", 65519)])
def test_alpha_beyond_the_dtype_raises(dt, alpha):
    with pytest.raises(RuntimeError):
        torch.ones(2, dtype=getattr(torch, dt)).add(
            torch.ones(2, dtype=getattr(torch, dt)), alpha=alpha
        )
    with pytest.raises(RuntimeError, match="cannot be converted"):
        tp.ones(2, dtype=getattr(tp, dt)).add(tp.ones(2, dtype=getattr(tp, dt)), alpha=alpha)


def test_bool_alpha_is_nonzero():
    a, b = [True, False], [True, True]
    got = tp.tensor(a).add(tp.tensor(b), alpha=-1)
    _same(got, torch.tensor(a).add(torch.tensor(b), alpha=-1))


@pytest.mark.parametrize(
    "index",
    [(True, Ellipsis, True), 0, slice(None), [0], "mask"],
    ids=["bools", "int", "slice", "list", "mask"],
)
@pytest.mark.parametrize("value", [-2, -255, 2.5])
def test_setitem_number_converts_as_torch(index, value):
    y, w = tp.tensor([1, 2], dtype=tp.uint8), torch.tensor([1, 2], dtype=torch.uint8)
    i_tp = tp.tensor([True, False]) if index == "mask" else index
    i_t = torch.tensor([True, False]) if index == "mask" else index
    y[i_tp] = value
    w[i_t] = value
    _same(y, w)


def test_setitem_out_of_range_number_raises():
    with pytest.raises(RuntimeError):
        torch.zeros(2, dtype=torch.uint8)[torch.tensor([True, False])] = 256
    with pytest.raises(RuntimeError, match="uint8"):
        tp.zeros(2, dtype=tp.uint8)[tp.tensor([True, False])] = 256
    with pytest.raises(RuntimeError, match="float32"):
        tp.zeros(2)[tp.tensor([0])] = 1e39


# ---- 8. in-place ops whose result cannot go back ----


def test_abs_inplace_of_complex_raises():
    with pytest.raises(RuntimeError):
        torch.tensor([1 + 1j]).abs_()
    x = tp.tensor([1 + 1j])
    with pytest.raises(RuntimeError, match="abs_.*complex64"):
        x.abs_()
    assert x.tolist() == [1 + 1j]
    _same(tp.tensor([-1.5]).abs_(), torch.tensor([-1.5]).abs_())


# ---- 9. randint bounds per dtype ----


@pytest.mark.parametrize(
    "args, dt",
    [
        ((2, 3, (3,)), "bool"),
        ((-1, 1, (3,)), "bool"),
        ((0, 3, (3,)), "bool"),
        ((0, 2, (3,)), "complex64"),
        ((0, 70000, (3,)), "float16"),
        ((-65505, 0, (3,)), "float16"),
        ((0, 300, (3,)), "uint8"),
    ],
)
def test_randint_out_of_bounds_raises(args, dt):
    with pytest.raises(RuntimeError):
        torch.randint(*args, dtype=getattr(torch, dt))
    with pytest.raises(RuntimeError):
        tp.randint(*args, dtype=getattr(tp, dt))


def test_randint_bool_in_range_and_float_bounds():
    assert tp.randint(0, 1, (3,), dtype=tp.bool).tolist() == [False] * 3
    assert set(tp.randint(0, 2, (50,), dtype=tp.bool).tolist()) <= {False, True}
    with pytest.raises(TypeError, match="must be int"):
        tp.randint(0.5, 2.7, (2,))


# ---- 10, 11. gradients of max()/min(), prod and cumprod ----


_GRAD_X = [
    [1.0, 3.0, 3.0, 2.0],
    [1.0, NAN, 3.0, NAN],
    [0.0, 2.0, 3.0, 4.0],
    [0.0, 2.0, 0.0, 4.0],
    [0.0, 0.0, 0.0, 1.0],
    [INF, 1.0, -INF, 2.0],
    [0.0, INF, 2.0, 3.0],
]


@pytest.mark.parametrize("g", [1.5, INF, NAN, -INF], ids=["g", "inf", "nan", "-inf"])
@pytest.mark.parametrize("x", _GRAD_X, ids=[str(x) for x in _GRAD_X])
@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.max(),
        lambda t: t.min(),
        lambda t: t.prod(),
        lambda t: t.reshape(2, 2).prod(1),
        lambda t: t.cumprod(0),
    ],
    ids=["max", "min", "prod", "prod_dim", "cumprod"],
)
def test_gradient_matches_torch(fn, x, g):
    _same(_grad(tp, fn, x, g), _grad(torch, fn, x, g))


@pytest.mark.parametrize("x", _GRAD_X[:5], ids=[str(x) for x in _GRAD_X[:5]])
@pytest.mark.parametrize(
    "fn",
    [lambda t: t.max(), lambda t: t.prod(), lambda t: t.cumprod(0).sum()],
    ids=["max", "prod", "cumprod"],
)
def test_second_order_gradient_matches_torch(fn, x):
    def second(lib):
        t = lib.tensor(x, dtype=lib.float64, requires_grad=True)
        (g,) = lib.autograd.grad(fn(t), t, create_graph=True)
        if not g.requires_grad:  # max(): a constant first derivative
            return g, None
        (g2,) = lib.autograd.grad(g.sum(), t, allow_unused=True)
        return g, g2

    (g_tp, g2_tp), (g_t, g2_t) = second(tp), second(torch)
    _same(g_tp, g_t)
    assert (g2_tp is None) == (g2_t is None)
    if g2_t is not None:
        _same(g2_tp, g2_t)


# ---- 12. an empty result reads no index ----


@pytest.mark.parametrize(
    "shape, index",
    [
        ((1, 2, 3, 1), (slice(0, 0), [2, 2, 3])),
        ((3, 0), ([5],)),
        ((0, 3), (slice(None), [7])),
        ((3, 2), ([5], slice(0, 0))),
    ],
)
def test_out_of_range_index_with_an_empty_result(shape, index):
    def build(lib):
        return tuple(lib.tensor(i) if isinstance(i, list) else i for i in index)

    _same(tp.zeros(*shape)[build(tp)], torch.zeros(*shape)[build(torch)])
    y = tp.zeros(*shape)
    y[build(tp)] = 1.0
    assert y.sum().item() == 0


def test_out_of_range_index_with_a_result_still_raises():
    with pytest.raises(IndexError, match="out of bounds"):
        tp.zeros(1, 2, 3, 1)[:, tp.tensor([2, 2, 3])]


# ---- found by the fuzz run ----


def test_round_of_integers_with_explicit_decimals_raises():
    x = [[-8], [-3]]
    _same(tp.tensor(x, dtype=tp.int32).round(), torch.tensor(x, dtype=torch.int32).round())
    with pytest.raises(NotImplementedError):
        torch.tensor(x, dtype=torch.int32).round(decimals=0)
    with pytest.raises(NotImplementedError, match="decimals=0"):
        tp.tensor(x, dtype=tp.int32).round(decimals=0)
    _same(tp.tensor([1.5, 2.5]).round(decimals=0), torch.tensor([1.5, 2.5]).round(decimals=0))


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_of_complex_input_with_a_real_dtype(op):
    c = [1 + 2j, 3 - 1j]
    got = getattr(tp, op)(tp.tensor(c), 0, dtype=tp.float32)
    want = getattr(torch, op)(torch.tensor(c), 0, dtype=torch.float32)
    np.testing.assert_allclose(got.tolist(), want.tolist(), rtol=1e-6)
    with pytest.raises(NotImplementedError):
        getattr(tp, op)(tp.tensor(c), 0)


@pytest.mark.parametrize("x", [[0.0, INF, 1.0], [-INF, -INF], [-INF, 0.0, 1.0], [NAN, 1.0]])
def test_log_softmax_with_an_infinite_maximum(x):
    _same(tp.log_softmax(tp.tensor(x), 0), torch.log_softmax(torch.tensor(x), 0))
