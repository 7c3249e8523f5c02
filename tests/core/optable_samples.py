"""Sample inputs and numpy references for every op-table row (the tests' OpInfo).

``samples(row, dtype, rng)`` yields ``Sample`` objects: the positional arguments and
keyword parameters of one call of ``row.fn``. Pointwise rows of one or two inputs
get generic samples (0-d, empty, non-contiguous, expanded, broadcast, scalar
operands); every other row is keyed by name in ``_NAMED``. ``REF[name]`` is the
numpy oracle: it receives the inputs as float64/complex128/int64/bool arrays and
returns the expected result (or a tuple of them).

A row without samples or without a reference makes ``test_every_row_is_covered``
fail: adding a row to the table means adding its samples here.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

import tensorplay as tp
from tensorplay import _dtype as D
from tensorplay._dispatch import _CATS

# the dtypes every row is tried with (rows whose ``allow`` excludes one must raise)
DTYPES = [
    tp.bool,
    tp.uint8,
    tp.int8,
    tp.int32,
    tp.int64,
    tp.float16,
    tp.bfloat16,
    tp.float32,
    tp.float64,
    tp.complex64,
]
ALL_DTYPES = list(D.ALL)

# (rtol, atol) per result dtype; integer and bool results are compared exactly
TOL = {
    tp.float16: (1e-2, 1e-2),
    tp.bfloat16: (1.6e-2, 1.6e-2),
    tp.float32: (1e-5, 1e-5),
    tp.complex64: (1e-5, 1e-5),
    tp.float64: (1e-9, 1e-9),
    tp.complex128: (1e-9, 1e-9),
}


def allowed(row, dt) -> bool:
    return _CATS[dt.category] in row.allow


@dataclass
class Sample:
    args: tuple
    kwargs: dict = field(default_factory=dict)
    name: str = ""
    meta: bool = True  # False: the result shape depends on data (meta tensors refuse it)

    def __repr__(self) -> str:
        def desc(x):
            if isinstance(x, tp.Tensor):
                return f"T{tuple(x.shape)}{x.stride()}:{x.dtype.name}"
            if isinstance(x, (list, tuple)):
                return "[" + ", ".join(desc(y) for y in x) + "]"
            return repr(x)

        return f"{self.name}({', '.join(desc(a) for a in self.args)}, {self.kwargs})"


# ---- values ---------------------------------------------------------------------------------


def values(shape, dt, rng, domain=None) -> np.ndarray:
    """Random values for a tensor of ``dt`` (numpy float64/int64/bool/complex128)."""
    shape = tuple(shape)
    if dt is tp.bool:
        return np.ones(shape, bool) if domain == "nonzero" else rng.random(shape) < 0.5
    if dt.category == 1:
        lo = 0 if dt is tp.uint8 or domain == "exponent" else -9
        hi = 4 if domain == "exponent" else 10
        v = rng.integers(lo, hi, shape)
        if domain == "nonzero":
            v[v == 0] = 1
        return v
    if domain == "exponent":
        v = rng.uniform(-2, 2, shape)
    else:
        v = rng.uniform(-3, 3, shape)
    if domain == "nonzero":
        v = np.where(np.abs(v) < 0.25, v + np.copysign(0.5, v), v)
    if dt.category == 3:
        v = v + 1j * rng.uniform(-2, 2, shape)
    return v


def make(shape, dt, rng, layout="contiguous", domain=None) -> tp.Tensor:
    """A tensor of ``shape``; ``layout`` picks how it sits in memory."""
    shape = tuple(shape)
    if layout == "transposed" and len(shape) == 2:
        return make(shape[::-1], dt, rng, domain=domain).t()
    if layout == "stepped" and shape:
        return make(shape[:-1] + (2 * shape[-1],), dt, rng, domain=domain)[..., ::2]
    if layout == "expanded" and shape:
        return make((1,) + shape[1:], dt, rng, domain=domain).expand(*shape)
    return tp.tensor(values(shape, dt, rng, domain), dtype=dt)


def scalar_of(dt, domain=None):
    """A Python scalar of the same kind as ``dt``."""
    if dt is tp.bool:
        return True
    if dt.category == 1:
        return 2 if domain == "exponent" else 3
    if dt.category == 2:
        return 1.5 if domain == "exponent" else 2.5
    return 1.5 - 0.5j


def to_ref(x):
    """Inputs as numpy arrays in a wide dtype (the oracle computes there)."""
    if isinstance(x, tp.Tensor):
        a = np.asarray(x)
        if a.dtype == ml_dtypes.bfloat16 or a.dtype.kind == "f":
            return a.astype(np.float64)
        if a.dtype.kind == "c":
            return a.astype(np.complex128)
        if a.dtype.kind in "iu":
            return a.astype(np.int64)
        return a.copy()
    if isinstance(x, (list, tuple)):
        return type(x)(to_ref(y) for y in x)
    return x


# ---- generic samples --------------------------------------------------------------------

UNARY_LAYOUTS = [
    ("0d", (), "contiguous"),
    ("empty", (2, 0, 3), "contiguous"),
    ("vector", (5,), "contiguous"),
    ("matrix", (3, 4), "contiguous"),
    ("transposed", (3, 4), "transposed"),
    ("stepped", (3, 4), "stepped"),
    ("expanded", (3, 4), "expanded"),
]

BINARY_LAYOUTS = [
    ("same", (3, 4), "contiguous", (3, 4), "contiguous"),
    ("broadcast", (3, 1), "contiguous", (1, 4), "contiguous"),
    ("0d_left", (), "contiguous", (2, 3), "contiguous"),
    ("0d_right", (2, 3), "contiguous", (), "contiguous"),
    ("0d_both", (), "contiguous", (), "contiguous"),
    ("empty", (0, 3), "contiguous", (1, 3), "contiguous"),
    ("noncontiguous", (3, 4), "transposed", (3, 4), "stepped"),
    ("expanded", (3, 4), "expanded", (3, 4), "contiguous"),
    ("rank_broadcast", (2, 3, 4), "stepped", (4,), "contiguous"),
]

# domain of the second input of binary rows
_SECOND_DOMAIN = {
    "div": "nonzero",
    "floor_divide": "nonzero",
    "remainder": "nonzero",
    "pow": "exponent",
}
# domain of the first input of unary rows (none of these need one: nan/inf are compared too)
_FIRST_DOMAIN: dict = {}


def _unary_generic(row, dt, rng, **kw):
    for name, shape, layout in UNARY_LAYOUTS:
        yield Sample((make(shape, dt, rng, layout, _FIRST_DOMAIN.get(row.name)),), dict(kw), name)


def _binary_generic(row, dt, rng, **kw):
    dom = _SECOND_DOMAIN.get(row.name)
    for name, s1, l1, s2, l2 in BINARY_LAYOUTS:
        yield Sample((make(s1, dt, rng, l1), make(s2, dt, rng, l2, dom)), dict(kw), name)
    yield Sample((make((2, 3), dt, rng), scalar_of(dt, dom)), dict(kw), "scalar")
    # mixed dtypes: promotion with a wider/other-category partner
    other = tp.int64 if dt is not tp.int64 else tp.float32
    yield Sample((make((2, 3), dt, rng), make((2, 3), other, rng, domain=dom)), dict(kw), "mixed")


# ---- named samples ------------------------------------------------------------------------


def _s(name, *args, meta=True, **kwargs):
    return Sample(tuple(args), kwargs, name, meta)


def _unary_with(*kwsets):
    def gen(row, dt, rng):
        for kw in kwsets:
            yield from _unary_generic(row, dt, rng, **kw)

    return gen


def _binary_with(*kwsets):
    def gen(row, dt, rng):
        for kw in kwsets:
            yield from _binary_generic(row, dt, rng, **kw)

    return gen


def _clamp(row, dt, rng):
    # torch casts the bounds to the input dtype first (clamp(uint8, -1) clamps at 255): keep
    # them representable
    lo, hi = (0, 1) if dt is tp.bool else (1, 5) if dt.category == 1 else (-1, 2)
    yield _s("both", make((3, 4), dt, rng), lo, hi)
    yield _s("min_only", make((3, 4), dt, rng, "transposed"), min=lo)
    yield _s("max_only", make((2, 0), dt, rng), max=hi)
    yield _s("0d", make((), dt, rng), lo, hi)
    if dt is tp.bool:  # torch has bool kernels for one tensor bound, not for both
        yield _s("tensor_min", make((3, 4), dt, rng), make((1, 4), dt, rng))
        yield _s("tensor_max", make((3, 4), dt, rng), max=make((3, 1), dt, rng))
    else:
        yield _s(
            "tensor_bounds", make((3, 4), dt, rng), make((1, 4), dt, rng), make((3, 1), dt, rng)
        )


def _where(row, dt, rng):
    yield _s("broadcast", make((3, 1), tp.bool, rng), make((1, 4), dt, rng), make((3, 4), dt, rng))
    yield _s("scalar", make((2, 3), tp.bool, rng), make((2, 3), dt, rng, "stepped"), scalar_of(dt))
    yield _s("empty", make((0, 3), tp.bool, rng), make((0, 3), dt, rng), make((3,), dt, rng))
    yield _s("0d", make((), tp.bool, rng), make((), dt, rng), make((), dt, rng))


def _round(row, dt, rng):
    yield from _unary_generic(row, dt, rng)
    yield _s("decimals", make((3, 4), dt, rng), decimals=1)
    yield _s(
        "halves",
        tp.tensor([0.5, 1.5, 2.5, -0.5, -2.5], dtype=dt)
        if dt.category >= 2
        else make((5,), dt, rng),
    )


def _isclose(row, dt, rng):
    a = make((3, 4), dt, rng)
    yield _s("self", a, a.clone())
    yield _s("broadcast", make((3, 1), dt, rng), make((1, 4), dt, rng))
    yield _s("tolerances", make((3, 4), dt, rng), make((3, 4), dt, rng), rtol=0.5, atol=1.0)
    if dt.category >= 2:
        nan = tp.tensor([float("nan"), 1.0, float("inf")], dtype=dt)
        yield _s("nan", nan, nan.clone(), equal_nan=True)
        yield _s("nan_unequal", nan, nan.clone())


def _scan(row, dt, rng):
    yield _s("dim0", make((3, 4), dt, rng), 0)
    yield _s("dim_last", make((3, 4), dt, rng, "transposed"), -1)
    yield _s("0d", make((), dt, rng), 0)
    yield _s("empty", make((0, 3), dt, rng), 1)
    yield _s("dtype", make((2, 3), dt, rng), 1, dtype=tp.float64)


def _softmax(row, dt, rng):
    yield _s("dim1", make((3, 4), dt, rng), 1)
    yield _s("dim0_noncontig", make((3, 4), dt, rng, "stepped"), 0)
    yield _s("0d", make((), dt, rng), 0)
    yield _s("empty", make((0, 3), dt, rng), -1)
    yield _s("3d", make((2, 3, 4), dt, rng), -2)
    yield _s("dtype", make((2, 3), dt, rng), 1, dtype=tp.float64)


def _matmul(row, dt, rng):
    yield _s("mm", make((3, 4), dt, rng), make((4, 5), dt, rng))
    yield _s("transposed", make((3, 4), dt, rng, "transposed"), make((4, 2), dt, rng, "stepped"))
    yield _s("vv", make((4,), dt, rng), make((4,), dt, rng))
    yield _s("mv", make((3, 4), dt, rng), make((4,), dt, rng))
    yield _s("vm", make((4,), dt, rng), make((4, 5), dt, rng))
    yield _s("batched", make((2, 3, 4), dt, rng), make((4, 5), dt, rng))
    yield _s("batch_broadcast", make((2, 1, 3, 4), dt, rng), make((5, 4, 2), dt, rng))
    yield _s("empty", make((0, 4), dt, rng), make((4, 5), dt, rng))
    yield _s("empty_k", make((3, 0), dt, rng), make((0, 5), dt, rng))


def _mm(row, dt, rng):
    yield _s("mm", make((3, 4), dt, rng), make((4, 5), dt, rng))
    yield _s("transposed", make((3, 4), dt, rng, "transposed"), make((4, 2), dt, rng, "expanded"))
    yield _s("empty", make((0, 4), dt, rng), make((4, 5), dt, rng))


def _bmm(row, dt, rng):
    yield _s("bmm", make((2, 3, 4), dt, rng), make((2, 4, 5), dt, rng))
    yield _s("noncontig", make((2, 3, 4), dt, rng, "stepped"), make((2, 4, 1), dt, rng))
    yield _s("empty", make((0, 3, 4), dt, rng), make((0, 4, 5), dt, rng))


def _dot(row, dt, rng):
    yield _s("dot", make((5,), dt, rng), make((5,), dt, rng))
    yield _s("stepped", make((5,), dt, rng, "stepped"), make((5,), dt, rng))
    yield _s("empty", make((0,), dt, rng), make((0,), dt, rng))


def _outer(row, dt, rng):
    yield _s("outer", make((3,), dt, rng), make((4,), dt, rng))
    yield _s("stepped", make((3,), dt, rng, "stepped"), make((0,), dt, rng))


def _einsum(row, dt, rng):
    yield _s("mm", "ij,jk->ik", make((3, 4), dt, rng), make((4, 5), dt, rng))
    yield _s("inner", "i,i->", make((4,), dt, rng), make((4,), dt, rng))
    yield _s("implicit", "ij,jk", make((2, 3), dt, rng, "transposed"), make((3, 2), dt, rng))
    yield _s("trace_like", "ii->i", make((3, 3), dt, rng))
    yield _s("transpose", "ij->ji", make((2, 3), dt, rng))
    yield _s("batched", "bij,bjk->bik", make((2, 3, 4), dt, rng), make((2, 4, 1), dt, rng))
    yield _s("ellipsis", "...ij->...ji", make((2, 3, 4), dt, rng), meta=False)


def _linear(row, dt, rng):
    yield _s("basic", make((3, 4), dt, rng), make((5, 4), dt, rng), make((5,), dt, rng))
    yield _s("no_bias", make((3, 4), dt, rng), make((5, 4), dt, rng))
    yield _s("vector_input", make((4,), dt, rng), make((5, 4), dt, rng), make((5,), dt, rng))
    yield _s("batched", make((2, 3, 4), dt, rng), make((5, 4), dt, rng), make((5,), dt, rng))
    yield _s(
        "noncontiguous",
        make((2, 3, 4), dt, rng, "stepped"),
        make((5, 4), dt, rng, "transposed"),
        make((5,), dt, rng, "stepped"),
    )
    yield _s("expanded", make((3, 4), dt, rng, "expanded"), make((5, 4), dt, rng, "expanded"))
    yield _s("vector_weight", make((2, 3, 4), dt, rng), make((4,), dt, rng), make((), dt, rng))
    yield _s("vector_both", make((4,), dt, rng), make((4,), dt, rng))
    yield _s(
        "bias_broadcast", make((2, 3, 4), dt, rng), make((5, 4), dt, rng), make((3, 1), dt, rng)
    )
    yield _s("empty", make((0, 4), dt, rng), make((5, 4), dt, rng), make((5,), dt, rng))
    yield _s("empty_k", make((3, 0), dt, rng), make((5, 0), dt, rng), make((5,), dt, rng))
    yield _s("empty_out", make((3, 4), dt, rng), make((0, 4), dt, rng), make((0,), dt, rng))


def _linear_ref(x, w, b=None):
    out = np.matmul(x, w.T)
    return out if b is None else out + b


def _cat(row, dt, rng):
    yield _s("dim0", [make((2, 3), dt, rng), make((4, 3), dt, rng, "stepped")])
    yield _s("dim1", [make((2, 3), dt, rng), make((2, 1), dt, rng)], 1)
    yield _s("dim_neg", [make((2, 3), dt, rng, "transposed"), make((2, 2), dt, rng)], -1)
    yield _s("legacy_empty", [make((2, 3), dt, rng), make((0,), dt, rng)])
    yield _s("single", [make((3,), dt, rng)])
    yield _s("mixed_dtype", [make((2, 3), dt, rng), make((1, 3), tp.float64, rng)])


def _stack(row, dt, rng):
    yield _s("dim0", [make((2, 3), dt, rng), make((2, 3), dt, rng, "transposed")])
    yield _s("dim_last", [make((2, 3), dt, rng), make((2, 3), dt, rng)], -1)
    yield _s("dim2", [make((2, 3), dt, rng), make((2, 3), dt, rng)], 2)
    yield _s("0d", [make((), dt, rng), make((), dt, rng)])
    yield _s("empty", [make((0, 3), dt, rng)], 1)


def _gather(row, dt, rng):
    yield _s("dim1", make((3, 4), dt, rng), 1, tp.tensor([[0, 3], [1, 1]]))
    yield _s("dim0", make((3, 4), dt, rng, "transposed"), 0, tp.tensor([[2, 0, 1, 0]]))
    yield _s("negdim", make((2, 3, 4), dt, rng), -1, tp.tensor(rng.integers(0, 4, (2, 3, 5))))
    yield _s("empty", make((3, 4), dt, rng), 1, tp.zeros(3, 0, dtype=tp.int64))


def _scatter(row, dt, rng):
    idx = tp.tensor([[3, 0, 1], [2, 1, 0]])
    yield _s("src", make((3, 4), dt, rng), 1, idx, make((2, 5), dt, rng))
    yield _s("dim0", make((3, 4), dt, rng), 0, tp.tensor([[2, 0, 1, 0]]), make((1, 4), dt, rng))
    yield _s("value", make((3, 4), dt, rng), 1, idx, value=scalar_of(dt))
    if dt is not tp.bool:
        yield _s(
            "add",
            make((3, 4), dt, rng),
            1,
            tp.tensor([[1, 1, 0]]),
            make((1, 3), dt, rng),
            reduce="add",
        )
        yield _s(
            "multiply",
            make((3, 4), dt, rng),
            1,
            tp.tensor([[1, 1, 0]]),
            make((1, 3), dt, rng),
            reduce="multiply",
        )


def _index_select(row, dt, rng):
    yield _s("dim0", make((3, 4), dt, rng), 0, tp.tensor([2, 0, 2]))
    yield _s("dim1", make((3, 4), dt, rng, "stepped"), 1, tp.tensor([3, 1]))
    yield _s("int32_index", make((3, 4), dt, rng), -1, tp.tensor([0, 0], dtype=tp.int32))
    yield _s("empty_index", make((3, 4), dt, rng), 0, tp.tensor([], dtype=tp.int64))


def _masked_fill(row, dt, rng):
    yield _s("same", make((3, 4), dt, rng), make((3, 4), tp.bool, rng), scalar_of(dt))
    yield _s(
        "broadcast", make((3, 4), dt, rng, "transposed"), make((1, 4), tp.bool, rng), scalar_of(dt)
    )
    yield _s("tensor_value", make((2, 3), dt, rng), make((2, 3), tp.bool, rng), make((), dt, rng))
    yield _s("empty", make((0, 3), dt, rng), make((3,), tp.bool, rng), scalar_of(dt))


def _copylike(row, dt, rng):
    yield from _unary_generic(row, dt, rng)


def _softmax_backward_data(row, dt, rng):
    # (grad_output, output, dim): any output values (the formulas hold for all of them)
    yield _s("rows", make((3, 4), dt, rng), make((3, 4), dt, rng), 1)
    yield _s("columns", make((3, 4), dt, rng), make((3, 4), dt, rng), 0)
    yield _s("last_of_3d", make((2, 3, 4), dt, rng), make((2, 3, 4), dt, rng), -1)
    yield _s("transposed", make((4, 3), dt, rng, "transposed"), make((4, 3), dt, rng), 1)
    yield _s("empty", make((0, 3), dt, rng), make((0, 3), dt, rng), 1)


def _to_copy(row, dt, rng):
    # float64 targets only: finite differences cannot see through float32 rounding, and
    # integer targets (tested in test_tensor.py) have no derivative to check
    yield _s("to_float64", make((2, 3), dt, rng), dtype=tp.float64)
    yield _s("transposed", make((3, 4), dt, rng, "transposed"), dtype=tp.float64)


def _index(row, dt, rng):
    x = make((4, 5), dt, rng)
    yield _s("rows", x, indices=(np.array([0, 2, 2]),))
    yield _s("pairs", x, indices=(np.array([1, 3]), np.array([0, 4])))
    yield _s("mask", x, indices=(np.arange(20).reshape(4, 5) % 3 == 0,), meta=False)
    yield _s("slice_then_list", x, indices=(slice(1, 3), np.array([4, 0])))


def _index_put(row, dt, rng):
    x = make((4, 5), dt, rng)
    yield _s("assign", x, make((3, 5), dt, rng), indices=(np.array([0, 2, 3]),))
    # unique positions: with repeats, plain assignment keeps an arbitrary one (as in torch)
    yield _s("broadcast", x, make((5,), dt, rng), indices=(np.array([1, 3]),))
    yield _s(
        "accumulate_repeats",
        x,
        make((3, 5), dt, rng),
        indices=(np.array([1, 1, 2]),),
        accumulate=True,
    )


def _one_bound(row, dt, rng):
    """clamp_min/clamp_max: a number bound (representable in dt: torch casts it first) or a
    tensor one; a bool tensor takes tensor bounds only (as in torch)."""
    if dt is not tp.bool:
        bound = 1 if dt.category == 1 else 0.5
        yield _s("number", make((3, 4), dt, rng), bound)
        yield _s("0d", make((), dt, rng), bound)
        yield _s("empty", make((2, 0), dt, rng), bound)
        other = tp.float64 if dt is not tp.float64 else tp.int64
        yield _s("mixed", make((2, 3), dt, rng), make((2, 3), other, rng))
    yield _s("tensor", make((3, 4), dt, rng, "transposed"), make((1, 4), dt, rng))
    yield _s("broadcast_up", make((3, 1), dt, rng), make((1, 4), dt, rng, "stepped"))


def _addc(row, dt, rng):
    """addcmul/addcdiv: three broadcast tensors and a value (addcdiv divides by values away
    from zero)."""
    dom = "nonzero" if row.name == "addcdiv" else None
    yield _s(
        "same", make((3, 4), dt, rng), make((3, 4), dt, rng), make((3, 4), dt, rng, domain=dom)
    )
    yield _s(
        "broadcast",
        make((3, 1), dt, rng),
        make((1, 4), dt, rng, "stepped"),
        make((3, 4), dt, rng, "transposed", dom),
    )
    yield _s(
        "value",
        make((2, 3), dt, rng, "expanded"),
        make((2, 3), dt, rng),
        make((2, 3), dt, rng, domain=dom),
        value=2,
    )
    if dt.category >= 2:
        value = -0.5 if dt.category == 2 else 0.5 - 1j
        t = [make((2, 3), dt, rng), make((2, 3), dt, rng), make((2, 3), dt, rng, domain=dom)]
        yield _s("fractional_value", *t, value=value)
    yield _s("0d", make((), dt, rng), make((), dt, rng), make((), dt, rng, domain=dom))
    yield _s("empty", make((0, 3), dt, rng), make((3,), dt, rng), make((0, 1), dt, rng, domain=dom))
    yield _s(
        "mixed",
        make((2, 3), dt, rng),
        # a wider partner of dt's kind (the complex gradient test aligns complex leaves only)
        make((2, 3), tp.complex128 if dt.is_complex else tp.float64, rng),
        make((2, 3), dt, rng, domain=dom),
    )


def _lerp(row, dt, rng):
    # integer inputs are refused; an integer weight keeps their promotion integer, so that
    # the generated tests expect the refusal
    w = (0.25, 0.75, 1.0) if dt.category >= 2 else (0, 1, 1)
    yield _s("near_start", make((3, 4), dt, rng), make((3, 4), dt, rng), w[0])
    yield _s("near_end", make((3, 4), dt, rng, "transposed"), make((3, 4), dt, rng), w[1])
    yield _s("tensor_weight", make((3, 1), dt, rng), make((1, 4), dt, rng), make((3, 4), dt, rng))
    yield _s(
        "0d_weight", make((2, 3), dt, rng), make((2, 3), dt, rng, "stepped"), make((), dt, rng)
    )
    yield _s("0d", make((), dt, rng), make((), dt, rng), w[2])
    yield _s("empty", make((0, 3), dt, rng), make((3,), dt, rng), w[0])


def _cumulative_extreme(row, dt, rng):
    yield _s("dim0", make((3, 4), dt, rng), 0)
    yield _s("dim_last", make((3, 4), dt, rng, "transposed"), -1)
    yield _s("stepped_3d", make((2, 3, 5), dt, rng, "stepped"), 1)
    yield _s("long", make((2, 37), dt, rng), 1)  # several rounds of the scan
    yield _s("0d", make((), dt, rng), 0)
    yield _s("empty", make((0, 3), dt, rng), 1)
    if dt is not tp.float64:  # ties and NaN are kinks: float64 samples are differentiated
        yield _s("ties", tp.tensor([[1, 0, 1, 0, 1], [2, 2, 0, 0, 1]]).to(dt), 1)
        if dt.category == 2:
            nan = float("nan")
            x = tp.tensor([[2.0, nan, 1.0, nan, 3.0], [-1.0, 0.0, -0.0, 4.0, 4.0]], dtype=dt)
            yield _s("nonfinite", x, 1)


def _scale_for(dt):
    """A scale factor (index_add's alpha) for dt: real for complex dt too, since torch's
    index_add gradient forgets to conjugate a complex alpha (test_extension_ops.py checks
    ours)."""
    return {0: True, 1: 2}.get(dt.category, -1.5)


def _index_add(row, dt, rng):
    yield _s("dim0_repeats", make((3, 4), dt, rng), 0, tp.tensor([2, 0, 2]), make((3, 4), dt, rng))
    yield _s(
        "dim1_alpha",
        make((3, 4), dt, rng, "transposed"),
        1,
        tp.tensor([3, 1]),
        make((3, 2), dt, rng, "stepped"),
        alpha=_scale_for(dt),
    )
    idx32 = tp.tensor([0, 0], dtype=tp.int32)
    yield _s("int32_index", make((2, 3), dt, rng), -1, idx32, make((2, 2), dt, rng))
    yield _s("0d_index", make((3, 4), dt, rng), 0, tp.tensor(1), make((1, 4), dt, rng))
    yield _s("0d", make((), dt, rng), 0, tp.tensor(0), make((), dt, rng))
    empty = tp.tensor([], dtype=tp.int64)
    yield _s("empty_index", make((3, 4), dt, rng), 0, empty, make((0, 4), dt, rng))


def _index_copy(row, dt, rng):
    # distinct indices: with a repeat, which slice is kept is unspecified (as in torch)
    yield _s("dim0", make((3, 4), dt, rng), 0, tp.tensor([2, 0]), make((2, 4), dt, rng))
    yield _s(
        "dim1",
        make((3, 4), dt, rng, "transposed"),
        1,
        tp.tensor([3, 1, 0]),
        make((3, 3), dt, rng, "stepped"),
    )
    yield _s("0d_index", make((3, 4), dt, rng), -2, tp.tensor(1), make((1, 4), dt, rng))
    yield _s("0d", make((), dt, rng), 0, tp.tensor(0), make((), dt, rng))
    empty = tp.tensor([], dtype=tp.int64)
    yield _s("empty_index", make((3, 4), dt, rng), 1, empty, make((3, 0), dt, rng))


def _scatter_reduce(row, dt, rng):
    reductions = ["sum", "prod", "mean", "amax", "amin"]
    if dt is tp.bool:
        reductions.remove("mean")  # torch has no bool mean
    if dt.is_complex:
        reductions = reductions[:3]  # nor a complex maximum
    repeats = tp.tensor([[1, 1, 0], [2, 2, 2]])
    for reduce in reductions:
        for include_self in (True, False):
            yield _s(
                f"{reduce}_{'with' if include_self else 'without'}_self",
                make((3, 4), dt, rng),
                1,
                repeats,
                make((2, 5), dt, rng),  # larger than the index: only its corner is read
                reduce,
                include_self=include_self,
            )
    index = tp.tensor([[2, 0, 2, 0], [2, 1, 1, 1]])
    yield _s("dim0", make((3, 4), dt, rng, "transposed"), 0, index, make((2, 4), dt, rng), "sum")
    yield _s("0d", make((), dt, rng), 0, tp.tensor(0), make((), dt, rng), reductions[-1])
    empty = tp.zeros(3, 0, dtype=tp.int64)
    yield _s("empty", make((3, 4), dt, rng), 1, empty, make((3, 0), dt, rng), "sum")
    if dt is not tp.bool:
        # zeros in the product, at most one from src in each position written
        x = tp.tensor([[0, 2, 3, 1], [1, 3, 2, 0], [2, 1, 0, 3]]).to(dt)
        src = tp.tensor([[2, 0, 3], [1, 2, 0]]).to(dt)
        for include_self in (True, False):
            yield _s(
                f"prod_zeros_{include_self}", x, 1, repeats, src, "prod", include_self=include_self
            )


# ---- reductions -------------------------------------------------------------------------

_RED_SHAPES = [
    ("0d", (), "contiguous"),
    ("vector", (5,), "contiguous"),
    ("matrix", (3, 4), "contiguous"),
    ("transposed", (3, 4), "transposed"),
    ("3d_stepped", (2, 3, 4), "stepped"),
    ("expanded", (3, 4), "expanded"),
]


def _reduction(dims=(None, 0, -1, (0, 1)), extra=({},), empty_dims=(1,)):
    def gen(row, dt, rng):
        for name, shape, layout in _RED_SHAPES:
            for dim in dims:
                if dim is not None and not shape:
                    if not isinstance(dim, int):
                        continue
                for keepdim in (False, True):
                    for kw in extra:
                        x = make(shape, dt, rng, layout)
                        if isinstance(dim, tuple) and len(shape) < 2:
                            continue
                        args = dict(kw)
                        if dim is not None:
                            args["dim"] = dim
                        yield Sample((x,), dict(args, keepdim=keepdim), f"{name}_dim{dim}")
        for dim in empty_dims:
            yield Sample((make((0, 3), dt, rng),), {"dim": dim}, "empty")

    return gen


def _with_zeros(gen, dims):
    """prod/cumprod samples plus inputs holding zeros (one, and two, in a slice): their
    gradients cannot be out / input there."""

    def wrapped(row, dt, rng):
        yield from gen(row, dt, rng)
        for dim in dims:
            x = tp.tensor([[0, 2, 3, 1], [1, 0, 2, 1], [0, 0, 2, 3]], dtype=dt)
            yield Sample((x,), {} if dim is None else {"dim": dim}, f"zeros_dim{dim}")

    return wrapped


def _whole_reduction(row, dt, rng):
    """_max_all/_min_all (tp.max(x) with no dim): every element, ties and zeros included."""
    for name, shape, layout in _RED_SHAPES:
        yield Sample((make(shape, dt, rng, layout),), {}, name)
    yield Sample((tp.tensor([[1, 3, 3], [0, 3, 1]], dtype=dt),), {}, "ties")


def _dim_reduction(row, dt, rng):
    """argmax/argmin/max_dim/min_dim: an int dim (argmax also None)."""
    dims = (None, 0, -1, 1) if row.name.startswith("arg") else (0, -1, 1)
    for name, shape, layout in _RED_SHAPES:
        for dim in dims:
            if dim is not None and dim >= max(len(shape), 1):
                continue
            for keepdim in (False, True):
                kw = {"keepdim": keepdim}
                if dim is not None:
                    kw["dim"] = dim
                yield Sample((make(shape, dt, rng, layout),), kw, f"{name}_dim{dim}")
    yield Sample((make((0, 3), dt, rng),), {"dim": 1}, "empty")


def _views(row, dt, rng):
    yield from VIEW_SAMPLES[row.name](dt, rng)


def _x(dt, rng, shape=(2, 3, 4), layout="contiguous"):
    return make(shape, dt, rng, layout)


VIEW_SAMPLES = {
    "view": lambda dt, rng: [
        _s("flat", _x(dt, rng), -1),
        _s("tuple", _x(dt, rng), (6, 4)),
        _s("dims", _x(dt, rng), 4, 3, 2),
        _s("0d", _x(dt, rng, ()), 1),
        _s("empty", _x(dt, rng, (0, 3)), 3, 0),
        _s("split_stepped", _x(dt, rng, (3, 4), "stepped"), 3, 2, 2),
    ],
    "reshape": lambda dt, rng: [
        _s("flat", _x(dt, rng), -1),
        _s("copying", _x(dt, rng, (3, 4), "transposed"), 12),
        _s("tuple", _x(dt, rng), (4, -1)),
        _s("0d", _x(dt, rng, ()), ()),
        _s("empty", _x(dt, rng, (0, 3)), -1, 3),
    ],
    "permute": lambda dt, rng: [
        _s("perm", _x(dt, rng), 2, 0, 1),
        _s("neg", _x(dt, rng), (-1, -3, -2)),
        _s("0d", _x(dt, rng, ())),
    ],
    "transpose": lambda dt, rng: [
        _s("t", _x(dt, rng), 0, 2),
        _s("neg", _x(dt, rng), -1, 1),
        _s("0d", _x(dt, rng, ()), 0, -1),
    ],
    "t": lambda dt, rng: [
        _s("2d", _x(dt, rng, (2, 3))),
        _s("1d", _x(dt, rng, (3,))),
        _s("0d", _x(dt, rng, ())),
    ],
    "expand": lambda dt, rng: [
        _s("expand", _x(dt, rng, (3, 1)), 3, 4),
        _s("lead", _x(dt, rng, (1, 4)), 2, -1, 4),
        _s("tuple", _x(dt, rng, ()), (2, 2)),
        _s("empty", _x(dt, rng, (1, 3)), 0, 3),
    ],
    "expand_as": lambda dt, rng: [_s("expand_as", _x(dt, rng, (3, 1)), _x(dt, rng, (2, 3, 4)))],
    "squeeze": lambda dt, rng: [
        _s("all", _x(dt, rng, (1, 3, 1))),
        _s("dim", _x(dt, rng, (1, 3, 1)), 2),
        _s("noop", _x(dt, rng, (1, 3, 1)), 1),
        _s("dims", _x(dt, rng, (1, 3, 1)), (0, 2)),
        _s("0d", _x(dt, rng, ())),
    ],
    "unsqueeze": lambda dt, rng: [
        _s("front", _x(dt, rng), 0),
        _s("back", _x(dt, rng), -1),
        _s("mid", _x(dt, rng, (3, 4), "stepped"), 1),
        _s("0d", _x(dt, rng, ()), 0),
    ],
    "flatten": lambda dt, rng: [
        _s("all", _x(dt, rng)),
        _s("range", _x(dt, rng), 1, 2),
        _s("copying", _x(dt, rng, (3, 4), "transposed")),
        _s("0d", _x(dt, rng, ())),
    ],
    "unflatten": lambda dt, rng: [
        _s("split", _x(dt, rng), 2, (2, 2)),
        _s("infer", _x(dt, rng), 0, (1, -1)),
    ],
    "narrow": lambda dt, rng: [
        _s("narrow", _x(dt, rng), 2, 1, 2),
        _s("negstart", _x(dt, rng), -1, -2, 2),
        _s("empty", _x(dt, rng), 0, 1, 0),
    ],
    "select": lambda dt, rng: [_s("select", _x(dt, rng), 1, 2), _s("neg", _x(dt, rng), -1, -1)],
    "as_strided": lambda dt, rng: [
        _s("window", _x(dt, rng, (6,)), (3, 2), (1, 1)),
        _s("offset", _x(dt, rng, (3, 4)), (2, 2), (4, 1), 1),
    ],
    "movedim": lambda dt, rng: [
        _s("one", _x(dt, rng), 0, -1),
        _s("many", _x(dt, rng), (0, 1), (2, 0)),
    ],
    "diagonal": lambda dt, rng: [
        _s("main", _x(dt, rng, (3, 4))),
        _s("offset", _x(dt, rng, (3, 4)), 1),
        _s("negoffset", _x(dt, rng, (3, 4)), -2),
        _s("dims", _x(dt, rng), 0, 2, 1),
        _s("empty", _x(dt, rng, (3, 4)), 5),
    ],
    "unbind": lambda dt, rng: [_s("dim0", _x(dt, rng)), _s("dim_neg", _x(dt, rng), -1)],
    "split": lambda dt, rng: [
        _s("size", _x(dt, rng), 2, 2),
        _s("uneven", _x(dt, rng), 2, 1),
        _s("sections", _x(dt, rng), [1, 3], -1),
    ],
    "chunk": lambda dt, rng: [
        _s("even", _x(dt, rng), 2),
        _s("uneven", _x(dt, rng), 2, 1),
        _s("more_than_size", _x(dt, rng), 5, 0),
    ],
}

_NAMED = {
    "gelu": _unary_with({}, {"approximate": "tanh"}),
    "softplus": _unary_with({}, {"beta": 2.0, "threshold": 1.0}),
    "leaky_relu": _unary_with({}, {"negative_slope": 0.2}),
    "add": _binary_with({}, {"alpha": 2}),
    "sub": _binary_with({}, {"alpha": 2}),
    "div": _binary_with({}, {"rounding_mode": "trunc"}, {"rounding_mode": "floor"}),
    "clamp": _clamp,
    "where": _where,
    "round": _round,
    "isclose": _isclose,
    "cumsum": _scan,
    "cumprod": _with_zeros(_scan, (0, 1)),
    "softmax": _softmax,
    "log_softmax": _softmax,
    "matmul": _matmul,
    "mm": _mm,
    "bmm": _bmm,
    "dot": _dot,
    "outer": _outer,
    "einsum": _einsum,
    "linear": _linear,
    "cat": _cat,
    "stack": _stack,
    "gather": _gather,
    "scatter": _scatter,
    "index_select": _index_select,
    "masked_fill": _masked_fill,
    "clone": _copylike,
    "_to_copy": _to_copy,
    "_threshold_backward": _binary_with({}, {"threshold": 0.5}),
    "_gelu_backward": _binary_with({}, {"approximate": "tanh"}),
    "_softmax_backward_data": _softmax_backward_data,
    "_log_softmax_backward_data": _softmax_backward_data,
    "_index": _index,
    "_index_put": _index_put,
    "contiguous_copy": _copylike,
    "sum": _reduction(extra=({}, {"dtype": tp.float64})),
    "prod": _with_zeros(_reduction(extra=({}, {"dtype": tp.float64})), (None, 0, 1, (0, 1))),
    "mean": _reduction(),
    "amax": _reduction(empty_dims=(1,)),
    "_max_all": _whole_reduction,
    "_min_all": _whole_reduction,
    "amin": _reduction(empty_dims=(1,)),
    "var": _reduction(extra=({}, {"unbiased": False}, {"correction": 0}, {"correction": 2})),
    "std": _reduction(extra=({}, {"unbiased": False}, {"correction": 2})),
    "norm": _reduction(
        extra=(
            {},
            {"p": 1},
            {"p": 2},
            {"p": float("inf")},
            {"p": float("-inf")},
            {"p": 0},
            {"p": 3},
        )
    ),
    "logsumexp": _reduction(dims=(0, -1, (0, 1)), empty_dims=(0, 1)),
    "all": _reduction(dims=(None, 0, -1)),
    "any": _reduction(dims=(None, 0, -1)),
    "argmax": _dim_reduction,
    "argmin": _dim_reduction,
    "max_dim": _dim_reduction,
    "min_dim": _dim_reduction,
    "clamp_min": _one_bound,
    "clamp_max": _one_bound,
    "addcmul": _addc,
    "addcdiv": _addc,
    "lerp": _lerp,
    "cummax": _cumulative_extreme,
    "cummin": _cumulative_extreme,
    "ger": _outer,
    "index_add": _index_add,
    "index_copy": _index_copy,
    "scatter_reduce": _scatter_reduce,
}
_NAMED.update({name: _views for name in VIEW_SAMPLES})


def has_generic(row) -> bool:
    return (
        row.kind == "pointwise"
        and row.n_inputs in (1, 2)
        and row.name not in _NAMED
        and row.name in REF
    )


def sample_fn(row):
    if row.name in _NAMED:
        return _NAMED[row.name]
    if has_generic(row):
        return _unary_generic if row.n_inputs == 1 else _binary_generic
    return None


def samples(row, dt, seed=0) -> list:
    fn = sample_fn(row)
    if fn is None:
        return []
    rng = np.random.default_rng(seed)
    return list(fn(row, dt, rng))


# ---- references -------------------------------------------------------------------------


def _erf(x):
    x = np.asarray(x, dtype=np.float64)
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x)).astype(np.float64)


def _python_semantics(op):
    """Elementwise Python ``op`` (floor semantics of // and %), exact for integers."""

    def ref(a, b):
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        exact = a.dtype.kind in "iub" and b.dtype.kind in "iub"
        kind = object if exact else np.float64
        out = np.frompyfunc(op, 2, 1)(a.astype(kind), b.astype(kind))
        return np.asarray(out).astype(np.int64 if exact else np.float64)

    return ref


_py_floordiv = _python_semantics(operator.floordiv)
_py_mod = _python_semantics(operator.mod)


def _trunc_div(a, b):
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
        return np.where((a < 0) != (b < 0), -q, q)
    return np.trunc(a / b)


def _div(a, b, rounding_mode=None):
    if rounding_mode is None:
        return np.true_divide(np.asarray(a, dtype=np.result_type(a, b, np.float64)), b)
    if rounding_mode == "trunc":
        return _trunc_div(a, b)
    return _py_floordiv(a, b)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x, beta=1.0, threshold=20.0):
    z = x * beta
    return np.where(z > threshold, x, np.log1p(np.exp(z)) / beta)


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_backward(g, x, approximate="none"):
    x = _float(x)
    if approximate == "tanh":
        c, k = math.sqrt(2 / math.pi), 0.044715
        t = np.tanh(c * (x + k * x**3))
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x)
    else:
        d = 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return g * d


