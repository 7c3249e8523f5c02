"""The autograd layer of library ops, for calls with inputs that require grad.

The kernel runs below autograd: grad mode off and every input detached (a view sharing
its memory and version counter), so the kernel may call ``x.numpy()`` and its own ops
record nothing. In grad mode the forward then builds one graph node directly (no
``Function.apply`` round trip): it calls the ``backward`` given to ``register_autograd``,
or, for an op without one, raises "Autograd has not been implemented" (the op is not
differentiated through its body, as in PyTorch).

The context is core's ``FunctionCtx``, so ``ctx.save_for_backward``,
``ctx.saved_tensors``, ``ctx.needs_input_grad``, ``ctx.mark_non_differentiable`` and
``ctx.set_materialize_grads`` behave as in a ``tp.autograd.Function``.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from tensorplay import Tensor, zeros
from tensorplay._extension import differentiable_dtype, dispatch_mode_stack, sum_to
from tensorplay.autograd import grad_mode
from tensorplay.autograd.function import FunctionCtx
from tensorplay.autograd.graph import Node, SavedTensor, edge_of

if TYPE_CHECKING:
    from tensorplay.library._op import CustomOpDef

__all__ = ["apply", "CustomOpBackward"]

_grad = grad_mode.state
_modes = dispatch_mode_stack  # .modes: the dispatch modes of this thread
_NO_EDGE = (None, 0)


def apply(op: CustomOpDef, args: tuple, kwargs: dict):
    """Run ``op`` below autograd on detached inputs; in grad mode, attach its backward node
    to the outputs."""
    recording = _grad.enabled
    formula = op._formula  # one snapshot: a concurrent register_autograd applies next call
    if recording and op._mutates_args:
        _check_mutated(op, args, kwargs)
    below_args = tuple(_detached(a) for a in args)
    below_kwargs = {k: _detached(v) for k, v in kwargs.items()} if kwargs else kwargs
    if _modes.modes:  # a dispatch mode sees the call (its ``func`` runs without grad)
        output = op._through_mode(below_args, below_kwargs)
    else:
        first = below_args[0] if below_args else None
        kernel = op._table.get(first.device.type) if type(first) is Tensor else None
        if kernel is None:
            kernel = op._pick_kernel(below_args, below_kwargs)
        if not recording:
            return op._finish(below_args, below_kwargs, kernel(*below_args, **below_kwargs))
        _grad.enabled = False  # the kernel's own ops must not record: the node stands for them
        try:
            output = op._finish(below_args, below_kwargs, kernel(*below_args, **below_kwargs))
        finally:
            _grad.enabled = True
    if not recording:
        return output
    backward, setup_context = formula if formula is not None else (None, None)
    inputs = op._inputs(args, kwargs)
    single = not isinstance(output, (tuple, list))  # a list output: one grad per element
    outs = (output,) if single else tuple(output)
    ctx = FunctionCtx()
    node = CustomOpBackward(op, backward, ctx, inputs, outs)  # sets ctx.needs_input_grad
    if setup_context is not None:
        setup_context(ctx, inputs, output)
    ctx._node = weakref.ref(node)  # the node owns ctx; a strong reference back is a cycle
    _connect(node, ctx, outs)
    if ctx._to_save:
        ctx._saved = [None if t is None else SavedTensor(t, node) for t in ctx._to_save]
        ctx._to_save = ()  # raw references would keep the outputs (and the node) alive
    return output


def _detached(x: Any) -> Any:
    """``x`` as the kernel sees it: tensors that require grad are replaced by detached views
    (same memory, same version counter); lists of tensors element by element."""
    if isinstance(x, Tensor):
        return x.detach() if x.requires_grad else x
    if (type(x) is list or type(x) is tuple) and any(isinstance(y, Tensor) for y in x):
        return type(x)(_detached(y) for y in x)
    return x


def _requires_grad(x: Any) -> bool:
    if isinstance(x, Tensor):
        return x.requires_grad
    if type(x) is list or type(x) is tuple:
        return any(isinstance(y, Tensor) and y.requires_grad for y in x)
    return False


def _check_mutated(op: CustomOpDef, args: tuple, kwargs: dict) -> None:
    for name in op._mutates_args:
        if _requires_grad(op._argument(name, args, kwargs)):
            raise RuntimeError(
                f"{op.name}: argument {name!r} is mutated in place (mutates_args) and requires "
                "grad; autograd through mutated arguments is not supported. Pass a tensor that "
                "does not require grad (e.g. x.detach().clone()) or make the op functional"
            )


def _connect(node: CustomOpBackward, ctx: FunctionCtx, outs: tuple) -> None:
    """Point the differentiable outputs at ``node`` (they are new tensors: the kernel check
    refuses outputs that alias an input)."""
    non_diff = ctx._non_differentiable
    for i, o in enumerate(outs):
        if isinstance(o, Tensor):
            if not differentiable_dtype(o.dtype) or (non_diff and any(o is t for t in non_diff)):
                o.requires_grad = False
            else:
                o.requires_grad, o.grad_fn, o._output_nr = True, node, i


class CustomOpBackward(Node):
    """The backward node of one call of a library op: calls the registered ``backward``
    and checks that it returned one gradient per input, shaped like the input; without a
    registered ``backward`` it raises."""

    def __init__(self, op: CustomOpDef, backward, ctx: FunctionCtx, inputs: tuple, outs: tuple):
        edges: list = []
        layout: list = []  # per input: None (no gradient), -1 (one tensor) or n (a list of n)
        meta: list = []
        needs: list = []
        for x in inputs:
            if isinstance(x, Tensor):
                layout.append(-1)
                edges.append(edge_of(x))
                meta.append((x._shape, x.dtype))
                needs.append(x.requires_grad)
            elif (type(x) is list or type(x) is tuple) and x and isinstance(x[0], Tensor):
                layout.append(len(x))
                edges.extend(edge_of(y) if isinstance(y, Tensor) else _NO_EDGE for y in x)
                meta.extend((y._shape, y.dtype) if isinstance(y, Tensor) else None for y in x)
                needs.append(_requires_grad(x))
            else:
                layout.append(None)
                needs.append(False)
        super().__init__(tuple(edges), n_outputs=len(outs))
        ctx.needs_input_grad = tuple(needs)
        self.op, self.backward, self.ctx = op, backward, ctx
        self._layout, self._meta = layout, meta
        self._outs_meta = [
            (o._shape, o.dtype, o.device) if isinstance(o, Tensor) else None for o in outs
        ]

    def name(self) -> str:
        return f"{self.op.name}Backward"

    def release(self) -> None:
        self._released = True
        self.ctx._saved = None

    def apply(self, grad_outputs: list) -> tuple:
        if self.backward is None:
            name = self.op.name
            raise RuntimeError(
                f"Autograd has not been implemented for operator {name}: it was called with "
                "inputs that require grad, but it has no autograd formula (a custom op is not "
                f"differentiated through its body). Register one with {name}.register_autograd("
                "backward, setup_context=...), or call the op on detached inputs (x.detach()) "
                "if no gradient is needed"
            )
        if self.ctx.materialize_grads and any(g is None for g in grad_outputs):
            grad_outputs = [
                zeros(m[0], dtype=m[1], device=m[2]) if g is None and m is not None else g
                for g, m in zip(grad_outputs, self._outs_meta)
            ]
        grads = self.backward(self.ctx, *grad_outputs)
        return self._flatten(grads)

    def _flatten(self, grads) -> tuple:
        layout = self._layout
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        elif len(layout) == 1 and layout[0] not in (None, -1):
            # one list-of-tensors input: accept its gradient list bare or wrapped in a tuple
            if not (len(grads) == 1 and isinstance(grads[0], (tuple, list))):
                grads = (grads,)
        if len(grads) != len(layout):
            names = self.op._input_names()
            raise RuntimeError(
                f"{self.op.name}: the backward registered with register_autograd returned "
                f"{len(grads)} gradient(s), but the op has {len(layout)} input(s)"
                + (f" ({', '.join(names)})" if names else "")
                + "; return one per input, None for inputs that get no gradient"
            )
        flat: list = []
        for i, (g, kind) in enumerate(zip(grads, layout)):
            if kind is None:
                continue  # a non-tensor input: whatever was returned is ignored (None expected)
            if kind == -1:
                flat.append(g)
            elif g is None:
                flat.extend([None] * kind)
            elif isinstance(g, (list, tuple)) and len(g) == kind:
                flat.extend(g)
            else:
                raise RuntimeError(
                    f"{self.op.name}: backward must return a list of {kind} gradients for "
                    f"input {i} (a list of tensors), got {type(g).__name__}"
                )
        return tuple(self._fit(i, g, m) for i, (g, m) in enumerate(zip(flat, self._meta)))

    def _fit(self, i: int, g, meta):
        if g is None or meta is None:
            return None
        if not isinstance(g, Tensor):
            raise TypeError(
                f"{self.op.name}: backward returned a {type(g).__name__} as gradient {i}; "
                "expected a Tensor or None"
            )
        shape, dt = meta
        if g._shape != shape:
            try:
                fitted = sum_to(g, shape) if len(g._shape) >= len(shape) else g
            except RuntimeError:
                fitted = g
            if fitted._shape != shape:
                raise RuntimeError(
                    f"{self.op.name}: backward returned gradient {i} of shape "
                    f"{list(g._shape)}, but the input has shape {list(shape)}"
                )
            g = fitted
        return g if g.dtype is dt else g.to(dt)
