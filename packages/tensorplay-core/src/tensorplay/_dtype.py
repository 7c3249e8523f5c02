"""dtypes and PyTorch's type-promotion rules.

A ``dtype`` wraps a numpy dtype (bfloat16 comes from ``ml_dtypes``, imported the first
time its numpy type is needed: see ``_LazyNumpyDtype``). Promotion
follows PyTorch: a higher *category* (bool < integer < floating < complex) wins;
within a category dimensioned tensors beat 0-d tensors, which beat Python
scalars (``result_type``).
"""

from __future__ import annotations

import sys
import threading

import numpy as np

__all__ = [
    "dtype",
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
    "complex128",
    "promote_types",
    "get_default_dtype",
    "set_default_dtype",
]

_BOOL, _INT, _FLOAT, _COMPLEX = range(4)


class dtype:
    """A TensorPlay element type (``tp.float32`` ...). Instances are singletons."""

    __slots__ = (
        "name",
        "np",
        "itemsize",
        "is_floating_point",
        "is_complex",
        "is_signed",
        "category",
        "_rank",
    )

    def __init__(self, name: str, np_dtype, category: int, rank: int):
        self.np = np.dtype(np_dtype)
        self._describe(name, self.np.itemsize, category, rank)

    def _describe(self, name: str, itemsize: int, category: int, rank: int) -> None:
        self.name = name
        self.itemsize = itemsize
        self.category = category
        self.is_floating_point = category == _FLOAT
        self.is_complex = category == _COMPLEX
        self.is_signed = name not in ("bool", "uint8")
        self._rank = rank

    def __repr__(self) -> str:
        return f"tensorplay.{self.name}"

    __str__ = __repr__

    def __reduce__(self):
        return (_by_name, (self.name,))

    def to_complex(self) -> dtype:
        return {float64: complex128}.get(self, complex64) if not self.is_complex else self

    def to_real(self) -> dtype:
        return {complex128: float64, complex64: float32}.get(self, self)


class _LazyNumpyDtype(dtype):
    """A dtype whose numpy type comes from ``ml_dtypes``, imported on first use of ``.np``.

    Importing ml_dtypes (its extension registers many types and ufuncs) takes several times
    as long as the rest of ``import tensorplay``; the dtype's name, itemsize,
    category and promotion need none of it. The first ``.np`` imports ml_dtypes, fills the
    base class's slot and turns the instance into a plain ``dtype``, so later reads are the
    same slot read as for every other dtype (hot paths read ``.np`` constantly).
    """

    __slots__ = ()

    def __init__(self, name: str, itemsize: int, category: int, rank: int):
        self._describe(name, itemsize, category, rank)

    @property
    def np(self):
        # Imported here, not at module level: ml_dtypes' import is the slow part (see above).
        import ml_dtypes

        np_dtype = np.dtype(getattr(ml_dtypes, self.name))
        dtype.np.__set__(self, np_dtype)
        _FROM_NP[np_dtype] = self
        # Same layout (no slots of its own), so Python allows the switch; racing threads
        # both store the same values.
        self.__class__ = dtype
        return np_dtype


bool = dtype("bool", np.bool_, _BOOL, 0)  # noqa: A001 - torch's public name
uint8 = dtype("uint8", np.uint8, _INT, 1)
int8 = dtype("int8", np.int8, _INT, 1)
int16 = dtype("int16", np.int16, _INT, 2)
int32 = dtype("int32", np.int32, _INT, 3)
int64 = dtype("int64", np.int64, _INT, 4)
float16 = dtype("float16", np.float16, _FLOAT, 1)
bfloat16 = _LazyNumpyDtype("bfloat16", 2, _FLOAT, 1)
float32 = dtype("float32", np.float32, _FLOAT, 2)
float64 = dtype("float64", np.float64, _FLOAT, 3)
complex64 = dtype("complex64", np.complex64, _COMPLEX, 2)
complex128 = dtype("complex128", np.complex128, _COMPLEX, 3)

ALL = (
    bool,
    uint8,
    int8,
    int16,
    int32,
    int64,
    float16,
    bfloat16,
    float32,
    float64,
    complex64,
    complex128,
)
_NAMES = {d.name: d for d in ALL}
# torch aliases
_NAMES.update(
    half=float16,
    float=float32,
    double=float64,
    long=int64,
    int=int32,
    short=int16,
    cfloat=complex64,
    cdouble=complex128,
)
# Lazy dtypes register themselves when their numpy type is first built.
_FROM_NP = {d.np: d for d in ALL if not isinstance(d, _LazyNumpyDtype)}


def _by_name(name: str) -> dtype:
    return _NAMES[name]


