"""The backward pass: a topological order of the graph, then one loop over it.

1. order = nodes reachable from the roots, each before the nodes it feeds from
   (reverse post-order of a depth-first walk); for ``autograd.grad`` only the nodes on
   a path to a gradient it reads (``_prune``, torch's ``exec_info``);
2. for each node in that order: its output gradients are complete (every consumer
   came earlier), so apply it (the chain rule: output grads -> input grads) and add
   what it returns into the buffers of ``next_functions``.
"""

from __future__ import annotations

import sys
import warnings

from tensorplay import _dispatch, profiler
from tensorplay._factories import full_like, zeros, zeros_like
from tensorplay._native import NATIVE
from tensorplay._tensor import Tensor, empty_tensor
from tensorplay.autograd import anomaly_mode, grad_mode
from tensorplay.autograd._derivatives import stack
from tensorplay.autograd.graph import AccumulateGrad, GraphTask, _passes, edge_of

_anomaly = anomaly_mode.state


def _topological_order(roots: list) -> list:
    """Nodes reachable from ``roots``, every node before all the nodes it points to."""
    seen, post = set(), []
    for root in roots:
        if root is None or root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(root.next_functions))]
        while stack:  # iterative DFS: graphs can be deeper than Python's recursion limit
            node, children = stack[-1]
            for child, _ in children:
                if child is not None and child not in seen:
                    seen.add(child)
                    stack.append((child, iter(child.next_functions)))
                    break
            else:
                stack.pop()
                post.append(node)
    return post[::-1]


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _hook_name(hook) -> str:
    return getattr(hook, "__name__", type(hook).__name__)


def _run_hook(hook, g):
    """``hook(g)``, checked as torch checks it: a hook may replace the gradient, but not
    with one of another shape, dtype or device (``.grad`` would no longer fit its tensor).
    ``g`` is None for an output of a node that ran without a gradient for it (torch calls
    the hook then too); such a hook must return None."""
    new = hook(g)
    if new is None:
        return g
    name = _hook_name(hook)
    if not isinstance(new, Tensor):
        raise TypeError(
            f"hook '{name}' returned {type(new).__name__}; a tensor hook must return a "
            "Tensor or None"
        )
    if g is None:
        raise RuntimeError(
            f"hook '{name}' returned a Tensor for an output that got no gradient: can't "
            "replace a None gradient with a non-None value"
        )
    if new.dtype is not g.dtype or new.device is not g.device:
        raise RuntimeError(
            f"hook '{name}' has changed the type of value (was {g.dtype} on {g.device} "
            f"got {new.dtype} on {new.device}); return grad.to(...) of the original kind"
        )
    if new._shape != g._shape:
        raise RuntimeError(
            f"hook '{name}' has changed the size of value (was {list(g._shape)} got "
            f"{list(new._shape)}); a hook must return a gradient shaped like its input"
        )
    return new


def _node_hook_result(hook, new, old) -> tuple:
    """What a node's pre- or post-hook returned in place of ``old``, checked as torch checks
    it: a sequence of the same length that fills no gradient that was None."""
    name = _hook_name(hook)
    if not isinstance(new, (tuple, list)):
        raise TypeError(
            f"hook '{name}' returned {type(new).__name__}; a node hook returns None or a "
            f"tuple of {len(old)} gradient(s), one per entry it was given"
        )
    if len(new) != len(old):
        raise RuntimeError(
            f"hook '{name}' has returned an incorrect number of values (got {len(new)}, "
            f"but expected {len(old)})"
        )
    for i, (o, n) in enumerate(zip(old, new)):
        if o is None and n is not None:
            raise RuntimeError(
                f"hook '{name}' returned a gradient at index {i}, where there was none: "
                "can't replace a None gradient with a non-None value"
            )
    return tuple(new)


