"""One fused region -> one TIR PrimFunc -> one compiled TVM kernel.

``te.placeholder`` per region input, the region's nodes composed as expressions (no
intermediate buffers), one ``te.compute`` per output shape (a tuple compute when several
outputs share it), ``te.create_prim_func``, a schedule (CPU: fuse, split by the vector
width, parallel outer loop, vectorised inner loop; CUDA: fuse and bind blocks/threads),
then ``tvm.compile``.

Shapes: static shapes come from the nodes' meta values. With ``dynamic=True`` every dim
that is not 0 or 1 is a symbolic ``te.var``; dims broadcast against each other share one
variable (union-find), so one kernel serves every size.
"""

from __future__ import annotations

import dataclasses
import math
from types import ModuleType
from typing import Any

from tensorplay.compiler._fastmath import FastMath
from tensorplay.compiler._pointwise import PointwiseOp, Region
from tensorplay.graph._graph import Node

__all__ = ["Kernel", "lower_region"]


class _Dim:
    """A symbolic size; ``root()`` is its union-find representative."""

    __slots__ = ("parent", "var")

    def __init__(self) -> None:
        self.parent: _Dim | None = None
        self.var: Any = None

    def root(self) -> _Dim:
        d = self
        while d.parent is not None:
            d = d.parent
        return d


def _unify(dims: list) -> Any:
    """The size of one broadcast axis given its operands' sizes (ints or ``_Dim`` s)."""
    symbolic = [d.root() for d in dims if isinstance(d, _Dim)]
    if not symbolic:
        return max(dims, default=1) if 0 not in dims else 0
    first = symbolic[0]
    for d in symbolic[1:]:
        if d is not first:
            d.parent = first
    return first


def _aligned(shape: tuple, rank: int) -> tuple:
    return (1,) * (rank - len(shape)) + tuple(shape)


@dataclasses.dataclass
class Kernel:
    """A compiled region: call with input arrays then output arrays (DLPack-compatible)."""

    func: Any
    region: Region
    input_dims: list  # per input: tuple of int or _Dim
    output_dims: list  # per output: tuple of int or _Dim
    output_dtypes: list
    source: str  # the scheduled TIR, for debugging and docs

    def output_shapes(self, input_shapes: list[tuple]) -> list[tuple]:
        """Concrete output shapes for these input shapes (binds the symbolic dims)."""
        sizes: dict[_Dim, int] = {}
        for dims, shape in zip(self.input_dims, input_shapes):
            for d, n in zip(dims, shape):
                if isinstance(d, _Dim):
                    sizes[d.root()] = n
        return [
            tuple(sizes[d.root()] if isinstance(d, _Dim) else d for d in dims)
            for dims in self.output_dims
        ]


def _dtype_of(node: Node) -> str:
    return node.meta["val"].dtype.name