def from_numpy_dtype(np_dtype) -> dtype:
    """The TensorPlay dtype of a numpy dtype; ``TypeError`` for unsupported ones."""
    try:
        return _FROM_NP[np.dtype(np_dtype)]
    except (KeyError, TypeError):
        # An ml_dtypes numpy type exists only once ml_dtypes is imported (by the user, say)
        # and is in ``_FROM_NP`` only once our dtype built it.
        if "ml_dtypes" in sys.modules and any(isinstance(d, _LazyNumpyDtype) for d in ALL):
            for d in ALL:
                d.np  # noqa: B018 - registers a lazy dtype's numpy type
            return from_numpy_dtype(np_dtype)
        raise TypeError(
            f"numpy dtype {np_dtype!r} has no TensorPlay equivalent; supported: "
            f"{', '.join(d.name for d in ALL)}"
        ) from None


def _promote_pair(a: dtype, b: dtype) -> dtype:
    if a is b:
        return a
    if a.category != b.category:
        hi, lo = (a, b) if a.category > b.category else (b, a)
        if hi.is_complex and lo.is_floating_point and lo is float64:
            return complex128
        return hi
    if a.category == _INT:
        if not (a.is_signed and b.is_signed):  # uint8 with a signed type
            signed = a if a.is_signed else b
            return int16 if signed is int8 else signed
        return a if a._rank > b._rank else b
    if a._rank == b._rank:  # float16 vs bfloat16
        return float32
    return a if a._rank > b._rank else b


_PROMOTE = {(a, b): _promote_pair(a, b) for a in ALL for b in ALL}


def promote_types(a: dtype, b: dtype) -> dtype:
    """PyTorch's ``promote_types``: the smallest dtype both can be cast to."""
    return _PROMOTE[a, b]


class _Default(threading.local):
    dtype = float32


_default = _Default()


def get_default_dtype() -> dtype:
    return _default.dtype


def set_default_dtype(d: dtype) -> None:
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError(f"set_default_dtype(): only floating point dtypes are supported, got {d}")
    _default.dtype = d


def scalar_dtype(value) -> dtype:
    """dtype a Python scalar takes when wrapped as a tensor (torch semantics)."""
    t = type(value)
    if t is builtins_bool:
        return bool
    if t is int:
        return int64
    if t is float:
        return _default.dtype
    if t is complex:
        return _default.dtype.to_complex()
    if isinstance(value, np.generic):
        return from_numpy_dtype(value.dtype)
    raise TypeError(f"expected a Python scalar, got {t.__name__}")


def _combine(higher, lower):
    # torch's combine_categories: ``higher`` comes from a stronger participant group.
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return higher.to_complex() if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is bool or lower.is_floating_point:
        return _PROMOTE[higher, lower]
    return higher


def result_type_of(dim_dtypes, zero_dim_dtypes, scalar_dtypes) -> dtype:
    """PyTorch ``result_type`` from the dtypes of the three participant groups."""
    groups = []
    for group in (dim_dtypes, zero_dim_dtypes, scalar_dtypes):
        acc = None
        for d in group:
            acc = d if acc is None else _PROMOTE[acc, d]
        groups.append(acc)
    return _combine(groups[0], _combine(groups[1], groups[2]))


def complex_half(dim_dtypes, zero_dim_dtypes, scalar_dtypes) -> builtins_bool:
    """Would PyTorch's ``result_type`` be complex32 (ComplexHalf), a dtype TensorPlay lacks?

    That happens where float16 wins its group and a complex operand of a weaker group makes
    the result complex (``float16 tensor * 1j``); ``result_type_of`` says complex64 there.
    """
    groups = [None, None, None]
    for i, group in enumerate((dim_dtypes, zero_dim_dtypes, scalar_dtypes)):
        for d in group:
            groups[i] = d if groups[i] is None else _PROMOTE[groups[i], d]

    def half(higher, lower, lower_half):  # is _combine(higher, lower) complex32?
        if higher is None:
            return lower_half
        if lower is None or higher.is_complex or not lower.is_complex:
            return False
        return higher is float16 if higher.is_floating_point else lower_half

    inner = _combine(groups[1], groups[2])
    return half(groups[0], inner, half(groups[1], groups[2], False))


# ---- Python numbers entering a dtype (torch's wrapped numbers) ------------------------------

# The values torch's checked conversion (c10::checked_convert) accepts, per target dtype.
# Unsigned targets take integers down to -max: they wrap (uint8 takes -255..255).
_INT_RANGE = {
    d: (
        -int(np.iinfo(d.np).max) if not d.is_signed else int(np.iinfo(d.np).min),
        int(np.iinfo(d.np).max),
    )
    for d in (uint8, int8, int16, int32, int64)
}
_INF = float("inf")
_FLOAT_MAX = {
    float16: 65504.0,
    bfloat16: float.fromhex("0x1.fep127"),  # ml_dtypes.finfo(bfloat16).max, without the import
    float32: float(np.finfo(np.float32).max),
    float64: float(np.finfo(np.float64).max),
}