def _tensor_hooks(node, nr, g):
    for hook in node._tensor_hooks.get(nr, ()):
        g = _run_hook(hook, g)
    if g is None:
        return g
    ref = node._retained.get(nr)
    t = ref() if ref is not None else None
    if t is not None:
        # a fresh tensor (g may be a stride-0 view, or used further on), accumulated over
        # backward passes like a leaf's .grad; recorded only under create_graph
        new = g.clone() if grad_mode.state.enabled else g.detach().clone()
        t.grad = new if t.grad is None else t.grad + new
    return g


def _arrived(node, grads) -> list:
    """A node's output gradients after the hooks of its output tensors (and retain_grad)."""
    return [_tensor_hooks(node, nr, g) for nr, g in enumerate(grads)]


def _leaf_hooks(node, g):
    for hook in node.variable.__dict__.get("_hooks", ()):
        g = _run_hook(hook, g)
    return g


def _prune(order: list, targets: dict) -> tuple:
    """For autograd.grad: ``order`` cut down to the nodes that lead to a captured edge
    (``needed``: they run) and the captured nodes themselves (their gradient is read; they
    run only when needed too), and ``needed``. As in torch, hooks of tensors off those
    paths do not fire."""
    reach = {node for node, _ in targets}  # the captured nodes, then those leading there
    needed: set = set()
    for node in reversed(order):  # backwards: a node's children come first
        for child, _ in node.next_functions:
            if child in reach:
                needed.add(node)
                reach.add(node)
                break
    return [n for n in order if n in reach], needed


def run(
    roots: list,
    root_grads: list,
    retain_graph: bool,
    create_graph: bool,
    capture: list | None = None,
) -> list | None:
    """Propagate ``root_grads`` from the ``roots`` edges through the graph.

    With ``capture`` (a list of edges), gradients arriving at those edges are returned
    instead of being accumulated into leaves (``autograd.grad``), and only the nodes that
    lead to them run.
    """
    buffers: dict = {}
    for (node, nr), g in zip(roots, root_grads):
        if node is not None:
            buf = buffers.setdefault(node, [None] * node.n_outputs)
            buf[nr] = _add(buf[nr], g)
    targets = {}
    if capture is not None:
        for i, (node, nr) in enumerate(capture):
            if node is not None:
                targets.setdefault((node, nr), []).append(i)
    captured = [None] * (len(capture) if capture is not None else 0)
    order = topological_order([n for n, _ in roots])
    needed = None
    if capture is not None:
        order, needed = _prune(order, targets)
    state, passes = grad_mode.state, _passes.stack
    prev, state.enabled = state.enabled, create_graph  # set_grad_enabled, without its object
    passes.append(order)  # this pass, for graph.current_graph_task (hooks)
    try:
        if _anomaly.enabled:  # every node watched (_watched), so the Python loop
            with anomaly_mode.backward_pass():
                _loop(order, buffers, retain_graph, capture, targets, captured, needed, _watched)
        elif capture is None and NATIVE is not None:
            # (a recording profiler wants a span per node: each then goes through _step)
            NATIVE.backward_loop(order, buffers, retain_graph, profiler._active is None)
        else:
            _loop(order, buffers, retain_graph, capture, targets, captured, needed)
        if type(passes[-1]) is GraphTask:  # a hook asked for it: it may have callbacks
            passes[-1].finish()
    finally:
        state.enabled = prev
        passes.pop()
    return captured if capture is not None else None


