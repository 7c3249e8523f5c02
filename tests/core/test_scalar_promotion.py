"""Python scalars next to tensors follow PyTorch's wrapped-number rules, checked against torch.

One table: ops x tensor dtypes x Python scalars. For every case the result dtype, the values
(to the result dtype's precision, NaN-aware) and whether the call raises must match torch's.
What this pins down: a scalar never decides the result dtype within its category; float16 and
bfloat16 add/sub/mul/div take the scalar at float32 precision (torch's "opmath") instead of
rounding it to the tensor's dtype first; ops that check a scalar against the dtype (``where``,
``clamp``, ``masked_fill``, ``fill_``, ``full``, ``pow``) raise where torch does, while
add/mul wrap an out-of-range integer as torch does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
]

SCALARS = [
    True,
    False,
    0,
    2,
    -3,
    300,
    2**40,
    2**70,
    0.5,
    -2.5,
    1e-8,
    1e5,
    1e40,
    math.inf,
    -math.inf,
    math.nan,
    1 + 2j,
    -0.5j,
    2 + 0j,
]


def _data(name: str):
    """Six seeded values for a tensor of dtype ``name`` (per dtype, the same in every case)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    if name == "bool":
        return [True, False, True, True, False, False]
    if name == "uint8":
        return [0, 1, 7, 200] + rng.integers(0, 20, 2).tolist()
    if name.startswith("int"):
        return [0, 1, -1, 100] + rng.integers(-20, 20, 2).tolist()
    real = [0.0, 1.0, -1.5, 1000.0] + np.round(rng.normal(0, 3, 2), 3).tolist()
    if name.startswith("complex"):
        return [complex(r, i) for r, i in zip(real, [0.0, -1.0, 2.0, 0.5, 1.0, -3.0])]
    return real


_COND = [True, False, False, True, True, False]

# op name -> fn(lib, tensor, scalar, cond) where lib is torch or tensorplay
OPS = {
    "add": lambda lib, t, s, c: t + s,
    "radd": lambda lib, t, s, c: s + t,
    "add_alpha": lambda lib, t, s, c: lib.add(t, s, alpha=2),
    "sub": lambda lib, t, s, c: t - s,
    "rsub": lambda lib, t, s, c: s - t,
    "mul": lambda lib, t, s, c: t * s,
    "rmul": lambda lib, t, s, c: s * t,
    "div": lambda lib, t, s, c: t / s,
    "rdiv": lambda lib, t, s, c: s / t,
    "div_floor": lambda lib, t, s, c: lib.div(t, s, rounding_mode="floor"),
    "div_trunc": lambda lib, t, s, c: lib.div(t, s, rounding_mode="trunc"),
    "floordiv": lambda lib, t, s, c: t // s,
    "remainder": lambda lib, t, s, c: t % s,
    "pow": lambda lib, t, s, c: t**s,
    "rpow": lambda lib, t, s, c: s**t,
    "eq": lambda lib, t, s, c: t == s,
    "lt": lambda lib, t, s, c: t < s,
    "ge": lambda lib, t, s, c: t >= s,
    "clamp_min": lambda lib, t, s, c: lib.clamp(t, min=s),
    "clamp_max": lambda lib, t, s, c: t.clamp(max=s),
    "where_input": lambda lib, t, s, c: lib.where(lib.tensor(c), s, t),
    "where_other": lambda lib, t, s, c: lib.where(lib.tensor(c), t, s),
    "masked_fill": lambda lib, t, s, c: t.masked_fill(lib.tensor(c), s),
    "fill_": lambda lib, t, s, c: t.clone().fill_(s),
    "full": lambda lib, t, s, c: lib.full((3,), s, dtype=t.dtype),
    "full_like": lambda lib, t, s, c: lib.full_like(t, s),
    "iadd": lambda lib, t, s, c: t.clone().add_(s),
    "imul": lambda lib, t, s, c: t.clone().mul_(s),
    "idiv": lambda lib, t, s, c: t.clone().div_(s),
}

# Smallest subnormal and rounding error of each floating dtype: values agree to within a few
# roundings of the result dtype (kernels may order float32 operations differently).
_TOL = {
    "float16": (6e-8, 2e-3),
    "bfloat16": (1e-40, 1.6e-2),
    "float32": (1.5e-45, 1e-6),
    "float64": (5e-324, 1e-14),
    "complex64": (1.5e-45, 4e-6),  # complex pow goes through exp and log
    "complex128": (5e-324, 1e-14),
}


