"""Property tests (hypothesis) of the pointwise rows of the op table against numpy, plus the
edge cases whose numpy equivalent needs care (floor semantics, rounding modes, gelu...)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import array_shapes, arrays, mutually_broadcastable_shapes
from optable_samples import DTYPES, REF, allowed, assert_close, to_ref

import tensorplay as tp
from tensorplay._optable import ROWS

UNARY = [
    r
    for r in ROWS
    if r.kind == "pointwise"
    and r.n_inputs == 1
    and r.name in REF
    and r.name not in ("cumsum", "cumprod", "softmax", "log_softmax")
]
BINARY = [
    r
    for r in ROWS
    if r.kind == "pointwise"
    and r.n_inputs == 2
    and r.name in REF
    and r.name not in ("matmul", "mm", "bmm", "dot", "outer")
]
# second operands that must stay away from zero / negative integers (errors, tested below)
_NONZERO = {"div", "floor_divide", "remainder"}


def _elements(dt, *, nonzero=False, exponent=False):
    if dt is tp.bool:
        return st.just(True) if nonzero else st.booleans()
    if dt.category == 1:
        info = np.iinfo(dt.np)
        lo, hi = max(info.min, -100), min(info.max, 100)
        if exponent:
            lo, hi = 0, 5
        s = st.integers(lo, hi)
        return s.filter(bool) if nonzero else s
    width = {tp.float16: 16, tp.bfloat16: 32, tp.float32: 32, tp.float64: 64}.get(dt, 32)
    lim = 3 if exponent else 30  # keeps pow's results finite: complex overflow is unspecified
    f = st.floats(-lim, lim, width=width, allow_subnormal=False)
    if nonzero:
        f = f.filter(lambda v: abs(v) > 1e-3)
    if dt.category == 3:
        return st.builds(complex, f, f)
    return f


def _np_dtype(dt):
    if dt is tp.bfloat16:
        return np.float32  # drawn in float32, rounded to bfloat16 by tp.tensor
    return dt.np


def _tensor(data, dt, shape, **kw):
    arr = data.draw(arrays(_np_dtype(dt), shape, elements=_elements(dt, **kw)))
    t = tp.tensor(arr, dtype=dt)
    if data.draw(st.booleans(), label="non-contiguous") and t.dim() >= 1:
        # the same values, laid out with a step: t2[..., ::2] == t
        wide = tp.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=dt)
        wide[..., ::2] = t
        t = wide[..., ::2]
        assert not t.is_contiguous() or t.shape[-1] <= 1
    return t


def _check(row, args, kwargs=None):
    kwargs = kwargs or {}
    try:
        got = row.fn(*args, **kwargs)
    except (TypeError, RuntimeError) as e:
        dts = [a.dtype for a in args if isinstance(a, tp.Tensor)]
        promoted = tp.result_type(*args) if len(args) == 2 else dts[0]
        assert (
            not allowed(row, promoted)
            or "not supported" in str(e)
            or "bool" in str(e).lower()
            or (row.promote == "same" and len(set(dts)) > 1)
        ), f"{row.name}{tuple(dts)} raised {e!r}"
        return
    # torch's logical ops take each operand's truth in its own dtype (float32 0 xor float64
    # 1e-282 is True), so their oracle sees the operands uncast
    if len(args) == 2 and not row.name.startswith("logical_"):
        # torch casts both operands to the promoted dtype before computing (uint8 >= int8 0-d -1
        # compares with 255): the oracle does the same, with numpy's wrapping casts
        p = tp.result_type(*args)
        out_dt = row.dtype(p, kwargs)[1]
        if p.category <= 1 and out_dt.category >= 2:
            p = out_dt  # integer inputs of float ops (atan2, div) are cast to the float dtype

        # a number (or 0-d tensor) a row takes at full precision next to a float16/bfloat16
        # tensor enters at float32, as in torch (its opmath); everything else at p
        def cast(i, x):
            opmath = (
                p in (tp.float16, tp.bfloat16)
                and i in row.scalar_opmath
                and not (isinstance(x, tp.Tensor) and x.dim())
            )
            dt = tp.float32 if opmath else p
            return tp.tensor(np.asarray(np.asarray(x).astype(dt.np)), dtype=dt)

        args = tuple(cast(i, x) for i, x in enumerate(args))
    with np.errstate(all="ignore"):
        want = REF[row.name](*to_ref(args), **kwargs)
    assert_close(got, want, msg=f"{row.name} {[getattr(a, 'dtype', a) for a in args]}")


@pytest.mark.parametrize("row", UNARY, ids=[r.name for r in UNARY])
@given(data=st.data())
def test_unary_property(row, data):
    dt = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = data.draw(array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4), label="shape")
    _check(row, (_tensor(data, dt, shape),))


@pytest.mark.parametrize("row", BINARY, ids=[r.name for r in BINARY])
@given(data=st.data())
def test_binary_property(row, data):
    da = data.draw(st.sampled_from(DTYPES), label="dtype a")
    db = data.draw(st.sampled_from(DTYPES), label="dtype b")
    shapes = data.draw(
        mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
        label="shapes",
    )
    sa, sb = shapes.input_shapes
    a = _tensor(data, da, sa)
    b = _tensor(data, db, sb, nonzero=row.name in _NONZERO, exponent=row.name == "pow")
    if data.draw(st.booleans(), label="scalar other") and db is not tp.bfloat16:
        b = data.draw(_elements(db, nonzero=row.name in _NONZERO, exponent=row.name == "pow"))
        b = {0: bool, 1: int, 2: float, 3: complex}[db.category](b)
    _check(row, (a, b))


# ---- edge cases written out explicitly -----------------------------------------------------


def test_floor_divide_and_remainder_use_python_floor_semantics():
    a = [-7, -7, 7, 7, -6, 0]
    b = [2, -2, 2, -2, 3, -5]
    want_q = [x // y for x, y in zip(a, b)]
    want_r = [x % y for x, y in zip(a, b)]
    assert tp.floor_divide(tp.tensor(a), tp.tensor(b)).tolist() == want_q
    assert tp.remainder(tp.tensor(a), tp.tensor(b)).tolist() == want_r
    af = [-7.5, 7.5, -0.5, 5.0, -1e-3]
    bf = [2.0, -2.0, 3.0, -2.5, 4.0]
    got_q = (tp.tensor(af, dtype=tp.float64) // tp.tensor(bf, dtype=tp.float64)).tolist()
    got_r = (tp.tensor(af, dtype=tp.float64) % tp.tensor(bf, dtype=tp.float64)).tolist()
    assert got_q == [x // y for x, y in zip(af, bf)]
    assert got_r == [x % y for x, y in zip(af, bf)]


def test_integer_division_by_zero_raises():
    for fn in (
        tp.floor_divide,
        tp.remainder,
        lambda a, b: tp.div(a, b, rounding_mode="trunc"),
        lambda a, b: tp.div(a, b, rounding_mode="floor"),
    ):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(tp.tensor([1, 2]), tp.tensor([1, 0]))
    # true division of integers is float division: inf/nan, no error
    r = tp.tensor([1, 0, -1]) / tp.tensor([0, 0, 0])
    assert r.dtype is tp.float32
    assert np.isinf(r.numpy()[0]) and np.isnan(r.numpy()[1]) and r.numpy()[2] == -np.inf
    # float floor division by zero: inf, like torch
    assert tp.floor_divide(tp.tensor([1.0]), tp.tensor([0.0])).item() == math.inf


def test_div_rounding_modes():
    a = tp.tensor([-7, 7, -7, 7, 5])
    b = tp.tensor([2, 2, -2, -2, 5])
    assert tp.div(a, b, rounding_mode="trunc").tolist() == [-3, 3, 3, -3, 1]
    assert tp.div(a, b, rounding_mode="floor").tolist() == [-4, 3, 3, -4, 1]
    assert tp.div(a, b, rounding_mode="trunc").dtype is tp.int64
    assert tp.div(a, b).tolist() == pytest.approx([-3.5, 3.5, 3.5, -3.5, 1.0])
    f = tp.tensor([-7.5, 7.5])
    assert tp.div(f, 2, rounding_mode="trunc").tolist() == [-3.0, 3.0]
    assert tp.div(f, 2, rounding_mode="floor").tolist() == [-4.0, 3.0]
    with pytest.raises(RuntimeError, match="rounding_mode"):
        tp.div(f, 2, rounding_mode="round")
    with pytest.raises(RuntimeError, match="complex"):
        tp.div(tp.tensor([1j]), 2, rounding_mode="floor")


def test_gelu_reference():
    xs = [-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]
    exact = [0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs]
    c = math.sqrt(2 / math.pi)
    approx = [0.5 * x * (1 + math.tanh(c * (x + 0.044715 * x**3))) for x in xs]
    x = tp.tensor(xs, dtype=tp.float64)
    np.testing.assert_allclose(tp.gelu(x).numpy(), exact, rtol=1e-12)
    np.testing.assert_allclose(tp.gelu(x, approximate="tanh").numpy(), approx, rtol=1e-12)
    with pytest.raises(RuntimeError, match="approximate"):
        tp.gelu(x, approximate="fast")
    with pytest.raises(NotImplementedError, match="not supported"):
        tp.gelu(tp.tensor([1, 2]))


def test_sigmoid_softplus_do_not_overflow():
    x = tp.tensor([-1000.0, -20.0, 0.0, 20.0, 1000.0], dtype=tp.float64)
    want = [1 / (1 + math.exp(-v)) if v > -700 else 0.0 for v in x.tolist()]
    np.testing.assert_allclose(tp.sigmoid(x).numpy(), want, rtol=1e-12, atol=1e-300)
    sp = [v if v > 20 else math.log1p(math.exp(v)) for v in x.tolist()]
    np.testing.assert_allclose(tp.softplus(x).numpy(), sp, rtol=1e-12)
    # beta/threshold: linear above threshold / beta
    np.testing.assert_allclose(
        tp.softplus(tp.tensor([0.4, 1.0], dtype=tp.float64), beta=2.0, threshold=1.0).numpy(),
        [math.log1p(math.exp(0.8)) / 2, 1.0],
        rtol=1e-12,
    )


def test_pow_integer_negative_exponent_tensor_truncates_like_torch():
    # torch: 1 ** -k is 1, (-1) ** -k is +-1, every other integer base truncates to 0
    base = tp.tensor([2, 3, 1, -1, -1, 0, 300, -2])
    exp = tp.tensor([1, -1, -5, -1, -2, -1, -2, -3])
    assert tp.pow(base, exp).tolist() == [2, 0, 1, -1, 1, 0, 0, 0]
    assert (300 ** tp.tensor([-1, 2])).tolist() == [0, 90000]
    assert (tp.tensor([2], dtype=tp.int8) ** tp.tensor(-1, dtype=tp.int8)).dtype is tp.int8
    assert tp.pow(tp.tensor([2.0]), tp.tensor([-1])).tolist() == [0.5]


def test_pow_integer_tensor_to_negative_python_int_raises():
    # a Python int exponent is checked before the call (torch), a tensor exponent is not
    for base in (tp.tensor([2, 3]), tp.tensor(2), tp.tensor([True])):
        with pytest.raises(RuntimeError, match="negative integer powers"):
            base**-1
    assert (tp.tensor([2.0]) ** -1).tolist() == [0.5]


def test_pow_integer_negative_exponent_matches_torch():
    torch = pytest.importorskip("torch")
    b, e = [300, 2, 1, -1, 0, -2, 7], [-1, -2, -3, -4, -1, -1, 0]
    want = torch.pow(torch.tensor(b), torch.tensor(e))
    got = tp.pow(tp.tensor(b), tp.tensor(e))
    assert got.tolist() == want.tolist()
    for dt in ("int8", "int32"):
        want = 300 ** torch.tensor(e, dtype=getattr(torch, dt))
        got = 300 ** tp.tensor(e, dtype=getattr(tp, dt))
        assert got.tolist() == want.tolist() and got.dtype.name == dt


def test_integer_ops_wrap_like_torch():
    a = tp.tensor([250, 3], dtype=tp.uint8)
    assert (a + tp.tensor([10, 1], dtype=tp.uint8)).tolist() == [4, 4]
    assert (tp.tensor([1], dtype=tp.uint8) - tp.tensor([2], dtype=tp.uint8)).tolist() == [255]
    assert (tp.tensor([100], dtype=tp.int8) * 2).tolist() == [-56]


def test_operators_and_reflected_scalars():
    x = tp.tensor([1.0, 2.0, 4.0])
    assert (2 - x).tolist() == [1.0, 0.0, -2.0]
    assert (8 / x).tolist() == [8.0, 4.0, 2.0]
    assert (2**x).tolist() == [2.0, 4.0, 16.0]
    assert (-x).tolist() == [-1.0, -2.0, -4.0]
    assert abs(tp.tensor([-1, 2])).tolist() == [1, 2]
    assert (~tp.tensor([True, False])).tolist() == [False, True]
    assert (tp.tensor([6]) & 3).tolist() == [2]
    assert (x == 2).tolist() == [False, True, False]
    assert (x @ x).item() == 21.0


def test_clamp_requires_a_bound_and_accepts_one():
    x = tp.tensor([-2.0, 0.5, 3.0])
    assert tp.clamp(x, min=0).tolist() == [0.0, 0.5, 3.0]
    assert tp.clamp(x, max=1).tolist() == [-2.0, 0.5, 1.0]
    assert x.clamp(-1, 1).tolist() == [-1.0, 0.5, 1.0]
    with pytest.raises(RuntimeError, match="At least one"):
        tp.clamp(x)


def test_round_half_to_even_and_decimals():
    x = tp.tensor([0.5, 1.5, 2.5, -0.5, 1.25, 2.35])
    assert tp.round(x).tolist() == [0.0, 2.0, 2.0, -0.0, 1.0, 2.0]
    np.testing.assert_allclose(
        tp.round(x, decimals=1).numpy(), [0.5, 1.5, 2.5, -0.5, 1.2, 2.4], rtol=1e-6
    )


def test_bool_arithmetic_that_torch_refuses():
    t = tp.tensor([True, False])
    with pytest.raises(NotImplementedError, match="not supported"):
        t - t
    with pytest.raises(RuntimeError, match="bool"):
        tp.tensor([1, 2]) - t
    with pytest.raises(RuntimeError, match="bool"):
        tp.tensor([1, 2]) - True
    with pytest.raises(NotImplementedError):
        _ = -t
    with pytest.raises(NotImplementedError):
        tp.abs(t)
    assert tp.square(t).tolist() == [1, 0] and tp.square(t).dtype is tp.int64
    assert tp.all(tp.tensor([1, 2], dtype=tp.uint8)).dtype is tp.uint8


def test_logical_ops_take_each_operands_truth_in_its_own_dtype():
    torch = pytest.importorskip("torch")
    tiny = 1.4082120998131057e-282  # 0 in float32, not in float64
    for name in ("logical_xor", "logical_and", "logical_or"):
        got = getattr(tp, name)(tp.tensor([0.0, 1.0]), tp.tensor([tiny, tiny], dtype=tp.float64))
        want = getattr(torch, name)(
            torch.tensor([0.0, 1.0]), torch.tensor([tiny, tiny], dtype=torch.float64)
        )
        assert got.tolist() == want.tolist(), name
        # torch refuses a Python number here; TensorPlay takes its truth, uncast
        assert getattr(tp, name)(tp.tensor([0.0, 1.0]), tiny).tolist() == [
            bool(getattr(np, name)(0.0, tiny)),
            bool(getattr(np, name)(1.0, tiny)),
        ]
