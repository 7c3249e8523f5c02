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
    """Build and compile ``region`` for ``target``, in five steps:

    1. ``_value_dims``: the size of every axis of every value in the region (ints, or
       ``_Dim`` s unified across broadcasting when ``dynamic``);
    2. ``_placeholders``: one ``te.placeholder`` per region input;
    3. ``_Composer``: a node's scalar expression at an output index, its formula
       (``_lowerings``) applied to operands read from the placeholders or composed inline
       from the region's other nodes, so no intermediate is ever stored;
    4. ``_computes``: one ``te.compute`` per output shape (``_output_groups``), which
       fixes the kernel's output order;
    5. ``te.create_prim_func``, ``_schedule`` and ``tvm.compile``.
    """
    te = tvm.te
    dims = _value_dims(region, dynamic=dynamic)
    placeholders = _placeholders(te, region, dims)
    composer = _Composer(tvm, region, dims, placeholders, fast_math=fast_math)
    outputs, tensors = _computes(te, composer, _output_groups(region.outputs, dims), dims)
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


def _value_dims(region: Region, *, dynamic: bool) -> dict[Node, tuple]:
    """Per region input and node, the size of each axis.

    Static: the meta value's shape. Dynamic: an input's size that is not 0 or 1 becomes a
    fresh ``_Dim``, and a node's axis unifies its operands' (broadcast) axes.
    """
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
    return dims


def _extent(te: Any, d: Any, name: str) -> Any:
    """An axis size for TE: the int itself, or the ``te.var`` of ``d``'s union-find class
    (made, and named ``name``, by its first use)."""
    if not isinstance(d, _Dim):
        return d
    r = d.root()
    if r.var is None:
        r.var = te.var(name, "int64")
    return r.var


def _placeholders(te: Any, region: Region, dims: dict[Node, tuple]) -> dict[Node, Any]:
    """One ``te.placeholder`` per region input, in the kernel's argument order."""
    placeholders = {}
    for k, inp in enumerate(region.inputs):
        shape = [_extent(te, d, f"n{k}_{a}") for a, d in enumerate(dims[inp])]
        placeholders[inp] = te.placeholder(shape, _dtype_of(inp), name=f"in{k}_{inp.name}")
    return placeholders


class _Composer:
    """The scalar expressions of a region's nodes, composed inline.

    ``expression(node, idx)`` is ``node``'s value at output index ``idx``: its lowering's
    formula applied to its operands, each a placeholder read or another node's expression.
    Every read composes a fresh copy (formulas take operands as thunks; see
    ``_lowerings``); the partitioner bounds how large that gets (``expansion``).
    """

    def __init__(
        self,
        tvm: ModuleType,
        region: Region,
        dims: dict[Node, tuple],
        placeholders: dict[Node, Any],
        *,
        fast_math: bool,
    ) -> None:
        self.tvm = tvm
        self.ops = region.ops
        self.dims = dims
        self.placeholders = placeholders
        self.fast_math = fast_math
        self.fm = FastMath(tvm)

    def fcompute(self, members: list[Node]) -> Any:
        """The ``fcompute`` of one ``te.compute`` producing ``members`` (a tuple when several)."""

        def fcompute(*idx: Any) -> Any:  # TE reads the positional arity
            exprs = [self.fm.hoisted(lambda m=m: self.expression(m, tuple(idx))) for m in members]
            return exprs if len(exprs) > 1 else exprs[0]

        return fcompute

    def expression(self, node: Node, idx: tuple) -> Any:
        """``node``'s value at index ``idx`` of its own shape, in its dtype."""
        op: PointwiseOp = self.ops[node]
        rank = len(self.dims[node])
        lowering = LOWERINGS[op.name]
        dts = ["bool" if i in lowering.bool_operands else op.compute_dtype for i in range(3)]
        args = [
            None if o is None else (lambda o=o, dt=dt: self.operand(o, rank, idx, dt))
            for o, dt in zip(op.operands, dts)
        ]
        k = Tir(self.tvm, self.fm, op.compute_dtype, fast=self.fast_math and op.dtype == "float32")
        return lowering.formula(k, op, *args).astype(op.dtype)

    def operand(self, value: Any, rank: int, idx: tuple, dtype: str) -> Any:
        """``value`` at output index ``idx``, converted to ``dtype`` (broadcast by rank)."""
        if not isinstance(value, Node):
            return self.tvm.tirx.const(value, dtype)
        own = self.dims[value]
        offset = rank - len(own)
        # a size-1 axis broadcasts: always read its element 0
        sub = tuple(0 if d == 1 else idx[offset + a] for a, d in enumerate(own))
        if value in self.placeholders:
            expr = self.placeholders[value](*sub)
        else:
            expr = self.expression(value, sub)
        return expr if str(expr.ty) == dtype else expr.astype(dtype)


def _output_groups(outputs: list[Node], dims: dict[Node, tuple]) -> list[list[Node]]:
    """The region's outputs grouped by shape (a symbolic axis by its union-find class)."""
    groups: dict[tuple, list[Node]] = {}
    for out in outputs:
        key = tuple(d.root() if isinstance(d, _Dim) else d for d in dims[out])
        groups.setdefault(key, []).append(out)
    return list(groups.values())


def _computes(
    te: Any, composer: _Composer, groups: list[list[Node]], dims: dict[Node, tuple]
) -> tuple[list[Node], list]:
    """One ``te.compute`` per group: the outputs in kernel order and their TE tensors."""
    outputs: list[Node] = []
    tensors = []
    for g, members in enumerate(groups):
        shape = [_extent(te, d, f"m{g}_{a}") for a, d in enumerate(dims[members[0]])]
        result = te.compute(shape, composer.fcompute(members), name=f"out{g}")
        outputs.extend(members)
        tensors.extend(result if isinstance(result, (list, tuple)) else [result])
    return outputs, tensors


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