def _loop(order, buffers, retain_graph, capture, targets, captured, needed=None, step=None) -> None:
    """Apply each node in ``order`` through ``step`` (default ``_step``) and route what it
    returns into ``buffers`` (see run; ``needed``: the nodes a capture runs, from ``_prune``).
    (``tensorplay._C.backward_loop`` is the native twin of the loop without ``capture``.)"""
    step = step or _step
    seen = None
    if capture is not None:

        def seen(node, grads):  # autograd.grad: gradients arriving at a captured edge
            for nr, g in enumerate(grads):
                for i in targets.get((node, nr), ()):
                    captured[i] = _add(captured[i], g)

    for node in order:
        grads = buffers.pop(node, None)
        if grads is None:
            continue
        for g in grads:  # (not grads.count(None): that would call Tensor.__eq__)
            if g is not None:
                break
        else:
            continue  # no gradient reached this node
        if type(node) is AccumulateGrad:
            if seen is not None:
                seen(node, [_leaf_hooks(node, grads[0])])
            else:
                _accumulate(node, grads)
            continue
        if needed is not None and node not in needed:  # read here; nothing beyond it is
            seen(node, _arrived(node, grads) if node._tensor_hooks or node._retained else grads)
            continue
        grad_inputs = step(node, grads, retain_graph, seen)
        for (child, nr), g in zip(node.next_functions, grad_inputs):
            if child is not None and g is not None:
                buf = buffers.setdefault(child, [None] * child.n_outputs)
                buf[nr] = _add(buf[nr], g)


# Set by tensorplay._vmap: ``reduce_batched(grad, target, accumulate)`` sums the batch out
# of a gradient computed inside a vmap that has returned, for a tensor not batched at that
# level (a tensor captured from outside: the samples' gradients add up). Inside the vmap a
# gradient stays per sample.
reduce_batched = None


def _accumulate(node, grads) -> None:
    """A leaf's AccumulateGrad, after the leaf's hooks (then the node's own, if any)."""
    g = grads[0]
    grads[0] = None  # the engine's buffer, read once: the references left to g are ours
    if reduce_batched is not None and g is not None and type(g) is not Tensor:
        g = reduce_batched(g, node.variable, True)
    g = _leaf_hooks(node, g)
    if node._prehooks or node._hooks:
        _step(node, [g], True)
    elif g is not None and sys.getrefcount(g) == 2:
        # only this frame holds g (and getrefcount's argument): no other buffer, hook or
        # caller sees it, so the leaf may keep it without the copy, as torch's
        # AccumulateGrad steals a gradient nobody else references
        node.accumulate_owned(g)
    else:
        node.apply([g])


def _step(node, grads, retain_graph: bool, seen=None) -> tuple:
    """One node of the loop: its output gradients through tensor hooks (then shown to
    ``seen(node, grads)``, autograd.grad's capture) and pre-hooks, ``apply`` (a profiler
    span when one records), its hooks; the node's saved state is freed unless retained."""
    if node._tensor_hooks or node._retained:
        grads = _arrived(node, grads)
    if seen is not None:
        seen(node, grads)
    for hook in node._prehooks:
        new = hook(tuple(grads))
        if new is not None:
            grads = list(_node_hook_result(hook, new, grads))
    if profiler._active is None:
        grad_inputs = node.apply(grads)
    else:  # one span per node, named as torch's profiler names them
        span = f"autograd::engine::evaluate_function: {node.name()}"
        with profiler.record_function(span, "cpu_op"):
            grad_inputs = node.apply(grads)
    for hook in node._hooks:
        new = hook(tuple(grad_inputs), tuple(grads))
        if new is not None:
            grad_inputs = _node_hook_result(hook, new, grad_inputs)
    if not retain_graph:
        node.release()
    return grad_inputs


def _watched(node, grads, retain_graph: bool, seen=None) -> tuple:
    """``_step`` under anomaly detection (see ``anomaly_mode.step``)."""
    return anomaly_mode.step(node, _step, grads, retain_graph, seen)


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, Tensor):
        return [x]
    return list(x)


def _ones(out: Tensor) -> Tensor:
    """``ones_like(out)`` without the factory's argument handling (every backward() makes one)."""
    g = empty_tensor(out._shape, out.dtype, out.device)
    if g._data is not None:  # None on meta
        g._data.fill(1)
    return g