def _float(x):
    """Integer/bool inputs of float-valued ops compute in float64."""
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind in "biu" else x


def _f1(fn):
    return lambda x: fn(_float(x))


def _axes(x, dim):
    if dim is None or np.ndim(x) == 0:
        return None
    return dim if isinstance(dim, tuple) else (dim,)


def _red(fn):
    def ref(x, dim=None, keepdim=False, dtype=None, **kw):
        x = np.asarray(x)
        if dtype is not None:
            x = x.astype(
                np.complex128
                if dtype.is_complex
                else np.float64
                if dtype.category == 2
                else np.int64
            )
        elif x.dtype.kind == "b":
            x = x.astype(np.int64)
        return fn(x, axis=_axes(x, dim), keepdims=keepdim, **kw)

    return ref


def _var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    ddof = correction if correction is not None else (0 if unbiased is False else 1)
    x = _float(x)
    axes = _axes(x, dim)
    n = x.size if axes is None else math.prod(x.shape[a] for a in axes)
    mean = np.mean(x, axis=axes, keepdims=True) if x.size else np.zeros((1,) * x.ndim)
    ss = np.sum(np.abs(x - mean) ** 2, axis=axes, keepdims=keepdim)
    with np.errstate(all="ignore"):
        return ss / max(n - ddof, 0)


