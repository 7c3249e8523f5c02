"""``tp.autograd.Function``: a hand-written derivative for a step of your own.

``Function.apply`` runs ``forward`` with grad mode off, then (if any input requires
grad) installs a ``BackwardCFunction`` node whose ``apply`` calls your ``backward``.
Both PyTorch styles work: ``forward(ctx, *args)``, or ``forward(*args)`` plus
``setup_context(ctx, inputs, output)``. ``jvp`` makes the function work in
forward mode too. (torch's ``NestedIOFunction`` is not here: it is built on the legacy
non-static protocol, ``Function._do_forward``, which torch itself no longer has, so it
runs in neither framework.)
"""

from __future__ import annotations

import functools
import weakref

from tensorplay._factories import zeros
from tensorplay._tensor import Tensor
from tensorplay.autograd import forward_ad, grad_mode
from tensorplay.autograd._record import _FREED, fit_grad
from tensorplay.autograd.graph import Node, SavedTensor, edge_of, input_edges

__all__ = ["Function", "FunctionCtx", "InplaceFunction", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` of a Function: saved tensors, flags, and any attribute you set."""

    # Class-level defaults (every recorded call makes a ctx; most set two or three of
    # these): a setter stores into the instance.
    _to_save: tuple = ()
    _saved: list | None = None
    _for_forward: tuple = ()
    _in_jvp = False
    _dirty: tuple = ()
    _non_differentiable: tuple = ()
    materialize_grads = True
    needs_input_grad: tuple = ()
    _node = None  # weakref to the BackwardCFunction node

    def save_for_backward(self, *tensors) -> None:
        """Keep ``tensors`` (inputs, outputs or None) for ``backward`` as ``saved_tensors``."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save variables, but argument {i} "
                    f"is not a Tensor or None (got {type(t).__name__})"
                )
        self._to_save = tensors

    def save_for_forward(self, *tensors) -> None:
        """Keep ``tensors`` for ``jvp`` (read there as ``saved_tensors``)."""
        self._for_forward = tensors

    @property
    def saved_tensors(self) -> tuple:
        if self._in_jvp:
            return tuple(self._for_forward)
        node = self._node() if self._node is not None else None
        if self._saved is None:
            if node is not None and node._released:
                raise RuntimeError(_FREED)
            return tuple(self._to_save)
        name = node.name() if node is not None else "Function"
        return tuple(None if s is None else s.unpack(name) for s in self._saved)

    def mark_dirty(self, *tensors) -> None:
        """Declare inputs that ``forward`` modified in place (they must be returned)."""
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        """Declare outputs that carry no gradient (``requires_grad=False``)."""
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """False: ``backward`` receives None (not zeros) for outputs that got no gradient."""
        self.materialize_grads = bool(value)


class BackwardCFunction(Node):
    """The node of user code's derivative: a ``Function``'s (``_connect`` below) and, as
    ``TensorOpBackward``, a custom op's. Calls ``backward(ctx, *grads)`` (missing output
    gradients made zeros when ``ctx.materialize_grads``) and fits what it returns to the
    inputs (``fit_grad``)."""

    _tensor_args: tuple | None = None  # positions of the tensor inputs, when not all are

    def __init__(
        self, backward, ctx, edges: tuple, inputs_meta: list, outputs_meta: list, label: str = ""
    ):
        if None in inputs_meta:  # edges for the tensor inputs only (torch's next_functions)
            self._tensor_args = tuple(i for i, m in enumerate(inputs_meta) if m is not None)
            edges = tuple(edges[i] for i in self._tensor_args)
        super().__init__(edges, n_outputs=len(outputs_meta))
        self.backward, self.ctx, self._label = backward, ctx, label
        self._inputs_meta = inputs_meta  # per input: (shape, dtype), None for a non-tensor
        self._outputs_meta = outputs_meta  # per output: (shape, dtype, device) or None

    def name(self) -> str:
        return f"{self._label}Backward"

    def release(self) -> None:
        self._released = True
        self.ctx._saved = None

    def apply(self, grad_outputs):
        grads = self._run(grad_outputs)
        if not isinstance(grads, tuple):
            grads = (grads,)
        n = len(self._inputs_meta)
        if len(grads) < n or any(g is not None for g in grads[n:]):
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of "
                f"gradients (expected {n}, got {len(grads)})"
            )
        grads = grads[:n]
        positions = self._tensor_args
        if positions is None:
            return self._fit_all(grads)
        for i, (g, meta) in enumerate(zip(grads, self._inputs_meta)):
            if meta is None and g is not None:
                raise RuntimeError(
                    f"function {self.name()} returned a gradient different than None at "
                    f"position {i}, but the corresponding forward input was not a Tensor; "
                    "return None there"
                )
        fitted = self._fit_all(grads)
        return tuple(fitted[i] for i in positions)

    def _run(self, grad_outputs):
        """``backward(ctx, *grad_outputs)``, with missing gradients materialized."""
        if self.ctx.materialize_grads:
            for g in grad_outputs:  # (not `None in`: that would call Tensor.__eq__)
                if g is None:
                    grad_outputs = [
                        g if g is not None or m is None else zeros(m[0], dtype=m[1], device=m[2])
                        for g, m in zip(grad_outputs, self._outputs_meta)
                    ]
                    break
        return self.backward(self.ctx, *grad_outputs)

    def _fit_all(self, grads) -> tuple:
        return tuple(
            fit_grad(g, meta, self, i) for i, (g, meta) in enumerate(zip(grads, self._inputs_meta))
        )

    def grad_error(self, i: int, g, shape) -> str:
        """The error for gradient ``i`` that ``fit_grad`` cannot fit to ``shape``."""
        if not isinstance(g, Tensor):
            return (
                f"function {self.name()} returned a gradient of type "
                f"{type(g).__name__} at index {i}; expected a Tensor or None"
            )
        return (
            f"Function {self.name()} returned an invalid gradient at index {i} - got "
            f"{list(g._shape)} but expected shape compatible with {list(shape)}"
        )


class _DelayedError(Node):
    """Stands for the derivative of a once_differentiable backward: using it is an error."""

    def __init__(self, msg, inputs):
        super().__init__(tuple(edge_of(x) for x in inputs))
        self.msg = msg

    def apply(self, grad_outputs):
        raise RuntimeError(self.msg)


def once_differentiable(backward):
    """Decorate a ``backward`` that is not itself differentiable (e.g. it calls numpy):
    it runs without recording, and differentiating its result again is an error."""

    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with grad_mode.no_grad():
            results = backward(ctx, *grad_outputs)
        if not grad_mode.state.enabled:
            return results
        needing = [g for g in grad_outputs if isinstance(g, Tensor) and g.requires_grad]
        if not needing:
            return results
        err = _DelayedError(
            "trying to differentiate twice a function that was marked with @once_differentiable",
            needing,
        )
        single = not isinstance(results, tuple)
        out = []
        for r in (results,) if single else results:
            if isinstance(r, Tensor) and (r.dtype.is_floating_point or r.dtype.is_complex):
                r = r.detach()
                r.requires_grad, r.grad_fn = True, err
            out.append(r)
        return out[0] if single else tuple(out)

    return wrapper


class Function:
    """Subclass with static ``forward`` and ``backward`` (and optionally ``setup_context``,
    ``jvp``); call with ``MyFunction.apply(*args)``."""

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not overridden")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for "
            "your custom autograd.Function to use it with backward mode "
            "AD."
        )

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError(
            "You must implement the jvp function for custom "
            "autograd.Function to use it with forward mode AD."
        )

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "Function is not meant to be instantiated: call "
            f"{type(self).__name__}.apply(...) instead"
        )

    # vmap (PyTorch's rules): a Function called on batched tensors needs either a ``vmap``
    # staticmethod ``vmap(info, in_dims, *args) -> (outputs, out_dims)`` or
    # ``generate_vmap_rule = True`` (its forward, made of TensorPlay ops, is batched as is)
    generate_vmap_rule = False
    vmap = None

    @classmethod
    def apply(cls, *args, **kwargs):
        hook = vmap_hook
        if hook is not None:
            result = hook(cls, args, kwargs)
            if result is not NotImplemented:
                return result
        ctx = FunctionCtx()
        if grad_mode.state.enabled:
            ctx.needs_input_grad = tuple([isinstance(a, Tensor) and a.requires_grad for a in args])
        else:
            ctx.needs_input_grad = (False,) * len(args)
        separate = cls.setup_context is not Function.setup_context
        state = grad_mode.state  # no_grad(), without building its context object
        prev, state.enabled = state.enabled, False
        try:
            if separate:
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        finally:
            state.enabled = prev
        single = not isinstance(output, tuple)
        outputs = list((output,) if single else output)
        if any(ctx.needs_input_grad):
            outputs = _connect(cls, ctx, args, outputs)
        elif ctx._to_save:
            ctx._saved = [None if t is None else SavedTensor(t) for t in ctx._to_save]
            ctx._to_save = ()
        if forward_ad.needs_forward(args):
            _forward_mode(cls, ctx, args, outputs)
        return outputs[0] if single else tuple(outputs)


# Set by tensorplay._vmap while a vmap runs: ``hook(cls, args, kwargs)`` applies the
# Function's vmap rule to batched arguments (``NotImplemented``: run ``apply`` as usual).
vmap_hook = None


class InplaceFunction(Function):
    """A ``Function`` whose ``forward`` writes into an input, kept (as in torch, which
    keeps it "for backward compatibility") so that code subclassing it runs unchanged:
    write in place, declare it with ``ctx.mark_dirty(x)`` and return ``x``; the output's
    history is rebased onto the function's node. Call it as any Function,
    ``MyFunction.apply(...)``: torch's ``InplaceFunction(inplace=...)`` instance served the
    legacy non-static style, which neither framework runs."""


def _connect(cls, ctx, args, outputs):
    """Install the backward node and make the outputs point at it."""
    meta = [(o._shape, o.dtype, o.device) if isinstance(o, Tensor) else None for o in outputs]
    edges, inputs_meta = input_edges(args)
    node = BackwardCFunction(cls.backward, ctx, edges, inputs_meta, meta, cls.__name__)
    ctx._node = weakref.ref(node)  # the node owns ctx; a strong ref back would be a cycle
    non_diff = {id(t) for t in ctx._non_differentiable} if ctx._non_differentiable else ()
    dirty = {id(t) for t in ctx._dirty} if ctx._dirty else ()
    arg_ids = {id(a) for a in args if isinstance(a, Tensor)}
    result = []
    for i, o in enumerate(outputs):
        if not isinstance(o, Tensor):
            result.append(o)
            continue
        if id(o) in arg_ids and id(o) not in dirty:
            o = o.detach()  # an input returned as-is: the output is a new tensor (alias)
        elif id(o) in dirty and o.grad_fn is None and o.requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad has been used in an in-place "
                "operation (marked dirty in a custom Function)."
            )
        if id(outputs[i]) in non_diff or not (o.dtype.is_floating_point or o.dtype.is_complex):
            o.requires_grad = False
        else:
            o.requires_grad, o.grad_fn, o._output_nr = True, node, i
            if id(outputs[i]) in dirty:
                o._bump_version()
        result.append(o)
    ctx._saved = [
        None if t is None else SavedTensor(_resolve(t, outputs, result), node) for t in ctx._to_save
    ]
    ctx._to_save = ()  # the raw references would keep outputs (and so this node) alive
    return result


def _resolve(t, before, after):
    """A saved output is the tensor handed back to the caller (which carries the node)."""
    for b, a in zip(before, after):
        if t is b:
            return a
    return t


def _forward_mode(cls, ctx, args, outputs):
    tangents = [forward_ad.tangent_of(a) if isinstance(a, Tensor) else None for a in args]
    ctx._in_jvp = True
    forward_ad.state.busy = True
    try:
        out_t = cls.jvp(ctx, *tangents)
    finally:
        forward_ad.state.busy = False
        ctx._in_jvp = False
    tans = out_t if isinstance(out_t, tuple) else (out_t,)
    for o, t in zip(outputs, tans):
        if isinstance(o, Tensor) and t is not None:
            o._fw_tangent = t