def lower_region(
    tvm: ModuleType,
    region: Region,
    target: Any,
    *,
    dynamic: bool,
    parallel: bool,
    fast_math: bool,
    vector_lanes: int | None,
) -> Kernel:
    """Build and compile ``region`` for ``target``."""
    te, tirx = tvm.te, tvm.tirx
    fm = FastMath(tvm)

    # ---- shapes: ints (static) or _Dim (dynamic) per axis of every value -------------
    dims: dict[Node, tuple] = {}
    for inp in region.inputs:
        shape = tuple(inp.meta["val"].shape)
        dims[inp] = tuple(n if (not dynamic or n in (0, 1)) else _Dim() for n in shape)
    for node in region.nodes:
        op = region.ops[node]
        rank = len(node.meta["val"].shape)
        operand_dims = [_aligned(dims[o], rank) for o in op.operands if isinstance(o, Node)]
        if dynamic:
            dims[node] = tuple(_unify([d[a] for d in operand_dims]) for a in range(rank))
        else:
            dims[node] = tuple(node.meta["val"].shape)

    def as_var(d: Any, name: str) -> Any:
        if not isinstance(d, _Dim):
            return d
        r = d.root()
        if r.var is None:
            r.var = te.var(name, "int64")
        return r.var

    placeholders = {}
    for k, inp in enumerate(region.inputs):
        shape = [as_var(d, f"n{k}_{a}") for a, d in enumerate(dims[inp])]
        placeholders[inp] = te.placeholder(shape, _dtype_of(inp), name=f"in{k}_{inp.name}")

    # ---- expressions -------------------------------------------------------------------
    def operand(value: Any, rank: int, idx: tuple, dtype: str) -> Any:
        """``value`` at output index ``idx``, converted to ``dtype`` (broadcast by rank)."""
        if not isinstance(value, Node):
            return tirx.const(value, dtype)
        own = dims[value]
        offset = rank - len(own)
        # a size-1 axis broadcasts: always read its element 0
        sub = tuple(0 if d == 1 else idx[offset + a] for a, d in enumerate(own))
        expr = placeholders[value](*sub) if value in placeholders else build(value, sub)
        return expr if str(expr.ty) == dtype else expr.astype(dtype)

    cache: dict[tuple, Any] = {}

    def build(node: Node, idx: tuple) -> Any:
        key = (node, tuple(id(i) if not isinstance(i, int) else i for i in idx))
        if key not in cache:
            cache[key] = _emit(region.ops[node], len(dims[node]), idx)
        return cache[key]

    def _emit(op: PointwiseOp, rank: int, idx: tuple) -> Any:
        cdt = op.compute_dtype
        args = [None if o is None else operand(o, rank, idx, cdt) for o in op.operands]
        if op.name == "where":
            args[0] = operand(op.operands[0], rank, idx, "bool")
        return _formula(tvm, fm, op, args, fast_math and op.dtype == "float32").astype(op.dtype)

    # ---- one compute per output shape ----------------------------------------------------
    groups: dict[tuple, list[Node]] = {}
    for out in region.outputs:
        key = tuple(d.root() if isinstance(d, _Dim) else d for d in dims[out])
        groups.setdefault(key, []).append(out)
    outputs: list[Node] = []
    tensors = []
    for g, (_, members) in enumerate(groups.items()):
        shape = [as_var(d, f"m{g}_{a}") for a, d in enumerate(dims[members[0]])]

        result = te.compute(shape, _body(build, members), name=f"out{g}")
        result = result if isinstance(result, (list, tuple)) else [result]
        outputs.extend(members)
        tensors.extend(result)
    region.outputs = outputs  # the kernel's output order
    func = te.create_prim_func([*placeholders.values(), *tensors])
    mod = _schedule(tvm, func, target, parallel=parallel, vector_lanes=vector_lanes)
    built = tvm.compile(mod, target=target)
    return Kernel(
        func=built["main"],
        region=region,
        input_dims=[dims[i] for i in region.inputs],
        output_dims=[dims[o] for o in outputs],
        output_dtypes=[_dtype_of(o) for o in outputs],
        source=mod.script(),
    )


def _body(build: Any, members: list) -> Any:
    """The ``fcompute`` of one output group (TE reads its positional arity)."""

    def body(*idx: Any) -> Any:
        exprs = [build(m, tuple(idx)) for m in members]
        return exprs if len(exprs) > 1 else exprs[0]

    return body