def _norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    a = np.abs(_float(x))
    axes = _axes(x, dim)
    if p in ("fro", 2):
        return np.sqrt(np.sum(a * a, axis=axes, keepdims=keepdim))
    if p == float("inf"):
        return np.max(a, axis=axes, keepdims=keepdim)
    if p == float("-inf"):
        return np.min(a, axis=axes, keepdims=keepdim)
    if p == 0:
        return np.sum(a != 0, axis=axes, keepdims=keepdim).astype(np.float64)
    return np.sum(a**p, axis=axes, keepdims=keepdim) ** (1.0 / p)


def _logsumexp(x, dim, keepdim=False):
    x = _float(x)
    axes = _axes(x, dim)
    if x.size == 0:
        return np.full(np.sum(x, axis=axes, keepdims=keepdim).shape, -np.inf)
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    r = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return r if keepdim else np.squeeze(r, axis=axes)


def _arg(fn):
    def ref(x, dim=None, keepdim=False):
        x = np.asarray(x)
        if dim is None:
            r = fn(x.reshape(-1))
            return np.reshape(r, (1,) * x.ndim) if keepdim else np.asarray(r)
        if x.ndim == 0:
            return np.asarray(0)
        return fn(x, axis=dim, keepdims=keepdim)

    return ref