def _run(lib, op, name, scalar):
    t = lib.tensor(_data(name), dtype=getattr(lib, name))
    try:
        return OPS[op](lib, t, scalar, _COND)
    except Exception as e:  # noqa: BLE001 - which exception, if any, is the point
        return e


def _values(r):
    if isinstance(r, torch.Tensor):
        r = r.resolve_conj()
        if r.dtype in (torch.float16, torch.bfloat16):
            r = r.float()
        elif r.dtype is torch.complex32:
            r = r.to(torch.complex64)
        return r.numpy()
    return np.asarray(r.numpy(), dtype=np.float32 if r.dtype is tp.bfloat16 else None)


# Where TensorPlay deliberately raises instead of following torch (the docs' "Differences
# from PyTorch" list): (op, tensor dtype, scalar) -> the reason, or None.
def _deliberate(op: str, name: str, scalar, want) -> str | None:
    if isinstance(want, torch.Tensor) and want.dtype is torch.complex32:
        return "complex32 (ComplexHalf) does not exist in TensorPlay"
    if op.startswith("clamp") and type(scalar) is complex and name.startswith(("float", "bf")):
        return "clamp with a complex bound: torch keeps a floating tensor's dtype"
    return None


# Where the kernels, not the scalar's conversion, differ (dtype and errors still must match):
# torch adds complex numbers as a + alpha * b, so an infinite real part makes the imaginary
# part NaN; torch's complex pow is exp(y * log(x)), which differs from numpy's at 0 ** y and
# x ** 0.
def _kernel_numerics(op: str, name: str, scalar) -> bool:
    if name != "complex64" or type(scalar) is complex:
        return False
    if op in ("add", "radd", "add_alpha", "iadd", "sub"):
        return math.isinf(scalar) or abs(scalar) > 3.4e38
    return op in ("pow", "rpow")


def mismatch(op: str, name: str, scalar) -> str | None:
    """Why tensorplay differs from torch on ``op(tensor of dtype name, scalar)``, or None."""
    want, got = _run(torch, op, name, scalar), _run(tp, op, name, scalar)
    why = _deliberate(op, name, scalar, want)
    if why is not None:
        return None if isinstance(got, RuntimeError) else f"should raise ({why}), got {got!r}"
    if isinstance(want, Exception) or isinstance(got, Exception):
        # the same kind of error (any RuntimeError for torch's NotImplementedError); anything
        # else from tensorplay is an unexplained numpy error or warning
        kind = RuntimeError if isinstance(want, RuntimeError) else type(want)
        if isinstance(want, Exception) and isinstance(got, kind):
            return None
        return f"torch: {want!r}, tensorplay: {got!r}"
    want_dt = str(want.dtype).removeprefix("torch.")
    if want_dt != got.dtype.name:
        return f"dtype: torch {want_dt}, tensorplay {got.dtype.name}"
    a, b = _values(want), _values(got)
    if a.shape != b.shape:
        return f"shape: torch {a.shape}, tensorplay {b.shape}"
    if _kernel_numerics(op, name, scalar):
        return None
    if want_dt in _TOL:
        atol, rtol = _TOL[want_dt]
        ok = np.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True)
        ok &= np.isinf(a) == np.isinf(b)
    else:
        ok = a == b
    if not ok.all():
        return f"values: torch {a.tolist()}, tensorplay {b.tolist()}"
    return None


# torch converts numbers silently (1e5 -> inf in float16): numpy's cast warnings are failures
@pytest.mark.filterwarnings("error:overflow encountered in cast:RuntimeWarning")
@pytest.mark.filterwarnings("error:invalid value encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", sorted(OPS))
def test_scalar_operand_matches_torch(op, name):
    bad = {repr(s): why for s in SCALARS if (why := mismatch(op, name, s)) is not None}
    assert not bad, f"{op} on a {name} tensor differs from torch for scalars: {bad}"


# ---- the rules, one by one ------------------------------------------------------------------


def test_float16_product_with_a_large_float_takes_it_at_float32_precision():
    x = tp.tensor([0.0, 1.0], dtype=tp.float16)
    # 1e5 is inf in float16, but enters the product at float32: 0 * 1e5 is 0, not nan
    assert (x * 1e5).tolist() == [0.0, math.inf]
    assert (1e5 * x).tolist() == [0.0, math.inf]
    assert (x * tp.tensor(1e5)).tolist() == [0.0, math.inf]  # a 0-d tensor operand too