def _check_root_grad(op: str, i: int, out: Tensor, g: Tensor) -> Tensor:
    """torch's rules for a given output gradient: real/complex and device must match the
    output's; any other dtype is cast to the output's."""
    if g.dtype.is_complex != out.dtype.is_complex:
        raise RuntimeError(
            f"{op}: For complex Tensors, both grad_output and output are required to have "
            f"the same dtype. Mismatch in dtype: grad_output[{i}] has a dtype of {g.dtype} "
            f"and output[{i}] has a dtype of {out.dtype}."
        )
    if g.device is not out.device:
        raise RuntimeError(
            f"{op}: invalid gradient at index {i} - expected device {out.device} but got "
            f"{g.device}; pass gradient.to({str(out.device)!r})"
        )
    return g if g.dtype is out.dtype else g.to(out.dtype)


def _root_grads(outputs, grad_outputs, op: str) -> list:
    grads = _as_list(grad_outputs) if grad_outputs is not None else [None] * len(outputs)
    if len(grads) != len(outputs):
        raise RuntimeError(f"{op}: got {len(grads)} gradients for {len(outputs)} outputs")
    result = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if not out.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
        if g is None:
            if out.numel() != 1:
                raise RuntimeError(
                    "grad can be implicitly created only for scalar outputs; "
                    f"output {i} has shape {list(out.shape)}: pass gradient="
                )
            g = _ones(out)
        elif not isinstance(g, Tensor):
            g = full_like(out, g)
        elif g._shape != out._shape:
            raise RuntimeError(
                f"{op}: mismatch in shape: grad_output[{i}] has a shape of "
                f"{list(g._shape)} and output[{i}] has a shape of "
                f"{list(out._shape)}."
            )
        else:
            g = _check_root_grad(op, i, out, g)
        result.append(g)
    return result


def _inputs(inputs, op: str) -> tuple:
    """The ``inputs`` of grad/backward as a tuple of tensors: a Tensor, a sequence of tensors
    or a dict of tensors (its values)."""
    if isinstance(inputs, Tensor):
        return (inputs,)
    if isinstance(inputs, dict):
        items = tuple(inputs.values())
    else:
        try:
            items = tuple(inputs)
        except TypeError:
            raise TypeError(
                f"{op}(): inputs must be a Tensor, a sequence of tensors or a dict of tensors, "
                f"got {type(inputs).__name__}"
            ) from None
    if not items:
        raise RuntimeError(f"`inputs` argument to `{op}()` cannot be empty.")
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}(): inputs[{i}] must be a Tensor, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError(
                f"One of the differentiated Tensors (inputs[{i}]) does not require grad; "
                "call requires_grad_() on it or leave it out of inputs"
            )
    return items


def _tensor_likes(*args) -> list | None:
    """The tensors and tensor-likes among ``args`` (each a tensor, a sequence or a dict of
    them, or None) when an object with ``__tensorplay_function__`` or a function mode should
    take the call, as ``torch.autograd.grad``/``backward`` offer it; else None."""
    found = []
    for a in args:
        if a is None:
            continue
        if isinstance(a, dict):
            found.extend(a.values())
        elif isinstance(a, (list, tuple)):
            found.extend(a)
        else:
            found.append(a)
    plain = _dispatch.state.plain and all(type(x) is Tensor or x is None for x in found)
    if plain or not _dispatch.overrides_hook.has_tensorplay_function(found):
        return None
    return found


