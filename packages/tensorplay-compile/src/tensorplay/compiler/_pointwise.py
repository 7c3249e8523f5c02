"""Which captured nodes are pointwise ops a kernel can compute, and the fused regions.

This module knows nothing about TVM: it normalises a node to ``PointwiseOp`` (op name,
operands, parameters, dtypes) or says in words why it cannot, and cuts the graph into
steps: maximal regions of pointwise nodes (one kernel each) and single nodes the
interpreter runs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any

import tensorplay as tp
from tensorplay._extension import OPS
from tensorplay.compiler._barriers import barrier_kind
from tensorplay.compiler._lowerings import NOT_LOWERED, Lowering, find
from tensorplay.graph._graph import Graph, Node

__all__ = ["Plan", "PointwiseOp", "Region", "normalise", "partition"]

DTYPES = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64"})
# in-place spellings that make a graph order-sensitive (fusing could move reads past them)
_MUTATING_FUNCTIONS = (operator.setitem,)


@dataclasses.dataclass
class PointwiseOp:
    """A node in normal form: ``name(*operands, **params)`` producing ``dtype``.

    Operands are ``Node`` s (tensors) or Python numbers. ``compute_dtype`` is the dtype
    operands are converted to before the op (the promoted input dtype for comparisons,
    the result dtype otherwise).
    """

    name: str
    operands: list
    params: dict
    dtype: str
    compute_dtype: str


def _dtype_name(t: Any) -> str:
    return t.dtype.name if isinstance(t, tp.Tensor) else type(t).__name__


def _public_name(target: Any) -> str | None:
    """The op-table name ``target`` is the function of: public (``tp.relu``) or one of the
    rows autograd calls without a public name (``_threshold_backward``, relu's backward)."""
    name = getattr(target, "__name__", None)
    if not name:
        return None
    if getattr(tp, name, None) is target:
        return name
    row = OPS.get(name)
    return name if row is not None and row.fn is target else None


def _bind(name: str, args: tuple, kwargs: dict) -> dict:
    return dict(_signature(name).bind(*args, **kwargs).arguments)


@functools.cache
def _signature(name: str) -> inspect.Signature:
    fn = getattr(tp, name, None)
    return inspect.signature(fn if fn is not None else OPS[name].fn)


def normalise(node: Node) -> tuple[PointwiseOp | None, str]:
    """``(PointwiseOp, "")`` for a lowerable node, else ``(None, reason)``."""
    if node.op == "call_function":
        name = _public_name(node.target)
        args, kwargs = node.args, node.kwargs
    elif node.op == "call_method":
        name, args, kwargs = node.target, node.args, node.kwargs
        if name == "where" and len(args) >= 2:  # x.where(cond, y) is where(cond, x, y)
            name, args = "where", (args[1], args[0], *args[2:])
    else:
        return None, ""
    if name is None:
        return None, "not a TensorPlay op"
    lowering = find(name)
    if lowering is None:
        if name in NOT_LOWERED:
            return None, f"{name} is not lowered: {NOT_LOWERED[name]}"
        return None, "not pointwise" if not name.endswith("_") else "in-place op"
    if lowering.name == "_to_copy":
        return _cast(node, name, args, kwargs)
    try:
        bound = _bind(name, args, kwargs)
    except TypeError as e:
        return None, f"unexpected arguments ({e})"
    if bound.pop("out", None) is not None:
        return None, "out= is not lowered"
    names = list(_signature(name).parameters)
    operands = [bound.pop(n, None) for n in names[: lowering.arity]]
    params = bound
    refused = lowering.refuses(params)
    if refused:
        return None, refused
    for o in operands:
        if isinstance(o, Node):
            if o.meta.get("val") is None:
                return None, f"shape/dtype of {o.name} unknown (no fake kernel)"
        elif o is not None and type(o) not in (int, float, bool):
            return None, f"operand of type {type(o).__name__} is not lowered"
    out = node.meta.get("val")
    if out is None:
        return None, "shape/dtype unknown (no fake kernel)"
    tensors = [o.meta["val"] for o in operands if isinstance(o, Node)]
    for t in [out, *tensors]:
        if t.dtype.name not in DTYPES:
            return None, f"dtype {t.dtype.name} unsupported"
    return _typed(lowering, operands, params, out.dtype.name)


def _typed(
    lowering: Lowering, operands: list, params: dict, dtype: str
) -> tuple[PointwiseOp | None, str]:
    """The op in normal form once its dtypes are known, or why they are not lowered."""
    name = lowering.name
    # comparisons compare in the promoted input dtype; everything else computes in its result's
    compute = tp.result_type(*_two(operands)).name if lowering.compare else dtype
    if compute == "bool" and not (lowering.compare or lowering.bool_compute):
        return None, "bool arithmetic is not lowered"
    if lowering.float_only and not dtype.startswith("float"):
        return None, f"{name} on {dtype}"
    return PointwiseOp(name, operands, params, dtype, compute), ""


def _two(operands: list) -> tuple:
    """The two operands as tensors-or-numbers for ``tp.result_type``."""
    return tuple(o.meta["val"] if isinstance(o, Node) else o for o in operands[:2])


def _cast(node: Node, name: str, args: tuple, kwargs: dict) -> tuple[PointwiseOp | None, str]:
    src = args[0] if args else None
    out = node.meta.get("val")
    if not isinstance(src, Node) or src.meta.get("val") is None or out is None:
        return None, "shape/dtype unknown (no fake kernel)"
    if name == "to" and (
        kwargs.keys() - {"dtype"} or any(not isinstance(a, tp.dtype) for a in args[1:])
    ):
        return None, "to() with a device or copy= is not lowered"
    if out.device != src.meta["val"].device:
        return None, "device transfer"
    for t in (out, src.meta["val"]):
        if t.dtype.name not in DTYPES:
            return None, f"dtype {t.dtype.name} unsupported"
    # computed in the source dtype: a cast to bool is a comparison with 0 there
    return PointwiseOp("_to_copy", [src], {}, out.dtype.name, src.meta["val"].dtype.name), ""


# ---- partition -----------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Region:
    """Nodes computed by one kernel; ``inputs`` come from outside, ``outputs`` leave it."""

    index: int
    nodes: list[Node] = dataclasses.field(default_factory=list)
    ops: dict[Node, PointwiseOp] = dataclasses.field(default_factory=dict)
    inputs: list[Node] = dataclasses.field(default_factory=list)
    outputs: list[Node] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Plan:
    """Steps in execution order (a ``Region`` or a ``Node``) and every node's reason."""

    steps: list
    reasons: dict[Node, str]


def mutation(graph: Graph) -> Node | None:
    """The first node that writes into an existing tensor (in-place op, setitem, out=)."""
    for n in graph.nodes:
        if n.op == "call_method" and n.target.endswith("_") and not n.target.startswith("_"):
            return n
        if n.op == "call_function":
            if n.target in _MUTATING_FUNCTIONS or "out" in n.kwargs:
                return n
            if getattr(n.target, "__qualname__", "").startswith("Tensor.") and getattr(
                n.target, "__name__", ""
            ).endswith("_"):
                return n
    return None


def partition(
    graph: Graph,
    device_type: str,
    *,
    copies: Callable[[PointwiseOp], int] = lambda op: 1,
    max_size: int = 4000,
) -> Plan:
    """Cut ``graph`` into steps: maximal pointwise regions and interpreter nodes.

    A lowerable node joins the most recent region when every input it reads from outside
    that region is available before the region runs; otherwise it starts a new region.
    That keeps steps in a valid order without any cycle check.

    A region's nodes are composed into one expression, in which an operand appears
    ``copies(op)`` times; a node whose expression would exceed ``max_size`` terms starts
    a new region instead (its inputs are then read from memory), which keeps compile
    time linear in the graph.
    """
    steps: list = []
    position: dict[Node, int] = {}  # step index that makes a node's value available
    region_of: dict[Node, Region] = {}
    reasons: dict[Node, str] = {}
    size: dict[Node, int] = {}  # terms in a node's composed expression
    written = mutation(graph)
    last_region: Region | None = None
    region_pos = -1
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            position[node] = -1
            continue
        if node.op == "output":
            continue
        op, reason = normalise(node)
        kind = barrier_kind(node)
        if kind is not None:
            op, reason = None, f"{kind.replace('_', ' ')} is a fusion barrier"
        elif op is not None and written is not None:
            op, reason = None, f"the graph mutates a tensor in place ({written.name})"
        elif op is not None and _device_type(node) != device_type:
            op, reason = None, f"on device {_device_type(node)}, the kernels target {device_type}"
        if op is None:
            reasons[node] = reason or "not pointwise"
            position[node] = len(steps)
            steps.append(node)
            continue
        inputs = node.all_input_nodes
        joins = last_region is not None and all(
            region_of.get(i) is last_region or position[i] < region_pos for i in inputs
        )
        inner = [size[i] for i in inputs if joins and region_of.get(i) is last_region]
        size[node] = 1 + copies(op) * sum(inner or [0]) + len(inputs)
        if joins and size[node] > max_size:
            joins = False
            size[node] = 1 + len(inputs)
        if not joins:
            last_region = Region(index=sum(isinstance(s, Region) for s in steps))
            region_pos = len(steps)
            steps.append(last_region)
        last_region.nodes.append(node)
        last_region.ops[node] = op
        region_of[node] = last_region
        position[node] = region_pos
    for region in (s for s in steps if isinstance(s, Region)):
        members = set(region.nodes)
        for node in region.nodes:
            for i in node.all_input_nodes:
                if i not in members and i not in region.inputs:
                    region.inputs.append(i)
            if any(u not in members for u in node.users):
                region.outputs.append(node)
    return Plan(steps, reasons)


def _device_type(node: Node) -> str:
    device = node.meta.get("device")
    return device.type if device is not None else "unknown"
