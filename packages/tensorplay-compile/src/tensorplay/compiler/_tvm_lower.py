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
from types import ModuleType
from typing import Any

from tensorplay.compiler._fastmath import FastMath
from tensorplay.compiler._lowerings import LOWERINGS, Tir
from tensorplay.compiler._pointwise import PointwiseOp, Region
from tensorplay.graph._graph import Node

__all__ = ["MAX_EXPRESSION", "Kernel", "expansion", "lower_region"]


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
    input_dtypes: list
    output_dims: list  # per output: tuple of int or _Dim
    output_dtypes: list
    source: str  # the scheduled TIR, for debugging and docs

    def accepts(self, inputs: list) -> bool:
        """The tensors have the dtypes and static sizes the kernel was built for."""
        for t, dims, dtype in zip(inputs, self.input_dims, self.input_dtypes):
            if t.dtype.name != dtype or len(t.shape) != len(dims):
                return False
            if any(d != n for d, n in zip(dims, t.shape) if not isinstance(d, _Dim)):
                return False
        return True

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

    # Values are composed inline (one expression per output), every read building a fresh
    # copy (see _lowerings); the partitioner bounds how large that gets (``expansion``).
    def build(node: Node, idx: tuple) -> Any:
        return _emit(region.ops[node], len(dims[node]), idx)

    def body(members: list) -> Any:
        def fcompute(*idx: Any) -> Any:  # TE reads the positional arity
            exprs = [fm.hoisted(lambda m=m: build(m, tuple(idx))) for m in members]
            return exprs if len(exprs) > 1 else exprs[0]

        return fcompute

    def _emit(op: PointwiseOp, rank: int, idx: tuple) -> Any:
        lowering = LOWERINGS[op.name]
        dts = ["bool" if i in lowering.bool_operands else op.compute_dtype for i in range(3)]
        args = [
            None if o is None else (lambda o=o, dt=dt: operand(o, rank, idx, dt))
            for o, dt in zip(op.operands, dts)
        ]
        k = Tir(tvm, fm, op.compute_dtype, fast=fast_math and op.dtype == "float32")
        return lowering.formula(k, op, *args).astype(op.dtype)

    # ---- one compute per output shape ----------------------------------------------------
    groups: dict[tuple, list[Node]] = {}
    for out in region.outputs:
        key = tuple(d.root() if isinstance(d, _Dim) else d for d in dims[out])
        groups.setdefault(key, []).append(out)
    outputs: list[Node] = []
    tensors = []
    for g, (_, members) in enumerate(groups.items()):
        shape = [as_var(d, f"m{g}_{a}") for a, d in enumerate(dims[members[0]])]

        result = te.compute(shape, body(members), name=f"out{g}")
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
        input_dtypes=[_dtype_of(i) for i in region.inputs],
        output_dims=[dims[o] for o in outputs],
        output_dtypes=[_dtype_of(o) for o in outputs],
        source=mod.script(),
    )


MAX_EXPRESSION = 2000


def expansion(op: PointwiseOp, *, fast_math: bool = True) -> int:
    """Copies of each operand in ``op``'s expression (an upper bound; see ``Lowering.copies``).

    Without fast math no formula binds its argument with ``Let`` and the count is capped
    at the three direct reads of a NaN-aware max/min.
    """
    copies = LOWERINGS[op.name].copies
    return copies if fast_math else min(copies, 3)


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