def _minmax_dim(fn):
    argfn = np.argmax if fn is np.max else np.argmin

    def ref(x, dim, keepdim=False):
        x = np.asarray(x)
        if x.ndim == 0:
            return x.copy(), np.asarray(0)
        return fn(x, axis=dim, keepdims=keepdim), argfn(x, axis=dim, keepdims=keepdim)

    return ref


def _scan_ref(fn):
    def ref(x, dim, dtype=None):
        x = np.asarray(x)
        if dtype is not None:
            x = x.astype(np.float64)
        elif x.dtype.kind == "b":
            x = x.astype(np.int64)
        return fn(x, axis=dim) if x.ndim else x.copy()

    return ref


def _softmax_ref(x, dim, dtype=None):
    x = _float(x)
    if dtype is not None and x.dtype.kind == "c":  # torch converts the input to dtype first
        x = x.real
    if x.ndim == 0:
        return np.ones_like(x)
    if x.size == 0:
        return x
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def _log_softmax_ref(x, dim, dtype=None):
    x = _float(x)
    if dtype is not None and x.dtype.kind == "c":  # torch converts the input to dtype first
        x = x.real
    if x.ndim == 0:
        return np.zeros_like(x)
    if x.size == 0:
        return x
    return x - _logsumexp(x, dim, keepdim=True)


