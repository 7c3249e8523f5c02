"""The lowering registry: every op the compiler fuses, keyed by its op-table row's name.

One entry per op (``@lowering("add")`` on its formula) says everything the compiler knows
about it: how many operands it takes (the formula's parameters after ``k`` and ``op``),
what its arguments must be for it to lower (``float_only``, ``check``, bool compute),
how to build its scalar expression in TVM (the formula) and how large that expression
grows (``copies``). The partitioner (``_pointwise``) derives which nodes it can fuse
from this registry and the TVM lowering (``_tvm_lower``) calls the formulas; neither
keeps a list of its own.

Every pointwise row of core's op table (``tensorplay._extension.OPS``) either has an
entry here or a reason in ``NOT_LOWERED``; tests/compile/test_lowerings.py fails on a row
that has neither, so a new row is lowered (or not) by decision, never by omission. To
lower an op: write its formula here, remove it from ``NOT_LOWERED`` and add its calls to
the value test (compiled against eager) in that file.

A formula is ``formula(k, op, *operands)``: ``k`` is a ``Tir`` (TVM's ``te``/``tirx``,
the fast-math formulas, the compute dtype), ``op`` the ``PointwiseOp`` (its ``params``:
``alpha``, ``approximate``, ...), and each operand a thunk: ``x()`` builds a fresh copy
of that operand's expression, already in the compute dtype (``None`` for an omitted
optional operand, such as clamp's ``max``).

NOTE: operands are thunks, not expressions: TIR forbids one ``Let`` variable being
defined twice, so an operand a formula reads twice (``maximum``'s NaN checks) must be
built twice (fast math binds its argument with ``Let``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tensorplay.compiler._fastmath import FastMath
from tensorplay.graph._graph import Node

__all__ = ["LOWERINGS", "NOT_LOWERED", "Lowering", "Tir", "find", "lowering"]


@dataclasses.dataclass(frozen=True)
class Lowering:
    """How the op-table row ``name`` lowers.

    ``arity``: its leading parameters that are operands (tensors or Python numbers); the
    rest are ``op.params``. ``float_only``: lowered only when the result is a float
    dtype. ``compare``: computes in its inputs' promoted dtype and returns bool.
    ``bool_compute``: may compute in bool (comparisons always may). ``bool_operands``:
    operand positions read as bool whatever the compute dtype (``where``'s condition).
    ``check(params)``: why these parameters are not lowered, or ``""``. ``copies``: how
    many copies of each operand its expression holds once TVM has expanded it, its direct
    reads (a NaN-aware max reads x three times) and, with fast math, the uses of a
    ``Let``-bound argument, which TVM's lowering expands; the partitioner bounds region
    size with it. ``spellings``: other names captured nodes use for it (the cast methods).
    """

    name: str
    formula: Callable[..., Any]
    arity: int
    float_only: bool = False
    compare: bool = False
    bool_compute: bool = False
    bool_operands: tuple[int, ...] = ()
    check: Callable[[dict], str] | None = None
    copies: int = 1
    spellings: tuple[str, ...] = ()

    def refuses(self, params: dict) -> str:
        """Why ``params`` are not lowered, or ``""``."""
        return self.check(params) if self.check is not None else ""


LOWERINGS: dict[str, Lowering] = {}
_SPELLINGS: dict[str, Lowering] = {}


def lowering(name: str, **flags: Any) -> Callable:
    """Decorator registering a formula as the lowering of op-table row ``name``."""

    def register(formula: Callable) -> Callable:
        if name in LOWERINGS:
            raise ValueError(f"op {name!r} already has a lowering")
        params = list(inspect.signature(formula).parameters.values())[2:]  # after k, op
        arity = sum(p.default is p.empty for p in params)
        entry = Lowering(name, formula, arity, **flags)
        LOWERINGS[name] = entry
        for spelling in (name, *entry.spellings):
            _SPELLINGS[spelling] = entry
        return formula

    return register


def find(name: str) -> Lowering | None:
    """The lowering a node calling ``name`` (an op or one of its spellings) uses, or None."""
    return _SPELLINGS.get(name)


class Tir:
    """What a formula builds with: TVM's ``te``/``tirx``, the float32 fast-math formulas
    (``fast``: use them) and ``dtype``, the dtype the op computes in."""

    def __init__(self, tvm: ModuleType, fm: FastMath, dtype: str, *, fast: bool) -> None:
        self.te, self.tirx, self.fm = tvm.te, tvm.tirx, fm
        self.dtype = dtype
        self.is_float = dtype.startswith("float")
        self.fast = fast

    def const(self, v: float) -> Any:
        """``v`` in the compute dtype."""
        return self.tirx.const(v, self.dtype)

    def exp(self, x: Any) -> Any:
        return self.fm.exp(x) if self.fast else self.te.exp(x)

    def tanh(self, x: Any) -> Any:
        if self.fast:
            return self.fm.tanh(x)
        # TVM expands float64 tanh through exp, which gives 0 for tiny |x| (and then
        # sqrt(tanh(-1e-38)) is 0, not nan); tanh(x) rounds to x itself for |x| < 1e-8 in
        # float32 and float64 (the next term, x**3/3, is below half an ulp of x)
        return self.tirx.Select(self.te.abs(x) < self.const(1e-8), x, self.te.tanh(x))

    def erf(self, x: Any) -> Any:
        return self.fm.erf(x) if self.fast else self.te.erf(x)

    def sigmoid(self, x: Any) -> Any:
        if self.fast:
            return self.fm.sigmoid(x)
        return self.const(1.0) / (self.const(1.0) + self.te.exp(-x))

    def not_equal(self, x: Callable, y: Callable) -> Any:
        """``x != y``, true where either is NaN as in numpy.

        NOTE: TIR's ``!=`` on floats is LLVM's ordered compare, false for NaN, and TVM's
        simplifier turns ``not (x == y)`` back into it, hence the explicit NaN checks.
        """
        tirx = self.tirx
        differ = tirx.NE(x(), y())
        if not self.is_float:
            return differ
        return tirx.Or(differ, tirx.Or(tirx.isnan(x()), tirx.isnan(y())))

    def nan_aware(self, pick: Callable, x: Callable, y: Callable) -> Any:
        """``pick(x, y)`` (max or min) propagating NaN as numpy's maximum/minimum do;
        LLVM's maxnum/minnum drop it."""
        if not self.is_float:
            return pick(x(), y())
        isnan, select = self.tirx.isnan, self.tirx.Select
        return select(isnan(x()), x(), select(isnan(y()), y(), pick(x(), y())))


# ---- arithmetic ---------------------------------------------------------------------------


def _alpha_times(k: Tir, op: Any, y: Callable) -> Any:
    alpha = op.params.get("alpha", 1)
    return y() if alpha == 1 else y() * k.const(alpha)


@lowering("add")
def _add(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    other = _alpha_times(k, op, y)
    return x() + other


@lowering("sub")
def _sub(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    other = _alpha_times(k, op, y)
    return x() - other


@lowering("mul")
def _mul(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return x() * y()


def _true_division(params: dict) -> str:
    if params.get("rounding_mode") is not None:
        return "div(rounding_mode=...) is not lowered"
    return ""


@lowering("div", check=_true_division)
def _div(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return x() / y()


@lowering("pow", float_only=True)
def _pow(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.te.power(x(), y())


@lowering("maximum", bool_compute=True, copies=3)
def _maximum(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.nan_aware(k.te.max, x, y)


@lowering("minimum", bool_compute=True, copies=3)
def _minimum(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.nan_aware(k.te.min, x, y)


@lowering("neg")
def _neg(k: Tir, op: Any, x: Callable) -> Any:
    return -x()


@lowering("abs")
def _abs(k: Tir, op: Any, x: Callable) -> Any:
    return k.te.abs(x())


@lowering("square", copies=2)
def _square(k: Tir, op: Any, x: Callable) -> Any:
    return x() * x()


@lowering("sqrt", float_only=True)
def _sqrt(k: Tir, op: Any, x: Callable) -> Any:
    return k.te.sqrt(x())


@lowering("rsqrt", float_only=True)
def _rsqrt(k: Tir, op: Any, x: Callable) -> Any:
    return k.const(1.0) / k.te.sqrt(x())


@lowering("reciprocal", float_only=True)
def _reciprocal(k: Tir, op: Any, x: Callable) -> Any:
    return k.const(1.0) / x()


# ---- transcendental and activations ---------------------------------------------------------


@lowering("exp", float_only=True, copies=8)
def _exp(k: Tir, op: Any, x: Callable) -> Any:
    return k.exp(x())


@lowering("log", float_only=True)
def _log(k: Tir, op: Any, x: Callable) -> Any:
    return k.te.log(x())


@lowering("sin", float_only=True)
def _sin(k: Tir, op: Any, x: Callable) -> Any:
    return k.te.sin(x())


@lowering("cos", float_only=True)
def _cos(k: Tir, op: Any, x: Callable) -> Any:
    return k.te.cos(x())


@lowering("tanh", float_only=True, copies=8)
def _tanh(k: Tir, op: Any, x: Callable) -> Any:
    return k.tanh(x())


@lowering("sigmoid", float_only=True, copies=8)
def _sigmoid(k: Tir, op: Any, x: Callable) -> Any:
    return k.sigmoid(x())


@lowering("relu", copies=3)
def _relu(k: Tir, op: Any, x: Callable) -> Any:
    return k.nan_aware(k.te.max, x, lambda: k.const(0))


@lowering("_threshold_backward")
def _threshold_backward(k: Tir, op: Any, grad: Callable, x: Callable) -> Any:
    # relu's backward: 0 where x <= threshold, else the gradient (a NaN x passes it on)
    threshold = k.const(op.params.get("threshold", 0))
    return k.tirx.Select(x() <= threshold, k.const(0), grad())


@lowering("silu", float_only=True, copies=9)
def _silu(k: Tir, op: Any, x: Callable) -> Any:
    return x() * k.sigmoid(x())


def _gelu_approximation(params: dict) -> str:
    approximate = params.get("approximate", "none")
    return "" if approximate in ("none", "tanh") else f"gelu approximate={approximate!r}"


@lowering("gelu", float_only=True, check=_gelu_approximation, copies=12)
def _gelu(k: Tir, op: Any, x: Callable) -> Any:
    c = k.const
    if op.params.get("approximate", "none") == "tanh":
        inner = c(math.sqrt(2 / math.pi)) * (x() + c(0.044715) * x() * x() * x())
        return c(0.5) * x() * (c(1.0) + k.tanh(inner))
    return c(0.5) * x() * (c(1.0) + k.erf(x() * c(1 / math.sqrt(2))))


# ---- comparisons, selection, casts -----------------------------------------------------------


@lowering("eq", compare=True)
def _eq(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.tirx.EQ(x(), y())


@lowering("ne", compare=True, copies=2)
def _ne(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.not_equal(x, y)


@lowering("lt", compare=True)
def _lt(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.tirx.LT(x(), y())


@lowering("le", compare=True)
def _le(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.tirx.LE(x(), y())


@lowering("gt", compare=True)
def _gt(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.tirx.GT(x(), y())


@lowering("ge", compare=True)
def _ge(k: Tir, op: Any, x: Callable, y: Callable) -> Any:
    return k.tirx.GE(x(), y())


@lowering("where", bool_compute=True, bool_operands=(0,))
def _where(k: Tir, op: Any, condition: Callable, x: Callable, y: Callable) -> Any:
    return k.tirx.Select(condition(), x(), y())


@lowering("clamp", bool_compute=True, copies=3)
def _clamp(k: Tir, op: Any, x: Callable, lo: Callable | None, hi: Callable | None) -> Any:
    te, tirx = k.te, k.tirx
    value = x()
    if lo is not None:
        value = te.max(value, lo())
    if hi is not None:
        value = te.min(value, hi())
    if not k.is_float:
        return value
    # NaN in x or in a tensor bound propagates, as numpy's maximum/minimum do
    for bound, tensor in ((lo, op.operands[1]), (hi, op.operands[2])):
        if bound is not None and isinstance(tensor, Node):
            value = tirx.Select(tirx.isnan(bound()), bound(), value)
    return tirx.Select(tirx.isnan(x()), x(), value)


# The Tensor methods that cast, all of which reach core's _to_copy row
_CAST_METHODS = ("float", "double", "int", "long", "short", "bool", "byte", "char", "half",
                 "bfloat16", "to", "type_as")  # fmt: skip


@lowering("_to_copy", spellings=_CAST_METHODS, copies=2)
def _to_copy(k: Tir, op: Any, x: Callable) -> Any:
    # computed in the source dtype: a cast to bool is a comparison with 0 there
    if op.dtype == "bool" and k.dtype != "bool":
        return k.not_equal(x, lambda: k.const(0))
    return x()


# ---- pointwise rows not lowered, and why -----------------------------------------------------

_NOT_YET = "elementwise, no formula written yet"
_CONTRACTION = "not elementwise: a contraction (a reduction over a shared dim)"
_ALONG_DIM = "not elementwise: each result reads a whole slice along a dim"
_INDEXING = "not elementwise: reads or writes at indices given by another tensor"
_JOIN = "not elementwise: joins tensors along a dim"
_COPY = f"{_NOT_YET} (inside a region a copy is the identity)"

NOT_LOWERED: dict[str, str] = {
    # eager (as torch) gives NaN at x = +-inf, where the product x * exp(-x^2 / 2) is
    # inf * 0; the formula as written in TIR gave +-inf there
    "_gelu_backward": f"{_NOT_YET} (its values at x = +-inf)",
    "clamp_min": _NOT_YET,
    "clamp_max": _NOT_YET,
    "addcmul": f"{_NOT_YET} (value=)",
    "addcdiv": f"{_NOT_YET} (value=)",
    "lerp": _NOT_YET,
    "real": "complex dtypes are not lowered",
    "imag": "complex dtypes are not lowered",
    "floor_divide": f"{_NOT_YET} (floor rounding, integer division by zero)",
    "remainder": f"{_NOT_YET} (the result takes the divisor's sign)",
    "atan2": _NOT_YET,
    "conj": "complex dtypes are not lowered",
    "sign": f"{_NOT_YET} (sign(nan) is 0)",
    "exp2": _NOT_YET,
    "expm1": _NOT_YET,
    "log2": _NOT_YET,
    "log10": _NOT_YET,
    "log1p": _NOT_YET,
    "tan": _NOT_YET,
    "asin": _NOT_YET,
    "acos": _NOT_YET,
    "atan": _NOT_YET,
    "sinh": _NOT_YET,
    "cosh": _NOT_YET,
    "erf": _NOT_YET,
    "softplus": f"{_NOT_YET} (beta, threshold)",
    "leaky_relu": f"{_NOT_YET} (negative_slope)",
    "floor": _NOT_YET,
    "ceil": _NOT_YET,
    "trunc": _NOT_YET,
    "round": f"{_NOT_YET} (half to even, decimals)",
    "isnan": _NOT_YET,
    "isinf": _NOT_YET,
    "isfinite": _NOT_YET,
    "logical_and": _NOT_YET,
    "logical_or": _NOT_YET,
    "logical_xor": _NOT_YET,
    "logical_not": _NOT_YET,
    "bitwise_and": _NOT_YET,
    "bitwise_or": _NOT_YET,
    "bitwise_xor": _NOT_YET,
    "bitwise_not": _NOT_YET,
    "isclose": f"{_NOT_YET} (rtol, atol, equal_nan)",
    "masked_fill": f"{_NOT_YET} (the value may be a 0-d tensor)",
    "cumsum": _ALONG_DIM,
    "cumprod": _ALONG_DIM,
    "softmax": _ALONG_DIM,
    "log_softmax": _ALONG_DIM,
    "matmul": _CONTRACTION,
    "mm": _CONTRACTION,
    "bmm": _CONTRACTION,
    "dot": _CONTRACTION,
    "einsum": _CONTRACTION,
    "outer": "not elementwise: its result's shape is not its inputs' broadcast shape",
    "cat": _JOIN,
    "stack": _JOIN,
    "gather": _INDEXING,
    "scatter": _INDEXING,
    "index_select": _INDEXING,
    "clone": _COPY,
    "contiguous_copy": _COPY,
}
