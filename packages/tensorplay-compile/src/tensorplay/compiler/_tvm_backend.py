"""The ``"tvm"`` backend: partition, lower each region, run the plan.

At run time the plan is a list of steps. A region step hands its inputs' storage to
the kernel zero-copy (DLPack from the arrays behind the tensors; a view that is not
contiguous or not 64-byte aligned is copied first, because TVM's vectorised loads
assume aligned, compact buffers) and writes into outputs allocated by TensorPlay. Every
other node runs through the ``Interpreter``, which calls the real op (library ops with
their registered kernels and autograd).

Training: when grad mode is on and a region input requires grad, the kernel runs inside
an ``autograd.Function`` whose backward replays the region's nodes eagerly and
differentiates them (recompute: no intermediate is kept from the forward kernel).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import tensorplay as tp
from tensorplay.compiler._barriers import barrier_kind
from tensorplay.compiler._pointwise import Plan, PointwiseOp, Region, partition
from tensorplay.compiler._report import ReportRow
from tensorplay.compiler._tvm_env import configure_threads, load_tvm, resolve_target
from tensorplay.compiler._tvm_lower import MAX_EXPRESSION, Kernel, expansion, lower_region
from tensorplay.graph import GraphModule, Interpreter
from tensorplay.graph._graph import Node

__all__ = ["compile_graph"]

_ALIGN = 64
logger = logging.getLogger("tensorplay.compiler")


def compile_graph(
    gm: GraphModule,
    example_inputs: list,
    *,
    target: Any,
    parallel: bool,
    num_threads: int | None,
    fast_math: bool,
    vector_lanes: int | None,
) -> Callable:
    """Build the TVM artifact for ``gm`` (a callable taking the graph's inputs).

    ``gm.dynamic`` (set by ``tp.compile(dynamic=True)``) asks for symbolic-shape kernels.
    """
    tvm = load_tvm()
    dynamic = bool(getattr(gm, "dynamic", False))
    devices = {t.device.type for t in example_inputs if isinstance(t, tp.Tensor)}
    device_type = "cuda" if "cuda" in devices else "cpu"
    tvm_target = resolve_target(tvm, target, device_type)
    if device_type == "cpu":
        configure_threads(tvm, num_threads)

    def copies(op: PointwiseOp) -> int:
        return expansion(op, fast_math=fast_math)

    plan = partition(gm.graph, device_type, copies=copies, max_size=MAX_EXPRESSION)
    kernels: dict[Region, Kernel] = {}
    for step in plan.steps:
        if not isinstance(step, Region):
            continue
        try:
            kernels[step] = lower_region(
                tvm,
                step,
                tvm_target,
                dynamic=dynamic,
                parallel=parallel,
                fast_math=fast_math,
                vector_lanes=vector_lanes,
            )
        except Exception as e:  # noqa: BLE001 - a kernel TVM cannot build must not fail the call
            reason = f"TVM build failed: {_message(e)}"
            plan.reasons.update(dict.fromkeys(step.nodes, reason))
    plan = _without_failed_regions(plan, kernels)
    runner = _Runner(gm, plan, kernels)

    def run(*args: Any) -> Any:
        return runner.run(*args)

    run.report_rows = _rows(gm, plan)  # type: ignore[attr-defined]
    run.kernels = list(kernels.values())  # type: ignore[attr-defined]
    run._tensorplay_codegen = "tvm"  # type: ignore[attr-defined]
    run._tensorplay_target = str(tvm_target.kind.name)  # type: ignore[attr-defined]
    return run


def _message(error: Exception) -> str:
    """The error's own message: TVM puts it on the last line, after its C++ traceback."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def _without_failed_regions(plan: Plan, kernels: dict[Region, Kernel]) -> Plan:
    """``plan`` with every region that has no kernel run node by node by the interpreter.

    The region's nodes keep their graph order and their inputs were ready before the
    region, so running them in its place keeps the steps valid.
    """
    steps: list = []
    for step in plan.steps:
        if isinstance(step, Region) and step not in kernels:
            steps.extend(step.nodes)
        else:
            steps.append(step)
    return Plan(steps, plan.reasons)


def _rows(gm: GraphModule, plan: Plan) -> list[ReportRow]:
    region_of = {n: s for s in plan.steps if isinstance(s, Region) for n in s.nodes}
    rows = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        if node in region_of:
            rows.append(ReportRow(node.name, node.op_name, "tvm", region=region_of[node].index))
            continue
        kind = barrier_kind(node)
        reason = plan.reasons.get(node, "not pointwise")
        # library ops are barriers by design; a core op left to the interpreter is a fallback
        rows.append(
            ReportRow(node.name, node.op_name, kind or "interpreter", reason, fallback=not kind)
        )
    return rows


class _Runner(Interpreter):
    """Runs the plan: kernels for regions, the interpreter for every other node."""

    def __init__(self, gm: GraphModule, plan: Plan, kernels: dict[Region, Kernel]) -> None:
        super().__init__(gm)
        self.plan = plan
        self.kernels = kernels
        self._last_step_use = _last_uses(gm, plan)
        self._mismatched: set[Region] = set()

    def run(self, *args: Any) -> Any:
        self.env = {}
        try:
            for node, value in zip(self.module.graph.placeholders, args):
                self.env[node] = value
            for node in self.module.graph.nodes:
                if node.op == "get_attr":
                    self.env[node] = getattr(self.module, node.target)
            for i, step in enumerate(self.plan.steps):
                if isinstance(step, Region):
                    outs = self._run_region(step)
                    self.env.update(zip(step.outputs, outs))
                else:
                    self.env[step] = self.run_node(step)
                for dead in self._last_step_use.get(i, ()):
                    self.env.pop(dead, None)
            return self.fetch(self.module.graph.output_node.args[0])
        finally:
            self.env = {}

    def _run_region(self, region: Region) -> list:
        inputs = [self.env[n] for n in region.inputs]
        kernel = self.kernels[region]
        if not kernel.accepts(inputs):
            # the captured metadata was wrong (a fake kernel's dtype or shape): the kernel
            # would misread the buffers, so this call runs the region's ops eagerly
            if region not in self._mismatched:  # logged once per region
                self._mismatched.add(region)
                got = [f"{t.dtype.name}{list(t.shape)}" for t in inputs]
                logger.info(
                    "tp.compile: TVM region %d was built for inputs %s, got %s; it runs eagerly",
                    region.index,
                    kernel.input_dtypes,
                    got,
                )
            for node in region.nodes:
                self.env[node] = self.run_node(node)
            return [self.env[o] for o in region.outputs]
        if tp.is_grad_enabled() and any(t.requires_grad for t in inputs):
            return list(_RegionFunction.apply(kernel, *inputs))
        return run_kernel(kernel, inputs)


def _last_uses(gm: GraphModule, plan: Plan) -> dict[int, list[Node]]:
    """step index -> values no later step (nor the output) reads."""
    step_of: dict[Node, int] = {}
    for i, step in enumerate(plan.steps):
        for node in step.nodes if isinstance(step, Region) else [step]:
            step_of[node] = i
    last: dict[Node, int] = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        user_steps = [step_of[u] for u in node.users if u in step_of]
        if any(u.op == "output" for u in node.users) or not user_steps:
            continue
        last[node] = max(user_steps)
    out: dict[int, list[Node]] = {}
    for node, i in last.items():
        out.setdefault(i, []).append(node)
    return out


def _prepared(t: tp.Tensor) -> tp.Tensor:
    """``t`` itself when TVM can read its storage directly, else an aligned compact copy."""
    if t.is_contiguous() and t.data_ptr() % _ALIGN == 0:
        return t
    fresh = tp.empty(tuple(t.shape), dtype=t.dtype, device=t.device)
    fresh.copy_(t)
    return fresh


def run_kernel(kernel: Kernel, inputs: list) -> list:
    """Run ``kernel`` on tensors ``inputs``; outputs are fresh TensorPlay tensors."""
    with tp.no_grad():
        ready = [_prepared(t) for t in inputs]
        shapes = kernel.output_shapes([tuple(t.shape) for t in ready])
        device = ready[0].device if ready else tp.device("cpu")
        outs = [
            tp.empty(shape, dtype=getattr(tp, dt), device=device)
            for shape, dt in zip(shapes, kernel.output_dtypes)
        ]
        if all(o.numel() for o in outs):
            # the arrays behind the tensors (numpy / CuPy) go in through DLPack, zero-copy
            kernel.func(*(t._data for t in ready), *(o._data for o in outs))
    return outs


class _Replay(Interpreter):
    """Runs chosen nodes eagerly on a given environment (a region's backward)."""

    def __init__(self, env: dict[Node, Any]) -> None:
        self.env = env


class _RegionFunction(tp.autograd.Function):
    """A region as one autograd node: TVM forward, eager replay for backward."""

    @staticmethod
    def forward(ctx: Any, kernel: Kernel, *inputs: tp.Tensor) -> tuple:
        ctx.kernel = kernel
        ctx.save_for_backward(*inputs)
        outs = run_kernel(kernel, list(inputs))
        ctx.mark_non_differentiable(*(o for o in outs if not o.dtype.is_floating_point))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        region = ctx.kernel.region
        inputs = ctx.saved_tensors
        with tp.enable_grad():
            leaves = [
                t.detach().requires_grad_(need) if t.dtype.is_floating_point else t.detach()
                for t, need in zip(inputs, ctx.needs_input_grad[1:])
            ]
            replay = _Replay(dict(zip(region.inputs, leaves)))
            env = replay.env
            for node in region.nodes:
                env[node] = replay.run_node(node)
            pairs = [
                (env[o], g)
                for o, g in zip(region.outputs, grads)
                if g is not None and env[o].requires_grad
            ]
            wanted = [x for x in leaves if x.requires_grad]
            found = (
                tp.autograd.grad(
                    [o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True
                )
                if pairs and wanted
                else [None] * len(wanted)
            )
        by_leaf = dict(zip(map(id, wanted), found))
        return (None, *(by_leaf.get(id(x)) for x in leaves))
