"""The autograd layer of ``TensorOp`` entries (custom ops), for calls with inputs that
require grad.

The kernel runs below autograd: grad mode off and every input detached (a view sharing
its memory and version counter), so the kernel may call ``x.numpy()`` and its own ops
record nothing. In grad mode the forward then builds one graph node, ``TensorOpBackward``,
which calls the op's ``backward`` (``op._vjp``), or, for an op without one, raises
"Autograd has not been implemented" (the op is not differentiated through its body, as
in PyTorch).

The context is a ``FunctionCtx`` and the node shares ``Function``'s (``BackwardCFunction``):
``ctx.save_for_backward``, ``ctx.saved_tensors``, ``ctx.needs_input_grad``,
``ctx.mark_non_differentiable`` and ``ctx.set_materialize_grads`` behave as in a
``tp.autograd.Function``, and gradients are fitted by the one ``fit_grad``.
"""

from __future__ import annotations

import weakref
from typing import Any

from tensorplay import _dispatch
from tensorplay._native import any_requires_grad
from tensorplay._tensor import Tensor
from tensorplay.autograd import grad_mode
from tensorplay.autograd._record import differentiable_dtype
from tensorplay.autograd.function import BackwardCFunction, FunctionCtx
from tensorplay.autograd.graph import SavedTensor, input_edges

__all__ = ["record_call", "TensorOpBackward"]

_grad = grad_mode.state


def record_call(op, args: tuple, kwargs: dict):
    """Run ``op`` below autograd on detached inputs; in grad mode, attach its backward node
    to the outputs."""
    recording = _grad.enabled
    vjp = op._vjp  # one snapshot: a concurrent register_autograd applies from the next call
    if recording and op._mutates:
        _check_mutated(op, args, kwargs)
    below_args = tuple(_detached(a) for a in args)
    below_kwargs = {k: _detached(v) for k, v in kwargs.items()} if kwargs else kwargs
    if not recording:
        return op.below_autograd(below_args, below_kwargs)
    if _dispatch.dispatch_modes.active():
        # as for built-in ops, a mode sees grad mode as the caller set it; the ``func`` it
        # calls runs without recording
        output = op.below_autograd(below_args, below_kwargs)
    else:
        _grad.enabled = False  # the kernel's own ops must not record: the node stands for them
        try:
            output = op.below_autograd(below_args, below_kwargs)
        finally:
            _grad.enabled = True
    backward, setup_context = vjp if vjp is not None else (None, None)
    inputs = op.inputs(args, kwargs)
    single = not isinstance(output, (tuple, list))  # a list output: one grad per element
    outs = (output,) if single else tuple(output)
    ctx = FunctionCtx()
    node = TensorOpBackward(op, backward, ctx, inputs, outs)  # sets ctx.needs_input_grad
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


def _check_mutated(op, args: tuple, kwargs: dict) -> None:
    for name in op._mutates:
        if any_requires_grad((op.argument(name, args, kwargs),)):
            raise RuntimeError(
                f"{op.name}: argument {name!r} is mutated in place (mutates_args) and requires "
                "grad; autograd through mutated arguments is not supported. Pass a tensor that "
                "does not require grad (e.g. x.detach().clone()) or make the op functional"
            )


def _connect(node: TensorOpBackward, ctx: FunctionCtx, outs: tuple) -> None:
    """Point the differentiable outputs at ``node`` (they are new tensors: ``finish``
    refuses outputs that alias an input)."""
    non_diff = ctx._non_differentiable
    for i, o in enumerate(outs):
        if isinstance(o, Tensor):
            if not differentiable_dtype(o.dtype) or (non_diff and any(o is t for t in non_diff)):
                o.requires_grad = False
            else:
                o.requires_grad, o.grad_fn, o._output_nr = True, node, i


class TensorOpBackward(BackwardCFunction):
    """The backward node of one call of a ``TensorOp``: calls its registered ``backward``
    (one gradient per input, a list of gradients for a list-of-tensors input); without a
    registered ``backward`` it raises."""

    def __init__(self, op, backward, ctx: FunctionCtx, inputs: tuple, outs: tuple):
        if all(isinstance(x, Tensor) for x in inputs):  # the common case: tensors only
            layout = [-1] * len(inputs)
            edges, meta = input_edges(inputs)
            needs = [x.requires_grad for x in inputs]
        else:
            layout, flat, needs = [], [], []  # layout per input: None (no gradient),
            for x in inputs:  # -1 (one tensor) or n (a list of n)
                if isinstance(x, Tensor):
                    layout.append(-1)
                    flat.append(x)
                    needs.append(x.requires_grad)
                elif (type(x) is list or type(x) is tuple) and x and isinstance(x[0], Tensor):
                    layout.append(len(x))
                    flat.extend(x)
                    needs.append(any_requires_grad(x))
                else:
                    layout.append(None)
                    needs.append(False)
            edges, meta = input_edges(flat)
        outs_meta = [(o._shape, o.dtype, o.device) if isinstance(o, Tensor) else None for o in outs]
        super().__init__(backward, ctx, edges, meta, outs_meta)
        ctx.needs_input_grad = tuple(needs)
        self.op = op
        self._layout = layout

    def name(self) -> str:
        return f"{self.op.name}Backward"

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
        return self._fit_all(self._flatten(self._run(grad_outputs)))

    def _flatten(self, grads) -> tuple:
        layout = self._layout
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        elif len(layout) == 1 and layout[0] not in (None, -1):
            # one list-of-tensors input: accept its gradient list bare or wrapped in a tuple
            if not (len(grads) == 1 and isinstance(grads[0], (tuple, list))):
                grads = (grads,)
        if len(grads) != len(layout):
            names = self.op.input_names()
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
        return tuple(flat)

    def grad_error(self, i: int, g, shape) -> str:
        if not isinstance(g, Tensor):
            return (
                f"{self.op.name}: backward returned a {type(g).__name__} as gradient {i}; "
                "expected a Tensor or None"
            )
        return (
            f"{self.op.name}: backward returned gradient {i} of shape {list(g._shape)}, but "
            f"the input has shape {list(shape)}"
        )