def backward(
    tensors,
    grad_tensors=None,
    retain_graph=None,
    create_graph=False,
    grad_variables=None,
    inputs=None,
):
    """Accumulate the gradient of ``tensors`` into ``.grad`` of the leaves of their graph.

    Args (torch's ``torch.autograd.backward``):
        tensors: a tensor or sequence of tensors to differentiate.
        grad_tensors: the gradient of each of ``tensors`` (None: ones, scalars only).
        retain_graph: keep the graph for another backward (default: ``create_graph``).
        create_graph: record the backward pass, for higher-order gradients.
        grad_variables: the old name of ``grad_tensors`` (``FutureWarning``, as torch).
        inputs: accumulate only into these tensors' ``.grad`` (a Tensor, a sequence or a
            dict of tensors; non-leaves too); an empty one is a ``RuntimeError``.
    """
    overloaded = _tensor_likes(tensors, inputs, grad_tensors)
    if overloaded is not None:
        return _dispatch.overrides_hook.handle_tensorplay_function(
            backward, overloaded, tensors, grad_tensors=grad_tensors, retain_graph=retain_graph,
            create_graph=create_graph, grad_variables=grad_variables, inputs=inputs,
        )  # fmt: skip
    if grad_variables is not None:
        warnings.warn(
            "`grad_variables` is deprecated. Use `grad_tensors` instead.",
            FutureWarning,
            stacklevel=2,
        )
        if grad_tensors is not None:
            raise RuntimeError(
                "`grad_tensors` and `grad_variables` (deprecated) arguments both passed to "
                "`backward()`. Please only use `grad_tensors`."
            )
        grad_tensors = grad_variables
    outputs = _as_list(tensors)
    ins = _inputs(inputs, "backward") if inputs is not None else None
    grads = _root_grads(outputs, grad_tensors, "backward")
    retain = create_graph if retain_graph is None else retain_graph
    roots = [edge_of(t) for t in outputs]
    if ins is None:
        run(roots, grads, retain, create_graph)
        return
    captured = run(roots, grads, retain, create_graph, capture=[edge_of(t) for t in ins])
    for t, g in zip(ins, captured):
        if g is not None and not t.retains_grad:  # (a retained .grad got it already)
            fresh = g.clone() if create_graph else g.detach().clone()  # as AccumulateGrad
            t.grad = fresh if t.grad is None else t.grad + g


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    only_inputs=True,
    allow_unused=None,
    is_grads_batched=False,
    materialize_grads=False,
):
    """d(outputs)/d(inputs), returned (``.grad`` fields are left alone).

    Args (torch's ``torch.autograd.grad``):
        outputs, inputs: tensors or sequences of tensors; ``inputs`` may be a dict of
            tensors (the result is then a dict with its keys); it must not be empty.
        grad_outputs: the gradient of each output (None: ones, scalars only).
        retain_graph, create_graph: as in ``backward``.
        only_inputs: ignored; False warns (``FutureWarning``), as in torch.
        allow_unused: return None for an input the outputs do not depend on (otherwise
            that is a ``RuntimeError``); default: ``materialize_grads``.
        is_grads_batched: the first dimension of each grad_output is a batch; the result
            has it too (row b: the gradients for row b of the grad_outputs). Computed one
            backward pass per row.
        materialize_grads: zeros instead of None for unused inputs; with
            ``allow_unused=False`` it is a ``ValueError``.
    """
    overloaded = _tensor_likes(outputs, inputs, grad_outputs)
    if overloaded is not None:
        return _dispatch.overrides_hook.handle_tensorplay_function(
            grad, overloaded, outputs, inputs, grad_outputs=grad_outputs,
            retain_graph=retain_graph, create_graph=create_graph, only_inputs=only_inputs,
            allow_unused=allow_unused, is_grads_batched=is_grads_batched,
            materialize_grads=materialize_grads,
        )  # fmt: skip
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, "
            "but got: allow_unused=False."
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    if not only_inputs:
        warnings.warn(
            "only_inputs argument is deprecated and is ignored now (defaults to True). To "
            "accumulate gradient for other parts of the graph, please use "
            "tensorplay.autograd.backward.",
            FutureWarning,
            stacklevel=2,
        )
    outs, ins = _as_list(outputs), _inputs(inputs, "grad")
    retain = create_graph if retain_graph is None else retain_graph
    if is_grads_batched:
        result = _batched_grad(outs, ins, grad_outputs, retain, create_graph, materialize_grads)
    else:
        result = _grad(outs, ins, grad_outputs, retain, create_graph, materialize_grads)
    for i, g in enumerate(result):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"One of the differentiated Tensors (inputs[{i}]) appears to not have been "
                "used in the graph. Set allow_unused=True if this is the desired behavior."
            )
    return dict(zip(inputs.keys(), result)) if isinstance(inputs, dict) else result


