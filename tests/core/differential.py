"""Differential testing against PyTorch: one case runs in TensorPlay and in torch, and the
two outcomes must agree.

A ``Case`` is one call (``Call``) whose tensor inputs are ``Arg`` descriptions: numpy values,
exact in the case's dtype, and a view taken of them (transposed, stepped, expanded, offset).
``Arg.build`` makes the same tensor in either framework, so both see identical values,
strides and storage. ``check(case)`` runs both and returns the mismatches, empty when:

- both raise (any exception; the error type is not compared), or
- neither raises, and every result agrees in kind, dtype, shape and values (NaN-aware;
  integers and bools exactly, floats within ``TOL`` of their dtype); view cases also
  compare strides and storage offset; gradient cases compare each leaf's ``.grad`` after
  backward of a random-weighted sum of the outputs.

``DELIBERATE`` lists the differences from torch that TensorPlay keeps on purpose; a
mismatch is accepted only when one of its entries matches it. Nothing else is skipped.

The generators (one per op family, in ``generators.py`` order below) turn ``(op, seed)``
into a case with ``random.Random(seed)`` for structure and ``numpy`` for values.
"""

from __future__ import annotations

import math
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F

import tensorplay as tp

DTYPES = (
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
)
INTS = ("uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPLEX = ("complex64", "complex128")

# numpy holds each dtype's values in: bfloat16 travels as float32 (torch cannot read
# ml_dtypes), every value already rounded to bfloat16, so the conversion is exact
_NATIVE = {name: np.dtype(name) for name in DTYPES if name != "bfloat16"} | {
    "bfloat16": np.dtype(np.float32)
}

# rtol per result dtype; atol is rtol times the largest finite magnitude of torch's result
# (at least 1), so cancellation in sums is not read as a mismatch. float16 and bfloat16
# allow two ulps (torch computes them in float32 and rounds once).
TOL = {
    "float16": 2 * 2.0**-10,
    "bfloat16": 2 * 2.0**-7,
    "float32": 1e-5,
    "complex64": 1e-5,
    "float64": 1e-10,
    "complex128": 1e-10,
}


def lib_dtype(L, name: str):
    return getattr(L, name)


def dtype_name(dt) -> str:
    return str(dt).rsplit(".", 1)[-1]


# ---- inputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dtype:
    """A dtype argument, resolved to ``tp.<name>`` or ``torch.<name>``."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(eq=False)
class Arg:
    """A tensor input: ``base`` values (numpy, exact in ``dtype``) and the view taken of them.

    ``view`` is one of "", "mT" (transpose of the last two dims), "step" (``[..., ::2]``),
    "expand" (a size-1 dim expanded; ``expand_to`` is the shape), "offset" (``[1:]``).
    """

    base: np.ndarray
    dtype: str
    view: str = ""
    expand_to: tuple = ()
    grad: bool = False

    @property
    def shape(self) -> tuple:
        """The shape after the view."""
        s = tuple(self.base.shape)
        if self.view == "mT":
            return s[:-2] + (s[-1], s[-2])
        if self.view == "step":
            return s[:-1] + ((s[-1] + 1) // 2,)
        if self.view == "offset":
            return (s[0] - 1,) + s[1:]
        return self.expand_to if self.view == "expand" else s

    def build(self, L, leaves: list):
        t = L.tensor(self.base)
        if self.dtype == "bfloat16":
            t = t.to(L.bfloat16)
        if self.grad:
            t.requires_grad_(True)
            leaves.append(t)
        if self.view == "mT":
            t = t.transpose(-1, -2)
        elif self.view == "step":
            t = t[..., ::2]
        elif self.view == "expand":
            t = t.expand(*self.expand_to)
        elif self.view == "offset":
            t = t[1:]
        return t

    def __repr__(self) -> str:
        shape = tuple(self.base.shape)
        if self.dtype in ("bool", *INTS) and self.base.size <= 12 and not self.view:
            body = f"tensor({self.base.tolist()}, dtype={self.dtype})"
        else:
            body = f"{self.dtype}{list(shape)}"
        suffix = {
            "": "",
            "mT": ".mT",
            "step": "[..., ::2]",
            "expand": f".expand{self.expand_to}",
            "offset": "[1:]",
        }[self.view]
        return body + suffix + (".requires_grad_()" if self.grad else "")


def build(x, L, leaves: list):
    """``x`` with every ``Arg`` and ``Dtype`` in it made in framework ``L``."""
    if isinstance(x, Arg):
        return x.build(L, leaves)
    if isinstance(x, Dtype):
        return lib_dtype(L, x.name)
    if isinstance(x, tuple):
        return tuple(build(y, L, leaves) for y in x)
    if isinstance(x, list):
        return [build(y, L, leaves) for y in x]
    if isinstance(x, dict):
        return {k: build(v, L, leaves) for k, v in x.items()}
    return x


def show(x) -> str:
    """An argument as it would be written in a reproducer."""
    if isinstance(x, slice):
        parts = ["" if p is None else str(p) for p in (x.start, x.stop, x.step)]
        return ":".join(parts[:2]) + (f":{parts[2]}" if x.step is not None else "")
    if x is Ellipsis:
        return "..."
    if isinstance(x, tuple):
        return "(" + ", ".join(show(y) for y in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, list):
        return "[" + ", ".join(show(y) for y in x) + "]"
    if isinstance(x, float) and not math.isfinite(x):
        return f"float('{x}')"
    return repr(x)


# ---- calls --------------------------------------------------------------------------------

# torch has these only in torch.nn.functional (TensorPlay has them as tp.<name>)
_TORCH_FUNCTIONAL = {
    "gelu": F.gelu,
    "silu": F.silu,
    "softplus": F.softplus,
    "leaky_relu": F.leaky_relu,
}
_SYMBOLS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "matmul": "@",
    "and_": "&",
    "or_": "|",
    "xor": "^",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "neg": "-",
    "invert": "~",
    "abs": "abs",
}


def function(L, name: str) -> Callable:
    if L is torch and name in _TORCH_FUNCTIONAL:
        return _TORCH_FUNCTIONAL[name]
    return getattr(L, name)


@dataclass
class Call:
    """How the op is invoked. ``form``:

    fn        ``L.name(*args, **kwargs)``
    method    ``args[0].name(*args[1:], **kwargs)``
    inplace   ``args[0].clone().name_(*args[1:], **kwargs)`` (the result is the clone)
    attr      ``args[0].name`` (``T``, ``mT``)
    operator  ``args[0] <op> args[1]`` (``name`` from the ``operator`` module)
    ioperator ``y = args[0].clone(); y <op>= args[1]``
    getitem   ``args[0][args[1]]``
    setitem   ``y = args[0].clone(); y[args[1]] = args[2]``
    scenario  ``fn(L, *args)``: a few statements written once for both frameworks

    ``post``, when set, is applied to the result in both frameworks: "zeros_like" compares
    only dtype and shape (random factories), "sum" a permutation's total.
    """

    form: str
    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    post: str = ""
    fn: Callable | None = None

    def run(self, L, leaves: list):
        a = build(self.args, L, leaves)
        k = build(self.kwargs, L, leaves)
        if self.form == "fn":
            out = function(L, self.name)(*a, **k)
        elif self.form == "method":
            out = getattr(a[0], self.name)(*a[1:], **k)
        elif self.form == "inplace":
            out = a[0].clone()
            getattr(out, self.name + "_")(*a[1:], **k)
        elif self.form == "attr":
            out = getattr(a[0], self.name)
        elif self.form == "operator":
            out = getattr(operator, self.name)(*a)
        elif self.form == "ioperator":
            out = a[0].clone()
            out = getattr(operator, "i" + self.name.rstrip("_"))(out, a[1])
        elif self.form == "getitem":
            out = a[0][a[1]]
        elif self.form == "setitem":
            out = a[0].clone()
            out[a[1]] = a[2]
        elif self.form == "scenario":
            out = self.fn(L, *a)
        else:
            raise AssertionError(f"unknown call form {self.form!r}")
        if self.post:
            out = getattr(L, self.post)(out)
        return out

    def __repr__(self) -> str:
        a = [show(x) for x in self.args]
        kw = [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        if self.form in ("fn", "scenario"):
            text = f"{self.name}({', '.join(a + kw)})"
        elif self.form == "method":
            text = f"{a[0]}.{self.name}({', '.join(a[1:] + kw)})"
        elif self.form == "inplace":
            text = f"{a[0]}.clone().{self.name}_({', '.join(a[1:] + kw)})"
        elif self.form == "attr":
            text = f"{a[0]}.{self.name}"
        elif self.form == "operator" and len(a) == 1:
            text = f"{_SYMBOLS[self.name]}({a[0]})"
        elif self.form == "operator":
            text = f"{a[0]} {_SYMBOLS[self.name]} {a[1]}"
        elif self.form == "ioperator":
            text = f"y = {a[0]}.clone(); y {_SYMBOLS[self.name]}= {a[1]}"
        elif self.form == "getitem":
            idx = a[1][1:-1].rstrip(",") if isinstance(self.args[1], tuple) else a[1]
            text = f"{a[0]}[{idx}]"
        else:
            idx = a[1][1:-1].rstrip(",") if isinstance(self.args[1], tuple) else a[1]
            text = f"y = {a[0]}.clone(); y[{idx}] = {a[2]}"
        return f"{self.post}({text})" if self.post else text


@dataclass
class Case:
    family: str
    op: str
    seed: int
    call: Call
    grad: bool = False  # compare .grad of the float64 leaves after backward
    strides: bool = False  # compare stride() and storage_offset() (view ops)

    @property
    def id(self) -> str:
        return f"{self.family}-{self.op}-{self.seed}"

    def __repr__(self) -> str:
        return f"{self.id}: {self.call!r}" + ("  [grad]" if self.grad else "")


# ---- running and comparing ---------------------------------------------------------------


@dataclass
class Outcome:
    error: BaseException | None = None
    result: object = None
    grads: list = field(default_factory=list)


def _outputs(result) -> list:
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _outputs(r)]
    return [result] if hasattr(result, "requires_grad") and result.requires_grad else []


def run(case: Case, L) -> Outcome:
    leaves: list = []
    try:
        result = case.call.run(L, leaves)
        grads = []
        if case.grad:
            outs = _outputs(result)
            rng = np.random.default_rng(case.seed)
            loss = sum((o * L.tensor(rng.uniform(-1, 1, tuple(o.shape)))).sum() for o in outs)
            if outs:
                loss.backward()
            grads = [leaf.grad for leaf in leaves]
    except Exception as e:  # noqa: BLE001 - any raise is an outcome to compare
        return Outcome(error=e)
    return Outcome(result=result, grads=grads)


def _is_tensor(x) -> bool:
    return isinstance(x, (tp.Tensor, torch.Tensor))


def _numpy(t) -> np.ndarray:
    """A tensor's values as numpy in a wide dtype (float64, complex128, int64 or bool)."""
    if isinstance(t, torch.Tensor):
        t = t.detach().resolve_conj().resolve_neg()
        if t.dtype is torch.bfloat16:
            t = t.float()
        elif t.dtype is torch.complex32:
            t = t.to(torch.complex64)
        a = t.numpy()
    else:
        a = np.asarray(t.detach())
        if a.dtype == ml_dtypes.bfloat16:
            a = a.astype(np.float32)
    kind = a.dtype.kind
    return a.astype(
        {"f": np.float64, "c": np.complex128, "i": np.int64, "u": np.int64}.get(kind, a.dtype)
    )


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    """NaN-aware closeness: nan where torch has nan, the same infinities, and finite values
    within ``rtol`` (relative, and absolute against the largest finite magnitude). A complex
    value is nan when either part is (C99 leaves the other part unspecified), infinite when
    either part is; finite ones are compared by the modulus of the difference."""
    if np.iscomplexobj(b):
        nan_a = np.isnan(a.real) | np.isnan(a.imag)
        nan_b = np.isnan(b.real) | np.isnan(b.imag)
        inf_a = (np.isinf(a.real) | np.isinf(a.imag)) & ~nan_a
        inf_b = (np.isinf(b.real) | np.isinf(b.imag)) & ~nan_b
        if not (np.array_equal(nan_a, nan_b) and np.array_equal(inf_a, inf_b)):
            return False
        finite = ~(nan_b | inf_b)
    else:
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return False
        special = np.isinf(b) | np.isinf(a)
        if not np.array_equal(a[special], b[special]):
            return False
        finite = np.isfinite(b)
    fa, fb = a[finite], b[finite]
    atol = rtol * max(1.0, float(np.abs(fb).max(initial=0.0)))
    return bool(np.all(np.abs(fa - fb) <= atol + rtol * np.abs(fb)))


def _brief(x) -> str:
    if _is_tensor(x):
        a = _numpy(x)
        vals = np.array2string(a.ravel()[:8], precision=5, separator=", ")
        return f"{dtype_name(x.dtype)}{list(x.shape)} {vals}{'...' if a.size > 8 else ''}"
    return repr(x)


def compare(ours, theirs, where: str, strides: bool = False) -> list[str]:
    """How ``ours`` (TensorPlay) differs from ``theirs`` (torch); [] when they agree."""
    if _is_tensor(theirs):
        if not _is_tensor(ours):
            return [f"{where}: kind: tensorplay {type(ours).__name__}, torch Tensor"]
        if dtype_name(ours.dtype) != dtype_name(theirs.dtype):
            return [f"{where}: dtype: tensorplay {_brief(ours)}, torch {_brief(theirs)}"]
        if tuple(ours.shape) != tuple(theirs.shape):
            return [f"{where}: shape: tensorplay {tuple(ours.shape)}, torch {tuple(theirs.shape)}"]
        a, b = _numpy(ours), _numpy(theirs)
        name = dtype_name(theirs.dtype)
        same = _close(a, b, TOL[name]) if name in TOL else np.array_equal(a, b)
        if not same:
            return [f"{where}: values: tensorplay {_brief(ours)}, torch {_brief(theirs)}"]
        if strides and theirs.numel() > 0:
            big = [i for i, n in enumerate(theirs.shape) if n > 1]
            ours_s = [ours.stride()[i] for i in big]
            theirs_s = [theirs.stride()[i] for i in big]
            if ours_s != theirs_s:
                return [f"{where}: strides: tensorplay {ours.stride()}, torch {theirs.stride()}"]
            if ours.storage_offset() != theirs.storage_offset():
                return [
                    f"{where}: storage_offset: tensorplay {ours.storage_offset()}, "
                    f"torch {theirs.storage_offset()}"
                ]
        return []
    if isinstance(theirs, (tuple, list)):
        if not isinstance(ours, (tuple, list)) or len(ours) != len(theirs):
            kind = f"{type(theirs).__name__} of {len(theirs)}"
            return [f"{where}: structure: tensorplay {_brief(ours)}, torch {kind}"]
        return [
            m
            for i, (o, t) in enumerate(zip(ours, theirs))
            for m in compare(o, t, f"{where}[{i}]", strides)
        ]
    # None (a missing gradient), Python numbers and flags: same type, same value (nan == nan)
    if type(ours) is not type(theirs):
        return [f"{where}: tensorplay {_brief(ours)}, torch {_brief(theirs)}"]
    if not (ours == theirs or (ours != ours and theirs != theirs)):
        return [f"{where}: tensorplay {_brief(ours)}, torch {_brief(theirs)}"]
    return []


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]