def _clamp_ref(x, min=None, max=None):  # noqa: A002
    if min is not None:
        x = np.maximum(x, min)
    if max is not None:
        x = np.minimum(x, max)
    return x


def _round_ref(x, decimals=0):
    x = np.asarray(x)
    return np.round(x, decimals) if x.dtype.kind in "fc" else x  # numpy rounds half to even too


def _cat_ref(tensors, dim=0):
    arrays = [a for a in tensors if a.shape != (0,)] or tensors[:1]
    return np.concatenate(arrays, axis=dim)


def _gather_ref(x, dim, idx):
    src = x[
        tuple(slice(0, n) if i != dim % x.ndim else slice(None) for i, n in enumerate(idx.shape))
    ]
    return np.take_along_axis(src, idx, axis=dim)


def _scatter_ref(x, dim, idx, src=None, *, value=None, reduce=None):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim % x.ndim] = idx[pos]
        v = value if src is None else src[pos]
        if reduce == "add":
            out[tuple(tgt)] += v
        elif reduce == "multiply":
            out[tuple(tgt)] *= v
        else:
            out[tuple(tgt)] = v
    return out


def _masked_fill_ref(x, mask, value):
    return np.where(mask, value, x)


def _views_ref(name):
    def ref(x, *args):
        return VIEW_REF[name](x, *args)

    return ref