def _formula(tvm: ModuleType, fm: FastMath, op: PointwiseOp, a: list, fast: bool) -> Any:
    """The scalar expression of ``op`` on operand expressions ``a``."""
    te, tirx = tvm.te, tvm.tirx
    name, dt = op.name, op.compute_dtype
    is_float = dt.startswith("float")

    def c(v: float) -> Any:
        return tirx.const(v, dt)

    def nan_max(x: Any, y: Any) -> Any:  # numpy's maximum propagates NaN; LLVM maxnum drops it
        m = te.max(x, y)
        return tirx.Select(x != x, x, tirx.Select(y != y, y, m)) if is_float else m

    def nan_min(x: Any, y: Any) -> Any:
        m = te.min(x, y)
        return tirx.Select(x != x, x, tirx.Select(y != y, y, m)) if is_float else m

    exp = fm.exp if fast else te.exp
    if name == "add":
        alpha = op.params.get("alpha", 1)
        return a[0] + (a[1] if alpha == 1 else a[1] * c(alpha))
    if name == "sub":
        alpha = op.params.get("alpha", 1)
        return a[0] - (a[1] if alpha == 1 else a[1] * c(alpha))
    if name == "mul":
        return a[0] * a[1]
    if name == "div":
        return a[0] / a[1]
    if name == "pow":
        return te.power(a[0], a[1])
    if name == "maximum":
        return nan_max(a[0], a[1])
    if name == "minimum":
        return nan_min(a[0], a[1])
    if name in ("eq", "ne", "lt", "le", "gt", "ge"):
        return getattr(tirx, name.upper())(a[0], a[1])  # tirx.EQ, tirx.LT, ...
    if name == "neg":
        return -a[0]
    if name == "abs":
        return te.abs(a[0])
    if name == "square":
        return a[0] * a[0]
    if name == "sqrt":
        return te.sqrt(a[0])
    if name == "rsqrt":
        return c(1.0) / te.sqrt(a[0])
    if name == "reciprocal":
        return c(1.0) / a[0]
    if name == "exp":
        return exp(a[0])
    if name == "log":
        return te.log(a[0])
    if name == "sin":
        return te.sin(a[0])
    if name == "cos":
        return te.cos(a[0])
    if name == "tanh":
        return fm.tanh(a[0]) if fast else te.tanh(a[0])
    if name == "sigmoid":
        return fm.sigmoid(a[0]) if fast else c(1.0) / (c(1.0) + te.exp(-a[0]))
    if name == "silu":
        x = a[0]
        return x * (fm.sigmoid(x) if fast else c(1.0) / (c(1.0) + te.exp(-x)))
    if name == "relu":
        return nan_max(a[0], c(0)) if is_float else te.max(a[0], c(0))
    if name == "gelu":
        x = a[0]
        if op.params.get("approximate", "none") == "tanh":
            inner = c(math.sqrt(2 / math.pi)) * (x + c(0.044715) * x * x * x)
            return c(0.5) * x * (c(1.0) + (fm.tanh(inner) if fast else te.tanh(inner)))
        erf = fm.erf if fast else te.erf
        return c(0.5) * x * (c(1.0) + erf(x * c(1 / math.sqrt(2))))
    if name == "where":
        return tirx.Select(a[0], a[1], a[2])
    if name == "clamp":
        x, lo, hi = a
        if lo is not None:
            x = nan_max(x, lo)
        if hi is not None:
            x = nan_min(x, hi)
        return x
    if name == "cast":
        return a[0] != tirx.const(0, str(a[0].ty)) if dt == "bool" else a[0]
    raise NotImplementedError(f"no TVM formula for {name}")  # _pointwise.SUPPORTED guards this


def _schedule(
    tvm: ModuleType, func: Any, target: Any, *, parallel: bool, vector_lanes: int | None
) -> Any:
    """Loop schedule for every block of ``func``: vectorised + parallel (CPU) or bound to
    CUDA blocks and threads."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    is_gpu = target.kind.name in ("cuda", "rocm", "vulkan", "metal", "opencl")
    for block in sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []:
        loops = sch.get_loops(block)
        if not loops:
            continue
        loop = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        if is_gpu:
            bx, tx = sch.split(loop, factors=[None, 256])
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
            continue
        lanes = vector_lanes or _cpu_lanes(target)
        outer, inner = sch.split(loop, factors=[None, lanes])
        if parallel:
            sch.parallel(outer)
        sch.vectorize(inner)
    return sch.mod


def _has_root(sch: Any) -> bool:
    try:
        sch.get_sblock("root")
    except Exception:  # noqa: BLE001 - a PrimFunc without a root block has nothing to schedule
        return False
    return True


def _cpu_lanes(target: Any) -> int:
    """float32 lanes of one vector register for the target CPU (16 with AVX-512)."""
    mcpu = str(target.attrs.get("mcpu", ""))
    features = str(target.attrs.get("mattr", ""))
    if "avx512" in features or mcpu.startswith(
        ("znver4", "znver5", "skylake-avx512", "cascadelake", "icelake", "sapphirerapids")
    ):
        return 16
    return 8