def mismatches(case: Case) -> list[str]:
    """Every way TensorPlay's outcome differs from torch's; deliberate differences removed."""
    ours, theirs = run(case, tp), run(case, torch)
    if ours.error is not None and theirs.error is not None:
        return []
    if ours.error is not None:
        found = [
            f"raise: tensorplay raised {_error(ours.error)}; torch returned {_brief(theirs.result)}"
        ]
    elif theirs.error is not None:
        found = [
            f"raise: torch raised {_error(theirs.error)}; tensorplay returned {_brief(ours.result)}"
        ]
    else:
        found = compare(ours.result, theirs.result, "out", case.strides)
        if case.grad and not found:
            found = compare(ours.grads, theirs.grads, "grad")
    return [m for m in found if not any(d.applies(case, m) for d in DELIBERATE)]


# ---- deliberate differences ------------------------------------------------------------------


@dataclass(frozen=True)
class Deliberate:
    """A difference from torch that TensorPlay keeps on purpose: ``applies(case, message)``
    says whether a mismatch is this one, ``reason`` why it is kept."""

    name: str
    reason: str
    applies: Callable[[Case, str], bool]


def _args(case: Case) -> list:
    return [a for a in case.call.args if isinstance(a, Arg)] + [
        a for x in case.call.args if isinstance(x, (list, tuple)) for a in x if isinstance(a, Arg)
    ]