def test_float16_product_with_a_tiny_float_is_not_flushed_to_zero():
    got = tp.tensor([1000.0], dtype=tp.float16) * 1e-8
    assert got.dtype is tp.float16
    assert got.item() == pytest.approx(1.0014e-5, rel=1e-3)  # torch: 1.0014e-05


def test_float16_reflected_subtraction_rounds_the_number_first():
    # torch's rsub rounds 1.0001 to float16 (1.0) before subtracting
    assert (1.0001 - tp.tensor([-1.0], dtype=tp.float16)).tolist() == [2.0]
    assert (1.0001 - tp.tensor([1.0], dtype=tp.float16)).tolist() == [0.0]


def test_number_divided_by_a_tensor_is_reciprocal_times_number():
    x = tp.tensor([1000.0], dtype=tp.float16)
    want = torch.tensor([1000.0], dtype=torch.float16)
    assert (1e5 / x).item() == (1e5 / want).item() == 100.0625


def test_float32_with_floats_beyond_its_range():
    one = tp.tensor([1.0])
    assert (one + 1e-10).tolist() == [1.0]
    assert (one * 1e40).tolist() == [math.inf]
    assert math.isnan((tp.tensor([0.0]) * 1e40).item())  # 1e40 is inf in float32, as in torch


def test_integer_overflow_wraps_in_arithmetic():
    x = tp.tensor([1], dtype=tp.int8)
    assert (x + 300).tolist() == [45]  # 300 wraps to 44, as in torch
    assert (x * 2**40).tolist() == [0]
    assert (tp.tensor([1], dtype=tp.uint8) - 3).tolist() == [254]


@pytest.mark.parametrize(
    "call",
    [
        lambda x: tp.where(tp.tensor([True]), 300, x),
        lambda x: x.clamp(min=300),
        lambda x: x.masked_fill(tp.tensor([True]), 300),
        lambda x: x.clone().fill_(300),
        lambda x: tp.full((2,), 300, dtype=x.dtype),
        lambda x: x**300,
    ],
    ids=["where", "clamp", "masked_fill", "fill_", "full", "pow"],
)
def test_checked_ops_refuse_a_number_the_dtype_cannot_hold(call):
    with pytest.raises(RuntimeError, match=r"value 300 cannot be converted to type int8.*int16"):
        call(tp.tensor([1], dtype=tp.int8))


def test_unsigned_targets_take_negative_integers_wrapped():
    x = tp.tensor([5], dtype=tp.uint8)
    assert x.clone().fill_(-3).tolist() == [253]
    assert tp.full((1,), -255, dtype=tp.uint8).tolist() == [1]
    with pytest.raises(RuntimeError, match="uint8"):
        x.clone().fill_(-2.5)  # a negative float does not wrap


def test_where_lets_float16_overflow_to_inf_as_torch_does():
    x = tp.tensor([0.0], dtype=tp.float16)
    assert tp.where(tp.tensor([True]), 1e5, x).tolist() == [math.inf]
    with pytest.raises(RuntimeError, match="float16"):
        x.masked_fill(tp.tensor([True]), 1e5)


def test_python_ints_beyond_int64_raise_overflow_error():
    with pytest.raises(OverflowError, match=r"int64.*pass it as a float"):
        tp.tensor([1.0]) + 2**70
    with pytest.raises(OverflowError, match="int64"):
        tp.full((1,), 2**70, dtype=tp.float32)


def test_float16_with_a_complex_number_is_a_clear_error():
    x = tp.tensor([1.0], dtype=tp.float16)
    with pytest.raises(NotImplementedError, match=r"complex32.*\.to\(tensorplay\.complex64\)"):
        x * 1j
    assert (x == 1 + 0j).tolist() == [True]  # a bool result needs no complex32
    assert (tp.tensor([1.0], dtype=tp.bfloat16) * 1j).dtype is tp.complex64


def test_complex_number_into_a_real_tensor_needs_a_zero_imaginary_part():
    x = tp.tensor([1.0, 2.0])
    assert x.clone().fill_(3 + 0j).tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="no imaginary part"):
        x.masked_fill(tp.tensor([True, False]), 1j)
    assert tp.tensor([False]).fill_(-0.5j).tolist() == [True]  # nonzero is True for bool