def _shape_args(args):
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def _movedim(x, s, d):
    return np.moveaxis(x, s, d)


def _split_ref(x, size, dim=0):
    n = x.shape[dim]
    if isinstance(size, int):
        cuts = list(range(size, n, size))
    else:
        cuts = list(np.cumsum(size)[:-1])
    return tuple(np.split(x, cuts, axis=dim))


def _chunk_ref(x, chunks, dim=0):
    n = x.shape[dim]
    step = max(-(-n // chunks), 1)
    return _split_ref(x, step, dim)


def _as_strided_ref(x, size, stride, storage_offset=None):
    flat = x.reshape(-1)
    off = 0 if storage_offset is None else storage_offset
    st = tuple(s * flat.itemsize for s in stride)
    return np.lib.stride_tricks.as_strided(flat[off:], size, st).copy()


def _squeeze_ref(x, dim=None):
    if dim is None:
        return np.squeeze(x)
    dims = (dim,) if isinstance(dim, int) else dim
    return np.squeeze(x, axis=tuple(d for d in dims if x.shape[d] == 1))


def _unflatten_ref(x, dim, sizes):
    sizes = list(sizes)
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[dim] // -math.prod(sizes)
    return x.reshape(x.shape[:dim] + tuple(sizes) + x.shape[dim + 1 :])


def _flatten_ref(x, start=0, end=-1):
    if x.ndim == 0:
        return x.reshape(1)
    end %= x.ndim
    return x.reshape(x.shape[:start] + (-1,) + x.shape[end + 1 :])


VIEW_REF = {
    "view": lambda x, *s: x.reshape(_shape_args(s)),
    "reshape": lambda x, *s: x.reshape(_shape_args(s)),
    "permute": lambda x, *d: np.transpose(x, _shape_args(d) or None),
    "transpose": lambda x, a, b: np.swapaxes(x, a, b) if x.ndim else x,
    "t": lambda x: x.T,
    "expand": lambda x, *s: np.broadcast_to(
        x,
        tuple(
            n if n != -1 else x.shape[i - (len(_shape_args(s)) - x.ndim)]
            for i, n in enumerate(_shape_args(s))
        ),
    ),
    "expand_as": lambda x, o: np.broadcast_to(x, o.shape),
    "squeeze": _squeeze_ref,
    "unsqueeze": lambda x, d: np.expand_dims(x, d),
    "flatten": _flatten_ref,
    "unflatten": _unflatten_ref,
    "narrow": lambda x, d, s, n: np.take(x, range(s % x.shape[d], s % x.shape[d] + n), axis=d),
    "select": lambda x, d, i: np.take(x, i, axis=d),
    "as_strided": _as_strided_ref,
    "movedim": _movedim,
    "diagonal": lambda x, o=0, a=0, b=1: np.diagonal(x, o, a, b),
    "unbind": lambda x, d=0: tuple(np.moveaxis(x, d, 0)),
    "split": _split_ref,
    "chunk": _chunk_ref,
}


def _index_put_ref(x, v, indices, accumulate=False):
    out = np.array(x, copy=True)
    if accumulate:
        np.add.at(out, indices, v)
    else:
        out[indices] = v
    return out


def _cumulative_extreme_ref(later_wins):
    """torch's loop: a NaN always takes over; otherwise an element takes over when it
    ``later_wins`` against the running value (a tie moves the index along)."""

    def ref(x, dim):
        x = np.asarray(x)
        if x.ndim == 0:
            return x.copy(), np.zeros((), np.int64)
        moved = np.moveaxis(x, dim, -1)
        values, indices = moved.copy(), np.zeros(moved.shape, np.int64)
        for pos in np.ndindex(*moved.shape[:-1]):
            best, at = None, 0
            for k, v in enumerate(moved[pos]):
                if best is None or v != v or (best == best and later_wins(v, best)):
                    best, at = v, k
                values[pos + (k,)], indices[pos + (k,)] = best, at
        return np.moveaxis(values, -1, dim), np.moveaxis(indices, -1, dim)

    return ref


def _slices(x, dim, idx, src):
    """(x as at least 1-d, copied; the wrapped dim; the index as a list; src as at least
    1-d): index_add/index_copy read a 0-d tensor as 1-d."""
    out = np.array(x, copy=True).reshape(np.shape(x) or (1,))
    src = np.asarray(src).reshape(np.shape(src) or (1,))
    return out, dim % out.ndim, np.asarray(idx).reshape(-1).tolist(), src


def _index_add_ref(x, dim, idx, src, alpha=1):
    out, d, idx, src = _slices(x, dim, idx, src)
    for j, i in enumerate(idx):
        at = (slice(None),) * d + (i,)
        part = np.take(src, j, axis=d)
        if out.dtype == bool:
            out[at] = out[at] | (part & bool(alpha))
        else:
            out[at] = out[at] + alpha * part
    return out.reshape(np.shape(x))


def _index_copy_ref(x, dim, idx, src):
    out, d, idx, src = _slices(x, dim, idx, src)
    for j, i in enumerate(idx):
        out[(slice(None),) * d + (i,)] = np.take(src, j, axis=d)
    return out.reshape(np.shape(x))


def _scatter_reduce_ref(x, dim, idx, src, reduce, include_self=True):
    out = np.array(x, copy=True).reshape(np.shape(x) or (1,))
    src = np.asarray(src).reshape(np.shape(src) or (1,))
    idx = np.asarray(idx).reshape(np.shape(idx) or (1,))
    slots = {}  # written position -> the values reduced there
    for pos in np.ndindex(*idx.shape):
        at = list(pos)
        at[dim % out.ndim] = idx[pos]
        slots.setdefault(tuple(at), [out[tuple(at)]] if include_self else []).append(src[pos])
    for at, vals in slots.items():
        vals = np.array(vals)
        if reduce == "sum":
            r = vals.any() if vals.dtype == bool else vals.sum()
        elif reduce == "prod":
            r = vals.all() if vals.dtype == bool else vals.prod()
        elif reduce == "mean":
            total = vals.sum()
            r = total // len(vals) if vals.dtype.kind in "iu" else total / len(vals)  # floor
        else:
            r = (np.max if reduce == "amax" else np.min)(vals)  # NaN propagates
        out[at] = r
    return out.reshape(np.shape(x))


REF = {
    "_to_copy": lambda x, dtype: np.asarray(x).astype(dtype.np),
    "_softmax_backward_data": lambda g, out, dim: out * (g - (g * out).sum(dim, keepdims=True)),
    "_log_softmax_backward_data": lambda g, out, dim: g - np.exp(out) * g.sum(dim, keepdims=True),
    "_threshold_backward": lambda g, x, threshold=0: np.where(
        np.asarray(x) <= threshold, np.zeros((), np.result_type(g, x)), g
    ),
    "_gelu_backward": _gelu_backward,
    "_index": lambda x, indices: x[indices],
    "_index_put": _index_put_ref,
    "add": lambda a, b, alpha=1: np.add(a, b) if alpha == 1 else a + np.multiply(b, alpha),
    "sub": lambda a, b, alpha=1: np.subtract(a, b) if alpha == 1 else a - np.multiply(b, alpha),
    "mul": np.multiply,
    "div": _div,
    "floor_divide": _py_floordiv,
    "remainder": _py_mod,
    "pow": lambda a, b: np.power(a, b),
    "atan2": lambda a, b: np.arctan2(_float(a), _float(b)),
    "minimum": np.minimum,
    "maximum": np.maximum,
    "neg": np.negative,
    "conj": np.conj,
    "abs": np.abs,
    "sign": lambda x: np.sign(x) if np.asarray(x).dtype.kind != "b" else x,
    "reciprocal": _f1(lambda x: 1 / x),
    "sqrt": _f1(np.sqrt),
    "rsqrt": _f1(lambda x: 1 / np.sqrt(x)),
    "square": lambda x: np.square(
        np.asarray(x).astype(np.int64) if np.asarray(x).dtype.kind == "b" else x
    ),
    "exp": _f1(np.exp),
    "exp2": _f1(np.exp2),
    "expm1": _f1(np.expm1),
    "log": _f1(np.log),
    "log2": _f1(np.log2),
    "log10": _f1(np.log10),
    "log1p": _f1(np.log1p),
    "sin": _f1(np.sin),
    "cos": _f1(np.cos),
    "tan": _f1(np.tan),
    "asin": _f1(np.arcsin),
    "acos": _f1(np.arccos),
    "atan": _f1(np.arctan),
    "sinh": _f1(np.sinh),
    "cosh": _f1(np.cosh),
    "tanh": _f1(np.tanh),
    "sigmoid": _f1(_sigmoid),
    "erf": _f1(_erf),
    "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu,
    "silu": lambda x: x * _sigmoid(x),
    "softplus": _softplus,
    "leaky_relu": lambda x, negative_slope=0.01: np.where(x > 0, x, x * negative_slope),
    "clamp": _clamp_ref,
    "where": lambda c, a, b: np.where(c, a, b),
    "floor": lambda x: np.floor(x) if np.asarray(x).dtype.kind == "f" else x,
    "ceil": lambda x: np.ceil(x) if np.asarray(x).dtype.kind == "f" else x,
    "trunc": lambda x: np.trunc(x) if np.asarray(x).dtype.kind == "f" else x,
    "round": _round_ref,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "logical_not": np.logical_not,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.invert,
    "isclose": lambda a, b, rtol=1e-05, atol=1e-08, equal_nan=False: np.isclose(
        a, b, rtol=rtol, atol=atol, equal_nan=equal_nan
    ),
    "sum": _red(np.sum),
    "mean": _red(np.mean),
    "prod": _red(np.prod),
    "amax": _red(np.max),
    "_max_all": _red(np.max),
    "_min_all": _red(np.min),
    "amin": _red(np.min),
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
    "var": _var,
    "std": lambda *a, **k: np.sqrt(_var(*a, **k)),
    "norm": _norm,
    "logsumexp": _logsumexp,
    "all": _red(np.all),
    "any": _red(np.any),
    "max_dim": _minmax_dim(np.max),
    "min_dim": _minmax_dim(np.min),
    "cumsum": _scan_ref(np.cumsum),
    "cumprod": _scan_ref(np.cumprod),
    "softmax": _softmax_ref,
    "log_softmax": _log_softmax_ref,
    "matmul": np.matmul,
    "mm": np.matmul,
    "bmm": np.matmul,
    "dot": np.dot,
    "outer": np.multiply.outer,
    "einsum": lambda eq, *ops: np.einsum(eq, *ops),
    "linear": _linear_ref,
    "cat": _cat_ref,
    "stack": lambda ts, dim=0: np.stack(ts, axis=dim),
    "gather": _gather_ref,
    "scatter": _scatter_ref,
    "index_select": lambda x, d, i: np.take(x, i, axis=d) if x.ndim else x.copy(),
    "masked_fill": _masked_fill_ref,
    "clone": lambda x, memory_format=None: np.array(x),
    "contiguous_copy": lambda x: np.array(x),
    "clamp_min": np.maximum,
    "clamp_max": np.minimum,
    "addcmul": lambda a, b, c, value=1: a + value * b * c,
    "addcdiv": lambda a, b, c, value=1: a + value * b / c,
    "lerp": lambda a, b, w: a + w * (b - a),
    "real": np.real,
    "imag": np.imag,
    "cummax": _cumulative_extreme_ref(operator.ge),
    "cummin": _cumulative_extreme_ref(operator.le),
    "ger": np.multiply.outer,
    "index_add": _index_add_ref,
    "index_copy": _index_copy_ref,
    "scatter_reduce": _scatter_reduce_ref,
}
REF.update({name: _views_ref(name) for name in VIEW_REF})


def reference(row, sample):
    args = to_ref(sample.args)
    with np.errstate(all="ignore"):
        return REF[row.name](*args, **sample.kwargs)


# ---- comparison ---------------------------------------------------------------------------


def assert_close(actual: tp.Tensor, expected, *, msg="") -> None:
    """``actual`` equals the reference after rounding it to ``actual``'s dtype."""
    dt = actual.dtype
    exp = np.asarray(expected)
    assert tuple(actual.shape) == exp.shape, f"{msg}: shape {tuple(actual.shape)} != {exp.shape}"
    got = np.asarray(actual)
    if dt.category <= 1:
        with np.errstate(all="ignore"):
            want = exp.astype(dt.np) if exp.dtype.kind != "f" else exp.astype(np.float64)
        if exp.dtype.kind == "f":  # integer result of a float reference: must be exact
            np.testing.assert_array_equal(got.astype(np.float64), want, err_msg=msg)
        else:
            np.testing.assert_array_equal(got, want, err_msg=msg)
        return
    rtol, atol = TOL[dt]
    with np.errstate(all="ignore"):
        want = exp.astype(dt.np)  # overflow to inf in the result dtype is expected
    wide = np.complex128 if dt.is_complex else np.float64
    np.testing.assert_allclose(
        got.astype(wide), want.astype(wide), rtol=rtol, atol=atol, equal_nan=True, err_msg=msg
    )


def to_device(x, device: str):
    """``x`` (a sample argument) with every tensor moved to ``device``, layout kept.

    A non-contiguous CPU tensor is rebuilt on the device as the same strided view of a
    copy of its base storage, so CUDA runs see the same strides as the CPU runs.
    """
    if isinstance(x, tp.Tensor):
        if x.is_contiguous():
            return x.to(device)
        span = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride())) if x.numel() else 0
        base = tp.empty(0, dtype=x.dtype).set_(x.untyped_storage(), x.storage_offset(), (span,))
        return base.to(device).as_strided(tuple(x.shape), x.stride(), 0)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(y, device) for y in x)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


def to_meta(x):
    if isinstance(x, tp.Tensor):
        return x.to("meta")
    if isinstance(x, list):
        return [to_meta(y) for y in x]
    return x


# ---- families whose samples live in their own module (imported last: they use the helpers
# above through ``import optable_samples``) -------------------------------------------------

import optable_samples_convolution  # noqa: E402
import optable_samples_sorting  # noqa: E402

for _family in (optable_samples_sorting, optable_samples_convolution):
    _NAMED.update(_family.NAMED)
    REF.update(_family.REF)