DELIBERATE: tuple[Deliberate, ...] = (
    Deliberate(
        "dtype checks on empty inputs",
        "torch skips its dtype check when an input has no elements (softmax of an empty uint8 "
        "tensor, mm of empty bool ones); TensorPlay's dtype support does not depend on size",
        lambda case, m: (
            m.startswith("raise: tensorplay raised")
            and ("not supported for dtype" in m or "to have the same dtype" in m)
            and any(0 in a.shape for a in _args(case))
        ),
    ),
    Deliberate(
        "mT of a 0-d tensor",
        "torch returns the tensor and warns that this is deprecated; TensorPlay raises as torch "
        "does for 1-d",
        lambda case, m: (
            case.op == "mT"
            and m.startswith("raise: tensorplay raised")
            and _args(case)[0].shape == ()
        ),
    ),
    Deliberate(
        "integer arange step truncated to 0",
        "torch's int64 arange refuses a step that truncates to 0, its other integer dtypes "
        "repeat start (arange(0, 7.0, 0.5, dtype=int8) is fourteen 0s); TensorPlay refuses it "
        "for every integer dtype",
        lambda case, m: (
            case.op == "arange"
            and m.startswith("raise: tensorplay raised")
            and "is 0 once converted" in m
        ),
    ),
    Deliberate(
        "no complex32",
        "TensorPlay has no complex32 (float16 with a complex operand gives complex32 in torch)",
        lambda case, m: "torch complex32" in m or "torch returned complex32" in m,
    ),
)