def _grad(outs, ins, grad_outputs, retain, create_graph, materialize) -> tuple:
    grads = _root_grads(outs, grad_outputs, "grad")
    captured = run(
        [edge_of(t) for t in outs], grads, retain, create_graph, capture=[edge_of(t) for t in ins]
    )
    result = []
    for t, g in zip(ins, captured):
        if reduce_batched is not None and g is not None and type(g) is not Tensor:
            g = reduce_batched(g, t, False)
        if g is None:
            if materialize:
                g = zeros_like(t, requires_grad=create_graph)
        elif not create_graph:
            tangent = g.__dict__.get("_fw_tangent")
            g = g.detach()
            if tangent is not None:  # torch's gradient stays dual: forward over reverse
                g._fw_tangent = tangent
        result.append(g)
    return tuple(result)


def _batched_grad(outs, ins, grad_outputs, retain, create_graph, materialize) -> tuple:
    """``grad(..., is_grads_batched=True)``: one pass per row of the grad_outputs, stacked
    (torch vectorizes the passes with vmap; the values are the same)."""
    gos = _as_list(grad_outputs)
    if len(gos) != len(outs) or not all(isinstance(g, Tensor) for g in gos):
        raise RuntimeError(
            "grad(is_grads_batched=True): grad_outputs must hold one Tensor per output, whose "
            "first dimension is the batch"
        )
    for i, (o, g) in enumerate(zip(outs, gos)):
        if g.dim() == 0 or g._shape[1:] != o._shape:
            raise RuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each "
                "grad_output as the batch dimension. The sizes of the remaining dimensions "
                "are expected to match the shape of corresponding output, but a mismatch was "
                f"detected: grad_output[{i}] has a shape of {list(g._shape)} and output[{i}] "
                f"has a shape of {list(o._shape)}."
            )
    sizes = [g._shape[0] for g in gos]
    if len(set(sizes)) != 1:
        raise RuntimeError(
            f"grad(is_grads_batched=True): the grad_outputs have batch sizes {sizes}; they "
            "must all have the same first dimension"
        )
    n = sizes[0]
    if vmap_transform is not None and n and not create_graph:
        return _vmapped_grad(outs, ins, gos, retain, materialize)
    rows = [
        _grad(outs, ins, [g[b] for g in gos], retain or b < n - 1, create_graph, materialize)
        for b in range(n)
    ]
    result = []
    for j, t in enumerate(ins):
        col = [row[j] for row in rows]
        if n == 0:
            result.append(zeros((0, *t._shape), dtype=t.dtype, device=t.device))
        elif all(g is None for g in col):
            result.append(None)
        else:
            result.append(stack([g if g is not None else zeros_like(t) for g in col]))
    return tuple(result)


# Set by tensorplay._vmap: ``tp.vmap``, which batches the backward pass of
# ``grad(..., is_grads_batched=True)`` (one pass over the batch instead of one per row).
vmap_transform = None


def _vmapped_grad(outs, ins, gos, retain, materialize) -> tuple:
    unused: set = set()

    def one(*row):
        grads = _grad(outs, ins, list(row), retain, False, False)
        for j, g in enumerate(grads):
            if g is None:
                unused.add(j)  # the graph is the same for every row
        return tuple(zeros_like(t) if g is None else g for t, g in zip(ins, grads))

    got = vmap_transform(one)(*gos)
    return tuple(None if j in unused and not materialize else g for j, g in enumerate(got))


if NATIVE is not None:
    NATIVE.init_engine(AccumulateGrad, _accumulate, _step)
topological_order = NATIVE.topological_order if NATIVE is not None else _topological_order