def fits(value, dt: dtype, *, rounded: builtins_bool = False) -> builtins_bool:
    """Does the Python number ``value`` convert to ``dt`` without overflow, by PyTorch's rule?

    That rule (c10's ``checked_convert``, behind ``fill_``, ``masked_fill``, ``clamp`` and
    ``where``): nothing overflows bool and a bool overflows nothing; integer targets need the
    value in range (a float is compared before truncation, so NaN and infinities never fit;
    unsigned targets also take negative integers down to -max, which wrap); floating targets
    take NaN, infinities and anything up to the dtype's largest finite value; a complex value
    fits a real dtype only with a zero imaginary part, and a complex dtype part by part.

    ``rounded``: torch's one-element paths (``full``/``fill_`` of one element, a number
    written by indexing) convert to float16/bfloat16 without that check, rounding through
    float32; a value that rounds to the largest finite one fits (65519 -> 65504), one that
    rounds to inf does not (there torch gives inf silently: TensorPlay refuses it).
    """
    if dt is bool or type(value) is builtins_bool:
        return True
    if isinstance(value, np.generic):
        value = value.item()
    if type(value) is complex:
        if not dt.is_complex:
            return value.imag == 0 and fits(value.real, dt, rounded=rounded)
        return fits(value.real, dt.to_real()) and fits(value.imag, dt.to_real())
    if dt.is_complex:
        dt = dt.to_real()
    if rounded and dt in (float16, bfloat16):
        with np.errstate(over="ignore", invalid="ignore"):
            held = np.array(value, np.float64).astype(np.float32).astype(dt.np)
        return not np.isinf(held) or value in (_INF, -_INF)
    if dt.is_floating_point:
        return not abs(value) > _FLOAT_MAX[dt] or value in (_INF, -_INF)  # NaN fits too
    lo, hi = _INT_RANGE[dt]
    return lo <= value <= hi if type(value) is int or dt.is_signed else 0 <= value <= hi


_WIDER = (int16, int32, int64, float32, float64, complex64, complex128)  # what to suggest


def check_int64(op: str, value) -> None:
    """``OverflowError`` for a Python int beyond int64: torch reads every Python int as one."""
    if type(value) is int and not -(2**63) <= value < 2**63:
        raise OverflowError(
            f"{op}(): {value} does not fit in int64, the type a Python int operand takes; "
            f"pass it as a float ({float(value):.6g}) or a tensor"
        )


def check_fits(
    op: str,
    value,
    dt: dtype,
    *,
    factory: builtins_bool = False,
    rounded: builtins_bool = False,
) -> None:
    """``RuntimeError`` naming ``op`` where ``value`` does not fit ``dt`` (see ``fits``, which
    ``rounded`` goes to); ``OverflowError`` for a Python int beyond int64. ``factory``: the
    fix is a ``dtype=`` argument (``full``), not converting a tensor."""
    check_int64(op, value)
    if fits(value, dt, rounded=rounded):
        return
    if type(value) is complex and value.imag != 0 and not dt.is_complex:
        held = "no imaginary part"
    elif dt.is_floating_point or dt.is_complex:
        held = f"finite values up to {_FLOAT_MAX[dt.to_real()]:.6g} in magnitude" + (
            " (and values that round to it)" if rounded and dt.itemsize <= 2 else ""
        )
    elif dt.is_signed:
        held = f"{_INT_RANGE[dt][0]}..{_INT_RANGE[dt][1]}"
    else:
        held = f"0..{_INT_RANGE[dt][1]}, and negative integers down to {_INT_RANGE[dt][0]}, wrapped"
    wider = next((d for d in _WIDER if can_cast(dt, d) and fits(value, d)), complex128)
    raise RuntimeError(
        f"{op}(): value {value!r} cannot be converted to type {dt.name} without overflow "
        f"({dt.name} holds {held}); "
        + (
            f"pass a dtype that holds it, e.g. dtype=tensorplay.{wider.name}"
            if factory
            else f"convert the tensor to a dtype that holds it first, e.g. "
            f".to(tensorplay.{wider.name})"
        )
    )


def scalar_array(value, dt: dtype) -> np.ndarray:
    """``value`` as a 0-d numpy array of ``dt``, converted as torch converts a wrapped number:
    out-of-range integers wrap, floats beyond the dtype's range become infinite, a complex
    number keeps its real part; silently (numpy would warn)."""
    if type(value) is complex and not dt.is_complex:
        value = value != 0 if dt is bool else value.real
    a = np.array(value)
    if a.dtype == dt.np:
        return a
    big = _FLOAT_MAX.get(dt.to_real())
    if big is not None and abs(value) <= big:  # NaN, inf and overflow take the slow branch
        return a.astype(dt.np)
    if big is None and type(value) is not float:  # integers into an integer dtype wrap
        return a.astype(dt.np)
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dt.np)


def can_cast(src: dtype, dst: dtype) -> builtins_bool:
    """torch.can_cast: no category downgrade (complex->float, float->int, int->bool)."""
    return src.category <= dst.category


import builtins as _builtins  # noqa: E402

builtins_bool = _builtins.bool