# ---- value generation ----------------------------------------------------------------------


class Draw:
    """The random source of one case: ``r`` (``random.Random``) picks structure, ``np`` values.

    ``special`` mixes nan/inf/-0.0 into float values; ``grad`` marks float64 inputs as
    leaves that require grad (and turns ``special`` off: gradients at nan are not the point).
    """

    def __init__(self, seed: int, grad: bool = False):
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.grad = grad
        self.special = not grad and self.r.random() < 0.2

    def choice(self, seq):
        return seq[self.r.randrange(len(seq))]

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def shape(self, min_ndim=0, max_ndim=3, max_size=5, empty=0.1) -> tuple:
        ndim = self.r.randint(min_ndim, max_ndim)
        sizes = []
        for _ in range(ndim):
            if self.chance(empty / max(ndim, 1)):
                sizes.append(0)
            elif self.chance(0.2):
                sizes.append(1)
            else:
                sizes.append(self.r.randint(2, max_size))
        return tuple(sizes)

    def values(self, shape, dtype: str, domain: str = "") -> np.ndarray:
        """Random values of ``dtype``, rounded to it. ``domain``: "" (any), "positive",
        "nonzero", "unit" (inside (-1, 1)), "exponent" (small; ints from -1 for int ** -n)."""
        shape = tuple(shape)
        n = math.prod(shape)
        if dtype == "bool":
            v = self.np.random(n) < 0.5
        elif dtype in INTS:
            lo = 0 if dtype == "uint8" else -9
            if domain == "positive":
                lo = 1
            hi = 4 if domain == "exponent" else 10
            if domain == "exponent":
                lo = -1 if dtype != "uint8" and self.chance(0.3) else 0
            v = self.np.integers(lo, hi + 1, n)
            if domain in ("nonzero", "positive"):
                v[v == 0] = 1
        else:
            if domain == "positive":
                v = self.np.uniform(0.2, 3, n)
            elif domain == "unit":
                v = self.np.uniform(-0.9, 0.9, n)
            elif domain == "exponent":
                v = self.np.uniform(-2, 2, n)
            else:
                v = self.np.uniform(-3, 3, n)
            if domain == "nonzero":
                v = np.where(np.abs(v) < 0.25, v + np.copysign(0.5, v), v)
            if dtype in COMPLEX:
                v = v + 1j * self.np.uniform(-2, 2, n)
            # complex inf/nan arithmetic is implementation-defined (C99 Annex G is
            # optional), so only real values get the special ones
            if self.special and n and domain == "" and dtype not in COMPLEX:
                k = self.r.randint(1, max(1, n // 3))
                at = self.np.choice(n, k, replace=False)
                v = v.astype(float)
                v[at] = self.np.choice([np.nan, np.inf, -np.inf, 0.0, -0.0], k)
        v = v.reshape(shape)
        if dtype == "bfloat16":
            return v.astype(ml_dtypes.bfloat16).astype(np.float32)
        return v.astype(_NATIVE[dtype])

    def tensor(self, shape, dtype: str, domain: str = "", layout: str | None = None) -> Arg:
        """An ``Arg`` of ``shape``; ``layout`` (random when None) may make it a view."""
        shape = tuple(shape)
        if layout is None:
            options = ["", "", "", "step", "offset"]
            if len(shape) >= 2:
                options.append("mT")
            if any(n != 1 for n in shape):
                options.append("expand")
            layout = self.choice(options) if shape else ""
        grad = self.grad and dtype == "float64"
        if layout == "mT":
            base = shape[:-2] + (shape[-1], shape[-2])
            return Arg(self.values(base, dtype, domain), dtype, "mT", grad=grad)
        if layout == "step":
            base = shape[:-1] + (2 * shape[-1],)
            return Arg(self.values(base, dtype, domain), dtype, "step", grad=grad)
        if layout == "offset":
            base = (shape[0] + 1,) + shape[1:]
            return Arg(self.values(base, dtype, domain), dtype, "offset", grad=grad)
        if layout == "expand":
            d = self.choice([i for i, n in enumerate(shape) if n != 1])
            base = shape[:d] + (1,) + shape[d + 1 :]
            return Arg(self.values(base, dtype, domain), dtype, "expand", shape, grad=grad)
        return Arg(self.values(shape, dtype, domain), dtype, grad=grad)

    def index(self, max_ndim: int, size: int, negative=0.0, unique=False) -> Arg:
        """An int64 index tensor of up to ``max_ndim`` dims, entries in [0, size); with
        probability ``negative`` all shifted to [-size, 0). ``unique``: 1-d, no repeats."""
        idx_shape = self.shape(0, max_ndim, 3, empty=0.05)
        n = math.prod(idx_shape)
        if unique:
            n = min(n, size)
            idx_shape = (n,)
            v = self.np.permutation(size)[:n] if size else np.zeros(0, np.int64)
        else:
            v = self.np.integers(0, size, n) if size else np.zeros(n, np.int64)
        if negative and self.chance(negative):
            v = v - size
        return Arg(np.asarray(v, np.int64).reshape(idx_shape), "int64")

    def scalar(self, kind: str):
        """A Python scalar of ``kind`` (bool, int, float, complex)."""
        if kind == "bool":
            return self.chance(0.5)
        if kind == "int":
            return self.choice([0, 1, 2, 3, -2, -7, 5])
        if kind == "float":
            return self.choice([0.5, -1.5, 2.25, 0.1, 1e-4, 3.0, -0.0])
        return self.choice([1.5 - 0.5j, 2j, -1 + 0j])


def scalar_kind(dtype: str) -> str:
    if dtype == "bool":
        return "bool"
    if dtype in INTS:
        return "int"
    return "float" if dtype in FLOATS else "complex"
