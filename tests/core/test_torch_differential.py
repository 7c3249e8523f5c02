"""TensorPlay against PyTorch, case by case (issue 13).

Each op family has a generator: ``(Draw(seed), op, dtype) -> Call``. A case runs in both
frameworks from the same numpy values and must agree (``differential.mismatches``):
both raise, or dtype, shape and values match; ``grad`` cases also compare ``.grad`` of
float64 leaves; ``views`` cases also compare strides.

CI runs the number of seeds ``FAMILIES`` gives per op (ids read ``family-op-seed``);
``-m fuzz`` runs ``TP_FUZZ_CASES`` more per family (default 20000, from seed
``TP_FUZZ_SEED``, default 1_000_000) and reports every mismatch grouped by op and kind.
Reproduce one case with ``make_case(family, op, seed)``; ``repr`` of it is the call.

The deliberate differences from torch are ``differential.DELIBERATE``.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from differential import (  # noqa: E402
    DTYPES,
    FLOATS,
    INTS,
    Arg,
    Call,
    Case,
    Draw,
    Dtype,
    build,
    compare,
    mismatches,
    run,
    scalar_kind,
)

import tensorplay as tp  # noqa: E402

# ---- helpers ------------------------------------------------------------------------------


def _dim(d: Draw, ndim: int, bad: float = 0.03) -> int:
    """A dim of a tensor of ``ndim`` dims, negative half the time; out of range with p ``bad``."""
    n = max(ndim, 1)
    if d.chance(bad):
        return d.choice([n, -n - 1])
    return d.r.randint(-n, n - 1)


def _form(d: Draw, name: str, inplace: bool = False) -> str:
    """A way to call ``name`` that torch has (function, method or in-place on a clone)."""
    forms = []
    if hasattr(torch, name) or name in ("gelu", "silu", "softplus", "leaky_relu"):
        forms.append("fn")
    if hasattr(torch.Tensor, name):
        forms.append("method")
    if inplace and hasattr(torch.Tensor, name + "_") and d.chance(0.3):
        return "inplace"
    return d.choice(forms)


def _dtype(d: Draw, dtype: str | None, among=DTYPES) -> str:
    return dtype if dtype is not None else d.choice(among)


def _dtype_kwarg(d: Draw, among: list) -> str:
    """A ``dtype=`` argument; float64 in gradient cases (a gradient through a float16
    cast is rounded there, and torch's rounding is not the point)."""
    return "float64" if d.grad else d.choice(among)


def _sizes(d: Draw, sizes) -> tuple:
    """Sizes as arguments: spread (``x.view(2, 3)``) or one tuple (``x.view((2, 3))``);
    torch's ``x.permute()`` and ``zeros()`` need at least one, so none travel as ``()``."""
    return (*sizes,) if sizes and d.chance(0.5) else (tuple(sizes),)


def _broadcast_pair(d: Draw) -> tuple[tuple, tuple]:
    """Two shapes that broadcast (size-1 dims, missing leading dims, 0-d), rarely ones that
    do not."""
    a = d.shape(0, 3)
    b = list(a)
    for i in range(len(b)):
        if d.chance(0.3):
            b[i] = 1
    if b and d.chance(0.3):
        b = b[d.r.randint(1, len(b)) :]
    b = tuple(b)
    if d.chance(0.5):
        a, b = b, a
    if a and d.chance(0.04):
        a = a[:-1] + (a[-1] + 2,)  # incompatible
    return a, b


def _regroup(d: Draw, shape: tuple) -> tuple:
    """Another shape with the same number of elements (dims merged, split, 1s inserted)."""
    dims = list(shape)
    for _ in range(d.r.randint(1, 3)):
        op = d.r.randrange(3)
        if op == 0 and len(dims) >= 2:
            i = d.r.randrange(len(dims) - 1)
            dims[i : i + 2] = [dims[i] * dims[i + 1]]
        elif op == 1 and dims:
            i = d.r.randrange(len(dims))
            n = dims[i]
            f = d.choice([k for k in range(1, n + 1) if n % k == 0] or [1])
            dims[i : i + 1] = [f, n // f] if n else [0, d.r.randint(1, 3)]
        else:
            dims.insert(d.r.randint(0, len(dims)), 1)
    if dims and math.prod(dims) and d.chance(0.3):
        dims[d.r.randrange(len(dims))] = -1
    if d.chance(0.04):
        dims.append(2)  # wrong number of elements (or -1 still solvable: fine either way)
    return tuple(dims)


# ---- unary ----------------------------------------------------------------------------------

UNARY = {
    # op: float domain that keeps values where the op (and its gradient) is smooth
    "neg": "",
    "conj": "",
    "abs": "nonzero",
    "sign": "",
    "reciprocal": "nonzero",
    "sqrt": "positive",
    "rsqrt": "positive",
    "square": "",
    "exp": "",
    "exp2": "",
    "expm1": "",
    "log": "positive",
    "log2": "positive",
    "log10": "positive",
    "log1p": "positive",
    "sin": "",
    "cos": "",
    "tan": "unit",
    "asin": "unit",
    "acos": "unit",
    "atan": "",
    "sinh": "",
    "cosh": "",
    "tanh": "",
    "sigmoid": "",
    "erf": "",
    "relu": "nonzero",
    "gelu": "",
    "silu": "",
    "softplus": "",
    "leaky_relu": "nonzero",
    "floor": "",
    "ceil": "",
    "trunc": "",
    "round": "",
    "isnan": "",
    "isinf": "",
    "isfinite": "",
    "logical_not": "",
    "bitwise_not": "",
    "clamp": "",
}
_UNARY_OPERATORS = {"neg": "neg", "abs": "abs", "bitwise_not": "invert"}


def gen_unary(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _dtype(d, dtype)
    shape = d.shape(0, 3)
    domain = UNARY[op] if d.grad or d.chance(0.5) else ""
    x = d.tensor(shape, dt, domain)
    kw: dict = {}
    if op == "gelu" and d.chance(0.5):
        kw["approximate"] = d.choice(["none", "tanh"])
    elif op == "softplus" and d.chance(0.5):
        kw = {"beta": d.choice([0.5, 1.0, 2]), "threshold": d.choice([1.0, 20.0])}
    elif op == "leaky_relu" and d.chance(0.5):
        kw["negative_slope"] = d.choice([0.01, 0.2])
    elif op == "round" and d.chance(0.4):
        kw["decimals"] = d.choice([0, 1, 2, -1])
    elif op == "clamp":
        # torch takes two numbers or two tensors (either may be None), not one of each
        tensors = d.chance(0.3)
        bounds = []
        for _ in range(2):
            if d.chance(0.25):
                bounds.append(None)
            elif tensors:
                bounds.append(d.tensor(shape[d.r.randint(0, len(shape)) :], dt, layout=""))
            else:
                bounds.append(
                    d.choice([-1, 0, 2])
                    if dt in INTS or dt == "bool"
                    else d.choice([-1.5, 0.25, 2.0])
                )
        if d.grad and isinstance(bounds[0], (int, float)) and isinstance(bounds[1], (int, float)):
            bounds[0], bounds[1] = min(bounds), max(bounds)  # min > max has no useful gradient
        kw = {"min": bounds[0], "max": bounds[1]}
    if op in _UNARY_OPERATORS and d.chance(0.25):
        return Call("operator", _UNARY_OPERATORS[op], (x,))
    return Call(_form(d, op, inplace=True), op, (x,), kw)


# ---- binary ---------------------------------------------------------------------------------

BINARY = [
    "add",
    "sub",
    "mul",
    "div",
    "floor_divide",
    "remainder",
    "pow",
    "atan2",
    "minimum",
    "maximum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "isclose",
    "where",
]
_BINARY_OPERATORS = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "truediv",
    "floor_divide": "floordiv",
    "remainder": "mod",
    "pow": "pow",
    "eq": "eq",
    "ne": "ne",
    "lt": "lt",
    "le": "le",
    "gt": "gt",
    "ge": "ge",
    "bitwise_and": "and_",
    "bitwise_or": "or_",
    "bitwise_xor": "xor",
}
# ops whose ``other`` torch accepts as a Python scalar
_SCALAR_OTHER = set(_BINARY_OPERATORS)
_SECOND_DOMAIN = {
    "div": "nonzero",
    "floor_divide": "nonzero",
    "remainder": "nonzero",
    "pow": "exponent",
}
_FIRST_DOMAIN_GRAD = {"pow": "positive", "div": "", "atan2": "nonzero"}


def gen_binary(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _dtype(d, dtype)
    dt2 = dt if dtype is not None or d.chance(0.5) else d.choice(DTYPES)
    sa, sb = _broadcast_pair(d)
    a = d.tensor(sa, dt, _FIRST_DOMAIN_GRAD.get(op, "") if d.grad else "")
    dom = _SECOND_DOMAIN.get(op, "")
    if op == "where":
        cond = d.tensor(tuple(1 if d.chance(0.3) else s for s in sa), "bool")
        b = d.scalar(scalar_kind(dt2)) if d.chance(0.2) else d.tensor(sb, dt2)
        if d.chance(0.15):
            return Call("fn", "where", (cond, d.scalar(scalar_kind(dt)), b))
        if d.chance(0.3):
            return Call("method", "where", (a, cond, b))  # a.where(cond, b)
        return Call("fn", "where", (cond, a, b))
    if op in _SCALAR_OTHER and d.chance(0.25):
        b = d.scalar(scalar_kind(dt2))
        if dom == "nonzero" and b == 0:
            b = 2
    else:
        b = d.tensor(sb, dt2, dom)
    kw: dict = {}
    if op in ("add", "sub") and d.chance(0.25):
        kw["alpha"] = d.choice([2, -1, 0.5, True])
    elif op == "div" and d.chance(0.5):
        kw["rounding_mode"] = d.choice([None, "trunc", "floor"])
    elif op == "isclose" and d.chance(0.5):
        kw = {"rtol": 0.1, "atol": 0.5, "equal_nan": d.chance(0.5)}
    if op in _BINARY_OPERATORS and not kw:
        pick = d.r.randrange(6)
        if pick == 0:
            return Call("operator", _BINARY_OPERATORS[op], (a, b))
        if pick == 1 and isinstance(b, (int, float, complex)):
            return Call("operator", _BINARY_OPERATORS[op], (b, a))  # reflected: 2 - x
        if pick == 2 and op not in ("eq", "ne", "lt", "le", "gt", "ge"):
            return Call("ioperator", _BINARY_OPERATORS[op], (a, b))
    return Call(_form(d, op, inplace=True), op, (a, b), kw)


# ---- promotion with Python scalars and 0-d tensors ----------------------------------------

PROMOTION = ["add", "sub", "mul", "truediv", "floordiv", "pow", "eq", "lt", "where", "maximum"]
_EDGE_SCALARS = {
    "bool": [True, False],
    "int": [0, 1, -1, 3, 300, -129, 2**31, 2**40],
    "float": [0.1, 1e-4, 1.0 / 3, 2.5, 65519.0, 1e5, 1e-8, -0.0, float("inf"), float("nan")],
    "complex": [1.5 - 0.5j, 1e-4j, 0j],
}


def gen_promotion(d: Draw, op: str, dtype: str | None) -> Call:
    """dtype of the result when a tensor meets a Python scalar or a 0-d tensor of another
    kind (they do not widen a tensor of the same category) and the scalar's precision."""
    dt = _dtype(d, dtype)
    domain = "nonzero" if op in ("truediv", "floordiv") else ""
    shape = d.shape(1, 2)
    x = d.tensor(shape, dt, domain)
    partner = d.r.randrange(3)
    if partner == 0:
        y = d.choice(_EDGE_SCALARS[d.choice(list(_EDGE_SCALARS))])
    elif partner == 1:
        y = d.scalar(d.choice(["bool", "int", "float", "complex"]))
    else:
        y = d.tensor((), d.choice(DTYPES), "nonzero" if domain else "")
    if op in ("floordiv",) and not isinstance(y, Arg) and y == 0:
        y = 3
    if op == "where":
        cond = d.tensor(shape, "bool", layout="")
        return Call("fn", "where", (cond, x, y) if d.chance(0.5) else (cond, y, x))
    if op == "maximum":
        if not isinstance(y, Arg):
            y = d.tensor((), d.choice(DTYPES))
        return Call("fn", "maximum", (x, y) if d.chance(0.5) else (y, x))
    pick = d.r.randrange(4)
    if pick == 0:
        return Call("operator", op, (x, y))
    if pick == 1:
        return Call("operator", op, (y, x))
    if pick == 2 and op not in ("eq", "lt"):
        return Call("ioperator", op, (x, y))
    fn = {"truediv": "div", "floordiv": "floor_divide"}.get(op, op)
    return Call("fn", fn, (x, y))


# ---- reductions -------------------------------------------------------------------------------

REDUCTIONS = [
    "sum",
    "mean",
    "prod",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "var",
    "std",
    "norm",
    "logsumexp",
    "all",
    "any",
    "max",
    "min",
]
# which dim forms torch accepts per op: "int", "tuple" (incl. ()), "none" (a full reduction)
_DIM_FORMS = {
    "prod": ("none", "int"),
    "argmax": ("none", "int"),
    "argmin": ("none", "int"),
    "max": ("none", "int"),
    "min": ("none", "int"),
    "logsumexp": ("int", "tuple"),
}


def gen_reduction(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _dtype(d, dtype)
    shape = d.shape(0, 4, empty=0.15)
    x = d.tensor(shape, dt)
    nd = len(shape)
    form = d.choice(_DIM_FORMS.get(op, ("none", "int", "tuple")))
    kw: dict = {}
    if form == "int":
        kw["dim"] = _dim(d, nd)
    elif form == "tuple":
        # torch's var/std backward with dim=() divides by 1 - correction (its forward
        # reduces everything), so gradient cases give them at least one dim
        fewest = 1 if d.grad and op in ("var", "std") and nd else 0
        k = d.r.randint(fewest, min(nd, 3))
        dims = d.r.sample(range(nd), k) if nd else []
        kw["dim"] = tuple(i - nd if d.chance(0.4) else i for i in dims)
        if dims and d.chance(0.03):
            kw["dim"] += (kw["dim"][0],)  # repeated dim
    if "dim" in kw and d.chance(0.5):
        kw["keepdim"] = d.chance(0.5)
    if op in ("sum", "mean", "prod") and d.chance(0.25):
        kw["dtype"] = Dtype(
            _dtype_kwarg(d, ["int64", "float32", "float64", "complex64", "float16"])
        )
    if op in ("var", "std") and d.chance(0.5):
        if d.chance(0.5):
            kw["correction"] = d.choice([0, 1, 2])
        else:
            kw["unbiased"] = d.chance(0.5)
    if op == "norm":
        p = d.choice(["fro", 1, 2, 3, 0.5, 0, math.inf, -math.inf, None])
        if p is not None:
            kw["p"] = p
        if isinstance(kw.get("dim"), tuple) and len(kw["dim"]) > 2:
            kw["dim"] = kw["dim"][:2]
    return Call(_form(d, op), op, (x,), kw)


# ---- scans and dim-wise normalisation ------------------------------------------------------

SCANS = ["cumsum", "cumprod", "softmax", "log_softmax"]


def gen_scan(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _dtype(d, dtype)
    shape = d.shape(0, 3)
    x = d.tensor(shape, dt)
    kw: dict = {"dim": _dim(d, len(shape))}
    if d.chance(0.3):
        kw["dtype"] = Dtype(_dtype_kwarg(d, ["float32", "float64", "int64", "float16"]))
    return Call(_form(d, op), op, (x,), kw)


# ---- linear algebra -------------------------------------------------------------------------

LINALG = ["matmul", "mm", "bmm", "dot", "outer", "einsum"]
_EINSUM = [
    "ij,jk->ik",
    "ij,jk",
    "bij,bjk->bik",
    "ii->i",
    "ii",
    "i,i->",
    "i,j->ij",
    "ij->ji",
    "ij->",
    "...ij->...ji",
    "bi,bi->b",
    "ijk,k->ij",
    "i,i,i->",
    "ij,ij->ij",
]


def _mat_dtype(d: Draw, dtype):
    among = tuple(n for n in DTYPES if n != "complex128")
    return _dtype(d, dtype, among)


def gen_linalg(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _mat_dtype(d, dtype)
    dt2 = dt if dtype is not None or d.chance(0.85) else _mat_dtype(d, None)
    m, k, n, b = (d.r.randint(0, 4) if d.chance(0.1) else d.r.randint(1, 4) for _ in range(4))
    k2 = k if d.chance(0.95) else k + 1
    if op == "einsum":
        eq = d.choice(_EINSUM)
        sizes = {c: d.r.randint(1, 4) for c in "bijk"}
        operands = []
        for term in eq.split("->")[0].split(","):
            batch = (d.r.randint(1, 3),) if term.startswith("...") else ()
            operands.append(d.tensor(batch + tuple(sizes[c] for c in term.lstrip(".")), dt))
        return Call("fn", "einsum", (eq, *operands))
    if op == "matmul":
        ra, rb = d.r.randint(1, 4), d.r.randint(1, 4)
        lead = d.shape(0, 2, 3, empty=0.0)
        sa = (lead[len(lead) - max(ra - 2, 0) :] if ra > 2 else ()) + ((m, k) if ra >= 2 else (k,))
        lb = tuple(1 if d.chance(0.3) else s for s in lead)
        sb = (lb[len(lb) - max(rb - 2, 0) :] if rb > 2 else ()) + ((k2, n) if rb >= 2 else (k2,))
        a, bb = d.tensor(sa, dt), d.tensor(sb, dt2)
        if d.chance(0.3):
            return Call("operator", "matmul", (a, bb))
        return Call(_form(d, op), op, (a, bb))
    shapes = {
        "mm": ((m, k), (k2, n)),
        "bmm": ((b, m, k), (b, k2, n)),
        "dot": ((k,), (k2,)),
        "outer": ((m,), (n,)),
    }[op]
    return Call(_form(d, op), op, (d.tensor(shapes[0], dt), d.tensor(shapes[1], dt2)))


# ---- joins and splits --------------------------------------------------------------------------

JOINS = ["cat", "stack", "split", "chunk", "unbind"]


def gen_join(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _dtype(d, dtype)
    if op in ("cat", "stack"):
        shape = d.shape(0 if op == "stack" else 1, 3)
        nd = len(shape)
        dim = _dim(d, nd + (op == "stack"))
        parts = []
        for _ in range(d.r.randint(1, 3)):
            s = list(shape)
            if op == "cat" and nd:
                s[dim % nd if -nd <= dim < nd else 0] = d.r.randint(0, 3)
            if d.chance(0.04) and s:
                s[-1] += 1  # mismatch
            pdt = dt if dtype is not None or d.chance(0.7) else d.choice(DTYPES)
            parts.append(d.tensor(tuple(s), pdt))
        if op == "cat" and d.chance(0.1) and dtype is None:
            parts.insert(d.r.randint(0, len(parts)), d.tensor((0,), dt))  # legacy empty 1-d
        seq = parts if d.chance(0.7) else tuple(parts)
        return Call("fn", op, (seq,), {"dim": dim} if dim or d.chance(0.5) else {})
    shape = d.shape(1, 3)
    x = d.tensor(shape, dt)
    dim = _dim(d, len(shape))
    size = shape[dim % len(shape)] if -len(shape) <= dim < len(shape) else 1
    if op == "split":
        if d.chance(0.5):
            arg = d.r.randint(1, 4) if d.chance(0.97) else 0
        else:
            arg, left = [], size
            while left > 0:
                arg.append(d.r.randint(0, left))
                left -= arg[-1]
            if d.chance(0.1):
                arg.append(1)  # sections that do not add up
        return Call(_form(d, op), op, (x, arg), {"dim": dim})
    if op == "chunk":
        return Call(_form(d, op), op, (x, d.r.randint(1, 5) if d.chance(0.97) else 0), {"dim": dim})
    return Call(_form(d, op), op, (x,), {"dim": dim})


# ---- views --------------------------------------------------------------------------------------

VIEWS = [
    "view",
    "reshape",
    "permute",
    "transpose",
    "t",
    "T",
    "mT",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "flatten",
    "unflatten",
    "narrow",
    "select",
    "as_strided",
    "movedim",
    "diagonal",
    "contiguous",
]


def _as_strided_args(d: Draw, arg: Arg):
    storage = arg.base.size
    offset = d.r.randint(0, max(storage - 1, 0))
    for _ in range(5):
        size = tuple(d.r.randint(0, 3) for _ in range(d.r.randint(0, 3)))
        stride = tuple(d.r.randint(0, 4) for _ in size)
        last = offset + sum((s - 1) * st for s, st in zip(size, stride) if s)
        if math.prod(size) == 0 or last < storage:
            return size, stride, offset
    return (), (), offset


def gen_view(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _dtype(d, dtype)
    # ops that need dims get them nine times in ten (0-d and 1-d inputs are for errors)
    min_ndim = {"narrow": 1, "select": 1, "diagonal": 2, "mT": 2}.get(op, 0) if d.chance(0.9) else 0
    shape = d.shape(min_ndim, 4, 4)
    nd = len(shape)
    x = d.tensor(shape, dt)
    if op == "view" or op == "reshape":
        target = _regroup(d, shape)
        form = "method" if op == "view" else _form(d, op)
        return Call(form, op, (x, *(_sizes(d, target) if form == "method" else (target,))))
    if op == "permute":
        perm = [i - nd if d.chance(0.3) else i for i in d.r.sample(range(nd), nd)]
        if d.chance(0.03):
            perm.append(0)
        return (
            Call("method", op, (x, *_sizes(d, perm)))
            if d.chance(0.5)
            else Call(_form(d, op), op, (x, tuple(perm)))
        )
    if op == "transpose":
        return Call(_form(d, op), op, (x, _dim(d, nd), _dim(d, nd)))
    if op == "t":
        return Call(_form(d, op), op, (x,))
    if op in ("T", "mT"):
        return Call("attr", op, (x,))
    if op in ("expand", "expand_as"):
        sizes = [d.r.randint(1, 3) for _ in range(d.r.randint(0, 2))]
        for s in shape:
            sizes.append(d.r.randint(0, 4) if s == 1 else (-1 if d.chance(0.3) else s))
        if d.chance(0.04):
            sizes.insert(0, -1)  # -1 for a new leading dim
        if op == "expand_as":
            lead = len(sizes) - len(shape)
            target = [
                s if s != -1 else shape[i - lead] if i >= lead else 1 for i, s in enumerate(sizes)
            ]
            return Call("method", op, (x, d.tensor(tuple(target), d.choice(DTYPES))))
        return Call("method", op, (x, *_sizes(d, sizes)))
    if op == "squeeze":
        if d.chance(0.3):
            return Call(_form(d, op), op, (x,))
        if d.chance(0.5):
            return Call(_form(d, op), op, (x, _dim(d, nd)))
        dims = tuple(_dim(d, nd, bad=0) for _ in range(d.r.randint(0, min(nd, 2))))
        return Call(_form(d, op), op, (x, tuple(dict.fromkeys(dims))))
    if op == "unsqueeze":
        return Call(_form(d, op), op, (x, _dim(d, nd + 1)))
    if op == "flatten":
        kw = {"start_dim": _dim(d, nd, bad=0)} if d.chance(0.7) else {}
        if d.chance(0.7):
            kw["end_dim"] = _dim(d, nd, bad=0)
        return Call(_form(d, op), op, (x,), kw)
    if op == "unflatten":
        dim = _dim(d, nd)
        n = shape[dim % nd] if nd and -nd <= dim < nd else 1
        sizes = list(_regroup(d, (n,)))
        return Call(_form(d, op), op, (x, dim, tuple(sizes)))
    if op in ("narrow", "select"):
        dim = _dim(d, nd)
        n = shape[dim % nd] if nd and -nd <= dim < nd else 1
        if op == "select":
            index = d.r.randint(-n, n - 1) if n and d.chance(0.95) else n
            return Call(_form(d, op), op, (x, dim, index))
        start = d.r.randint(-n, n) if d.chance(0.95) else n + 1
        length = (
            d.r.randint(0, max(n - (start + n if start < 0 else start), 0))
            if d.chance(0.95)
            else n + 1
        )
        return Call(_form(d, op), op, (x, dim, start, length))
    if op == "as_strided":
        size, stride, offset = _as_strided_args(d, x)
        return Call(_form(d, op), op, (x, size, stride, offset))
    if op == "movedim":
        if d.chance(0.5) or nd == 0:
            return Call(_form(d, op), op, (x, _dim(d, nd), _dim(d, nd)))
        k = d.r.randint(1, nd)
        src = tuple(d.r.sample(range(nd), k))
        dst = tuple(i - nd if d.chance(0.3) else i for i in d.r.sample(range(nd), k))
        return Call(_form(d, op), op, (x, src, dst))
    if op == "diagonal":
        kw = {"offset": d.r.randint(-2, 2)}
        if d.chance(0.6) and nd >= 2:
            dim1, dim2 = d.r.sample(range(nd), 2) if d.chance(0.9) else (0, -nd)
            kw |= {"dim1": dim1 - nd * d.chance(0.3), "dim2": dim2}
        return Call(_form(d, op), op, (x,), kw)
    return Call("method", "contiguous", (x,))


# ---- indexing --------------------------------------------------------------------------------

INDEXING = [
    "basic",
    "advanced",
    "mixed",
    "bool",
    "setitem",
    "gather",
    "scatter",
    "index_select",
    "masked_fill",
]
_INDEX_KINDS = {
    "basic": ("int", "slice", "none", "ellipsis"),
    "advanced": ("slice", "list", "tensor", "mask"),
    "mixed": ("int", "slice", "none", "ellipsis", "list", "tensor", "mask", "pybool"),
    "bool": ("slice", "mask", "pybool", "boollist", "int"),
}


def _index(d: Draw, shape: tuple, kinds, unique: bool):
    """An index into a tensor of ``shape`` built from ``kinds``; ``unique``: no element is
    picked twice (setitem with tensor values is otherwise order dependent)."""
    items, dim = [], 0
    nd = len(shape)
    ellipsis = False
    for _ in range(d.r.randint(1, nd + 1)):
        kind = d.choice(kinds)
        n = shape[dim] if dim < nd else 0
        if kind == "none":
            items.append(None)
        elif kind == "pybool":
            items.append(d.chance(0.7))
        elif kind == "ellipsis":
            if not ellipsis:
                items.append(Ellipsis)
                ellipsis = True
                dim = max(dim, nd - sum(1 for k in items if k not in (None, Ellipsis)))
        elif dim >= nd:
            continue
        elif kind == "int":
            items.append(d.r.randint(-n, n - 1) if n and d.chance(0.97) else n)
            dim += 1
        elif kind == "slice":
            start = d.choice([None, d.r.randint(-n - 1, n + 1)])
            stop = d.choice([None, d.r.randint(-n - 1, n + 1)])
            step = d.choice([None, 1, 2, 3] if d.chance(0.97) else [-1])
            items.append(slice(start, stop, step))
            dim += 1
        elif kind in ("list", "tensor"):
            t = d.index(1 if unique else 2, size=n, negative=0.2, unique=unique)
            if n and not unique and d.chance(0.03):
                t = Arg(t.base + n, "int64")  # out of range
            items.append(t.base.tolist() if kind == "list" and t.base.ndim == 1 else t)
            dim += 1
        elif kind == "mask":
            k = d.r.randint(1, min(2, nd - dim))
            items.append(Arg(d.values(shape[dim : dim + k], "bool"), "bool"))
            dim += k
        elif kind == "boollist":
            items.append([d.chance(0.5) for _ in range(n)])
            dim += 1
    if len(items) == 1 and d.chance(0.5):
        return items[0]
    return tuple(items)


def gen_indexing(d: Draw, op: str, dtype: str | None) -> Call:
    dt = _dtype(d, dtype)
    shape = d.shape(0 if op in ("basic", "mixed", "bool", "setitem") or d.chance(0.2) else 1, 4, 4)
    nd = len(shape)
    x = d.tensor(shape, dt)
    if op in _INDEX_KINDS:
        return Call("getitem", "getitem", (x, _index(d, shape, _INDEX_KINDS[op], unique=False)))
    if op == "setitem":
        tensor_value = d.chance(0.6)
        idx = _index(d, shape, _INDEX_KINDS["mixed"], unique=tensor_value)
        try:
            target = tuple(torch.empty(shape)[build(idx, torch, [])].shape)
        except (IndexError, RuntimeError, TypeError, ValueError):
            target, tensor_value = (), False
        if tensor_value:
            vshape = target[d.r.randint(0, len(target)) :]
            vshape = tuple(1 if d.chance(0.2) else s for s in vshape)
            vdt = dt if dtype is not None or d.chance(0.8) else d.choice(DTYPES)
            value = d.tensor(vshape, vdt)
        else:
            value = d.scalar(
                scalar_kind(dt) if d.chance(0.8) else d.choice(["bool", "int", "float"])
            )
        return Call("setitem", "setitem", (x, idx, value))
    dim = _dim(d, nd)
    n = shape[dim % nd] if -nd <= dim < nd else 1
    if op == "index_select":
        idx = d.index(1, size=n, negative=0.15)
        if d.chance(0.1):
            idx = Arg(idx.base.astype(np.int32), "int32")
        return Call(_form(d, op), op, (x, dim, idx))
    if op == "masked_fill":
        mshape = tuple(1 if d.chance(0.3) else s for s in shape[d.r.randint(0, nd) :])
        mask = d.tensor(mshape, "bool", layout="")
        value = d.scalar(scalar_kind(dt)) if d.chance(0.8) else d.tensor((), dt)
        return Call(_form(d, op, inplace=True), op, (x, mask, value))
    # gather / scatter: index has x's rank, no larger than x off ``dim``
    ishape = [
        d.r.randint(0, s) if i != dim % max(nd, 1) else d.r.randint(0, s + 1)
        for i, s in enumerate(shape)
    ]
    if op == "gather":
        v = d.np.integers(0, max(n, 1), ishape)
        if d.chance(0.15):
            v = v - n
        return Call(_form(d, op), op, (x, dim, Arg(v.astype(np.int64), "int64")))
    # torch has no gradient for scatter with reduce=, and its src gradient needs src
    # shaped like index
    reduce = None if d.grad else d.choice([None, None, "add", "multiply"])
    use_src = d.chance(0.6)
    if use_src and reduce is None and nd:
        # distinct targets along dim for every other position: the result is order free
        ishape[dim % nd] = min(ishape[dim % nd], n)
        keys = d.np.random(shape[: dim % nd] + (n,) + shape[dim % nd + 1 :]).argsort(axis=dim % nd)
        v = keys[tuple(slice(0, s) for s in ishape)]
    else:
        v = d.np.integers(0, max(n, 1), ishape)
    if d.chance(0.15):
        v = v - n
    index = Arg(np.asarray(v, np.int64), "int64")
    kw: dict = {}
    if use_src:
        src_shape = tuple(s + (0 if d.grad else d.r.randint(0, 1)) for s in ishape)
        args = (x, dim, index, d.tensor(src_shape, dt))
    else:
        args = (x, dim, index)
        kw["value"] = d.scalar(scalar_kind(dt))
    if reduce is not None:
        kw["reduce"] = reduce
    return Call(_form(d, op), op, args, kw)


# ---- factories -------------------------------------------------------------------------------

FACTORIES = [
    "tensor",
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "linspace",
    "eye",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand",
    "randn",
    "randint",
    "randperm",
]


def _nested(d: Draw, shape: tuple, kinds: list):
    if not shape:
        return (
            d.scalar(d.choice(kinds)) if d.chance(0.8) else d.choice(_EDGE_SCALARS[d.choice(kinds)])
        )
    return [_nested(d, shape[1:], kinds) for _ in range(shape[0])]


def gen_factory(d: Draw, op: str, dtype: str | None) -> Call:
    dt = Dtype(_dtype(d, dtype)) if d.chance(0.5) else None
    kw = {"dtype": dt} if dt is not None else {}
    shape = d.shape(0, 3, 4)
    size_args = _sizes(d, shape)
    if d.chance(0.03):
        size_args = (-1, *shape)
    if op == "tensor":
        kinds = d.r.sample(["bool", "int", "float", "complex"], d.r.randint(1, 2))
        data = _nested(d, shape, kinds)
        if d.chance(0.03) and isinstance(data, list) and data and isinstance(data[0], list):
            data[0] = data[0] + [1]  # ragged
        return Call("fn", "tensor", (data,), kw)
    if op in ("zeros", "ones", "empty", "rand", "randn"):
        post = "zeros_like" if op in ("empty", "rand", "randn") else ""
        return Call("fn", op, size_args, kw, post=post)
    if op == "full":
        fill = d.choice(_EDGE_SCALARS[d.choice(list(_EDGE_SCALARS))])
        return Call("fn", op, (shape, fill), kw)
    if op == "arange":
        if d.chance(0.1):  # a few values past the end of small integer dtypes
            start = d.choice([250, 2**31 - 3])
            return Call("fn", op, (start, start + 5), kw)
        numbers = [d.r.randint(-5, 12), d.choice([0.5, -2.5, 1.25, 7.0])]
        args = tuple(d.choice(numbers) for _ in range(d.r.randint(1, 3)))
        if len(args) == 3 and d.chance(0.5):
            args = args[:2] + (d.choice([1, 2, -1, 0.5, -0.75, 0]),)
        return Call("fn", op, args, kw)
    if op == "linspace":
        return Call("fn", op, (d.r.randint(-3, 3), d.choice([5, 2.5, -1.0]), d.r.randint(0, 6)), kw)
    if op == "eye":
        return Call(
            "fn", op, (d.r.randint(0, 4),) + ((d.r.randint(0, 4),) if d.chance(0.5) else ()), kw
        )
    if op in ("zeros_like", "ones_like", "full_like"):
        x = d.tensor(shape, d.choice(DTYPES))
        args = (
            (x, d.choice(_EDGE_SCALARS[d.choice(list(_EDGE_SCALARS))]))
            if op == "full_like"
            else (x,)
        )
        return Call("fn", op, args, kw)
    if op == "randint":
        low = d.r.randint(-3, 3)
        return Call(
            "fn",
            op,
            (low, low + d.r.randint(0 if d.chance(0.05) else 1, 5), shape),
            kw,
            post="zeros_like",
        )
    n = d.r.randint(0, 6) if d.chance(0.95) else -1
    if dt is not None and dt.name in INTS + FLOATS:
        return Call("fn", "randperm", (n,), kw, post="zeros_like" if d.chance(0.5) else "sum")
    return Call("fn", "randperm", (n,), {}, post="sum")


# ---- autograd usage --------------------------------------------------------------------------
# Scenarios written once for both frameworks; ``x`` is a float64 leaf that requires grad.
# Each returns what the user would look at (a gradient, a flag) or raises.


def nonscalar_backward(L, x):
    (x * 2).backward()
    return x.grad


def backward_twice(L, x):
    y = (x * x).sum()
    y.backward()
    y.backward()
    return x.grad


def backward_twice_retained(L, x):
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    return x.grad


def grads_accumulate(L, x):
    (x * 2).sum().backward()
    (x * x).sum().backward()
    return x.grad


def backward_with_gradient(L, x):
    y = x * 3
    y.backward(gradient=L.ones_like(y) * 2)
    return x.grad


def backward_with_misshapen_gradient(L, x):
    y = x * 3
    y.backward(gradient=L.ones(2, *y.shape, dtype=y.dtype))
    return x.grad


def retain_grad(L, x):
    h = x * 2
    h.retain_grad()
    (h * h).sum().backward()
    return h.grad, x.grad, h.retains_grad


def retain_grad_on_view(L, x):
    h = (x * 2)[0]
    h.retain_grad()
    (h * h).sum().backward()
    return h.grad, x.grad


def nonleaf_grad_is_none(L, x):
    h = x * 2
    (h * h).sum().backward()
    return h.grad, h.is_leaf, x.is_leaf


def inplace_on_leaf(L, x):
    x.add_(1)
    return x


def inplace_on_view_of_leaf(L, x):
    x[0].mul_(2)
    return x


def inplace_after_save(L, x):
    y = x.exp()
    z = (y * y).sum()
    y.add_(1)
    z.backward()
    return x.grad


def inplace_on_view_then_backward(L, x):
    y = x.clone()
    y[0].mul_(3)
    (y * y).sum().backward()
    return x.grad


def backward_under_no_grad(L, x):
    with L.no_grad():
        y = (x * 2).sum()
    return y.requires_grad, y.grad_fn is None, y.backward()


def backward_of_detached(L, x):
    (x.detach() * 2).sum().backward()
    return x.grad


def int_requires_grad(L, x):
    return L.ones(2, dtype=L.int64).requires_grad_()


def requires_grad_off_on_nonleaf(L, x):
    return (x * 2).requires_grad_(False)


def autograd_grad(L, x):
    return L.autograd.grad(x.sin().sum(), x)


def autograd_grad_unused(L, x):
    z = x.detach().clone().requires_grad_()
    return L.autograd.grad((x * 2).sum(), [x, z])


def autograd_grad_allow_unused(L, x):
    z = x.detach().clone().requires_grad_()
    return L.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)


def autograd_grad_create_graph(L, x):
    (g,) = L.autograd.grad((x * x * x).sum(), x, create_graph=True)
    g.sum().backward()
    return g, x.grad


def hook_scales_grad(L, x):
    x.register_hook(lambda g: g * 2)
    (x * x).sum().backward()
    return x.grad


def as_strided_of_transposed(L, x):
    y = x.mT if x.dim() >= 2 else x[::2]
    z = y.as_strided((2,), (1,), 0) if y.numel() >= 2 else y
    (z * z).sum().backward()
    return x.grad


AUTOGRAD = {
    f.__name__: f
    for f in (
        nonscalar_backward,
        backward_twice,
        backward_twice_retained,
        grads_accumulate,
        backward_with_gradient,
        backward_with_misshapen_gradient,
        retain_grad,
        retain_grad_on_view,
        nonleaf_grad_is_none,
        inplace_on_leaf,
        inplace_on_view_of_leaf,
        inplace_after_save,
        inplace_on_view_then_backward,
        backward_under_no_grad,
        backward_of_detached,
        int_requires_grad,
        requires_grad_off_on_nonleaf,
        autograd_grad,
        autograd_grad_unused,
        autograd_grad_allow_unused,
        autograd_grad_create_graph,
        hook_scales_grad,
        as_strided_of_transposed,
    )
}


def gen_autograd(d: Draw, op: str, dtype: str | None) -> Call:
    x = d.tensor(d.shape(1, 3, empty=0.0), "float64", layout="")
    return Call("scenario", op, (x,), fn=AUTOGRAD[op])


# ---- families -----------------------------------------------------------------------------------

FAMILIES = {
    # family: (generator, ops, CI seeds per op)
    "unary": (gen_unary, list(UNARY), 16),
    "binary": (gen_binary, BINARY, 24),
    "promotion": (gen_promotion, PROMOTION, 36),
    "reductions": (gen_reduction, REDUCTIONS, 30),
    "scans": (gen_scan, SCANS, 40),
    "linalg": (gen_linalg, LINALG, 40),
    "joins": (gen_join, JOINS, 40),
    "views": (gen_view, VIEWS, 30),
    "indexing": (gen_indexing, INDEXING, 60),
    "factories": (gen_factory, FACTORIES, 20),
    "autograd": (gen_autograd, list(AUTOGRAD), 4),
}
# float64 gradients: differentiable ops of the families above
GRAD = {
    "unary": [
        op
        for op in UNARY
        if op not in ("isnan", "isinf", "isfinite", "logical_not", "bitwise_not", "conj")
    ],
    "binary": ["add", "sub", "mul", "div", "pow", "atan2", "minimum", "maximum", "where"],
    "reductions": [
        "sum",
        "mean",
        "prod",
        "amax",
        "amin",
        "var",
        "std",
        "norm",
        "logsumexp",
        "max",
        "min",
    ],
    "scans": SCANS,
    "linalg": LINALG,
    "joins": JOINS,
    "views": VIEWS,
    "indexing": [
        "basic",
        "advanced",
        "mixed",
        "setitem",
        "gather",
        "scatter",
        "index_select",
        "masked_fill",
    ],
}
GRAD_SEEDS = 8


def make_case(family: str, op: str, seed: int) -> Case:
    """Case ``seed`` of ``op``; family "grad/<family>" is the float64 gradient variant."""
    if family == "autograd":
        return Case(family, op, seed, gen_autograd(Draw(seed, grad=True), op, None))
    if family.startswith("grad/"):
        base = family.split("/", 1)[1]
        call = FAMILIES[base][0](Draw(seed, grad=True), op, "float64")
        return Case(family, op, seed, call, grad=True)
    gen = FAMILIES[family][0]
    # the input dtype cycles with the seed, so every op meets every dtype in CI
    dtype = DTYPES[seed % len(DTYPES)] if family not in ("factories", "linalg") else None
    return Case(family, op, seed, gen(Draw(seed), op, dtype), strides=family == "views")


def _ci_cases():
    for family, (_, ops, n) in FAMILIES.items():
        for op in ops:
            for seed in range(n):
                yield family, op, seed
    for family, ops in GRAD.items():
        for op in ops:
            for seed in range(GRAD_SEEDS):
                yield f"grad/{family}", op, seed


CI_CASES = list(_ci_cases())


@pytest.mark.parametrize(
    "family, op, seed", [pytest.param(*c, id=f"{c[0]}-{c[1]}-{c[2]}") for c in CI_CASES]
)
def test_matches_torch(family, op, seed):
    case = make_case(family, op, seed)
    found = mismatches(case)
    assert not found, f"{case!r}\n  " + "\n  ".join(found)


def test_every_op_runs_without_error_in_torch_for_some_case():
    """A generator that only produces errors would pass by 'both raise': each op must have
    CI cases that torch runs, including its gradient cases. (Autograd scenarios are single
    programs, each written to raise or not.)"""
    ran = defaultdict(int)
    for family, op, seed in CI_CASES:
        if family != "autograd":
            ran[family, op] += run(make_case(family, op, seed), torch).error is None
    assert [key for key, n in ran.items() if n == 0] == []


def test_comparison_reports_values_dtypes_shapes_and_raises():
    x = torch.tensor([1.0, float("nan")])
    assert compare(tp.tensor([1.0, float("nan")]), x, "out") == []
    assert compare(tp.tensor([1.0, 0.0]), x, "out") != []
    assert compare(tp.tensor([1.0, float("nan")], dtype=tp.float64), x, "out") != []
    assert compare(tp.tensor([[1.0, float("nan")]]), x, "out") != []
    assert compare(tp.tensor([1.0005, float("nan")], dtype=tp.float16), x.half(), "out") == []
    assert compare(tp.tensor([1.01, float("nan")], dtype=tp.float16), x.half(), "out") != []
    raises_in_torch_only = Case("t", "t", 0, Call("fn", "ones", (-1,)))
    assert run(raises_in_torch_only, torch).error is not None


# ---- fuzz: many more seeds, outside CI -----------------------------------------------------------


def _fuzz_families():
    yield from FAMILIES
    yield from (f"grad/{f}" for f in GRAD)


@pytest.mark.fuzz
@pytest.mark.parametrize("family", list(_fuzz_families()))
def test_fuzz_matches_torch(family):
    """``TP_FUZZ_CASES`` random cases of ``family`` (ops in turn); every mismatch is
    reported, grouped by op and kind, with the first reproducer of each group."""
    n = int(os.environ.get("TP_FUZZ_CASES", "20000"))
    start = int(os.environ.get("TP_FUZZ_SEED", "1000000"))
    ops = GRAD[family.split("/", 1)[1]] if family.startswith("grad/") else FAMILIES[family][1]
    groups: dict = defaultdict(list)
    for i in range(n):
        case = make_case(family, ops[i % len(ops)], start + i // len(ops))
        for m in mismatches(case):
            kind = m.split(":", 2)[:2]
            groups[case.op, ":".join(kind)].append((case, m))
    summary = [
        f"{len(hits):5d}x {op} {kind}\n        e.g. {hits[0][0]!r}\n        {hits[0][1]}"
        for (op, kind), hits in sorted(groups.items(), key=lambda g: -len(g[1]))
    ]
    total = sum(len(h) for h in groups.values())
    assert not groups, f"{total} mismatches in {n} cases of {family}:\n" + "\n".join(summary)
