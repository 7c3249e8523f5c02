"""The backward pass: a topological order of the graph, then one loop over it.

1. order = nodes reachable from the roots, each before the nodes it feeds from
   (reverse post-order of a depth-first walk);
2. for each node in that order: its output gradients are complete (every consumer
   came earlier), so apply it (the chain rule: output grads -> input grads) and add
   what it returns into the buffers of ``next_functions``.
"""

from __future__ import annotations

from tensorplay import profiler
from tensorplay._factories import full_like, zeros_like
from tensorplay._native import NATIVE
from tensorplay._tensor import Tensor, empty_tensor
from tensorplay.autograd import grad_mode
from tensorplay.autograd.graph import AccumulateGrad, edge_of


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


def _run_hook(hook, g):
    """``hook(g)``, checked as torch checks it: a hook may replace the gradient, but not
    with one of another shape, dtype or device (``.grad`` would no longer fit its tensor)."""
    new = hook(g)
    if new is None:
        return g
    name = getattr(hook, "__name__", type(hook).__name__)
    if not isinstance(new, Tensor):
        raise TypeError(
            f"hook '{name}' returned {type(new).__name__}; a tensor hook must return a "
            "Tensor or None"
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


def _tensor_hooks(node, nr, g):
    if g is None:
        return g
    for hook in node._tensor_hooks.get(nr, ()):
        g = _run_hook(hook, g)
    ref = node._retained.get(nr)
    t = ref() if ref is not None else None
    if t is not None:
        # a fresh tensor (g may be a stride-0 view, or used further on), accumulated over
        # backward passes like a leaf's .grad; recorded only under create_graph
        new = g.clone() if grad_mode.state.enabled else g.detach().clone()
        t.grad = new if t.grad is None else t.grad + new
    return g


def _leaf_hooks(node, g):
    for hook in node.variable.__dict__.get("_hooks", ()):
        g = _run_hook(hook, g)
    return g


def run(
    roots: list,
    root_grads: list,
    retain_graph: bool,
    create_graph: bool,
    capture: list | None = None,
) -> list | None:
    """Propagate ``root_grads`` from the ``roots`` edges through the graph.

    With ``capture`` (a list of edges), gradients arriving at those edges are returned
    instead of being accumulated into leaves (``autograd.grad``).
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
    state = grad_mode.state
    prev, state.enabled = state.enabled, create_graph  # set_grad_enabled, without its object
    try:
        if capture is None and NATIVE is not None:
            # (a recording profiler wants a span per node: each then goes through _step)
            NATIVE.backward_loop(order, buffers, retain_graph, profiler._active is None)
        else:
            _loop(order, buffers, retain_graph, capture, targets, captured)
    finally:
        state.enabled = prev
    return captured if capture is not None else None


def _loop(order, buffers, retain_graph, capture, targets, captured) -> None:
    """Apply each node in ``order`` and route what it returns into ``buffers`` (see run).
    (``tensorplay._C.backward_loop`` is the native twin of the loop without ``capture``.)"""
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
            if capture is not None:
                for i in targets.get((node, 0), ()):
                    captured[i] = _add(captured[i], _leaf_hooks(node, grads[0]))
                continue
            _accumulate(node, grads)
            continue
        grad_inputs = _step(node, grads, retain_graph, seen)
        for (child, nr), g in zip(node.next_functions, grad_inputs):
            if child is not None and g is not None:
                buf = buffers.setdefault(child, [None] * child.n_outputs)
                buf[nr] = _add(buf[nr], g)


def _accumulate(node, grads) -> None:
    """A leaf's AccumulateGrad, after the leaf's hooks."""
    node.apply([_leaf_hooks(node, grads[0])])


def _step(node, grads, retain_graph: bool, seen=None) -> tuple:
    """One node of the loop: its output gradients through tensor hooks (then shown to
    ``seen(node, grads)``, autograd.grad's capture) and pre-hooks, ``apply`` (a profiler
    span when one records), its hooks; the node's saved state is freed unless retained."""
    if node._tensor_hooks or node._retained:
        grads = [_tensor_hooks(node, nr, g) for nr, g in enumerate(grads)]
    if seen is not None:
        seen(node, grads)
    for hook in node._prehooks:
        new = hook(tuple(grads))
        if new is not None:
            grads = list(new)
    if profiler._active is None:
        grad_inputs = node.apply(grads)
    else:  # one span per node, named as torch's profiler names them
        span = f"autograd::engine::evaluate_function: {node.name()}"
        with profiler.record_function(span, "cpu_op"):
            grad_inputs = node.apply(grads)
    for hook in node._hooks:
        new = hook(tuple(grad_inputs), tuple(grads))
        if new is not None:
            grad_inputs = tuple(new)
    if not retain_graph:
        node.release()
    return grad_inputs


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


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaf) into ``leaf.grad`` for every leaf in the graph."""
    outputs = _as_list(tensors)
    grads = _root_grads(outputs, grad_tensors, "backward")
    retain = create_graph if retain_graph is None else retain_graph
    roots = [edge_of(t) for t in outputs]
    if inputs is not None:
        inputs = _as_list(inputs)
        captured = run(roots, grads, retain, create_graph, capture=[edge_of(t) for t in inputs])
        for t, g in zip(inputs, captured):
            if g is not None:
                fresh = g.clone() if create_graph else g.detach().clone()  # as AccumulateGrad
                t.grad = fresh if t.grad is None else t.grad + g
        return
    run(roots, grads, retain, create_graph)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    allow_unused=None,
    materialize_grads=False,
):
    """d(outputs)/d(inputs), returned as a tuple (``.grad`` fields are left alone)."""
    outs, ins = _as_list(outputs), _as_list(inputs)
    for i, t in enumerate(ins):
        if not isinstance(t, Tensor):
            raise TypeError(f"grad(): inputs[{i}] must be a Tensor, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError(
                f"One of the differentiated Tensors (inputs[{i}]) does not require grad"
            )
    grads = _root_grads(outs, grad_outputs, "grad")
    retain = create_graph if retain_graph is None else retain_graph
    captured = run(
        [edge_of(t) for t in outs], grads, retain, create_graph, capture=[edge_of(t) for t in ins]
    )
    result = []
    for i, (t, g) in enumerate(zip(ins, captured)):
        if g is None:
            if materialize_grads:
                g = zeros_like(t)
            elif not allow_unused:
                raise RuntimeError(
                    f"One of the differentiated Tensors (inputs[{i}]) appears to "
                    "not have been used in the graph. Set allow_unused=True if "
                    "this is the desired behavior."
                )
        elif not create_graph:
            g = g.detach()
        result.append(g)
    return tuple(result)


if NATIVE is not None:
    NATIVE.init_engine(AccumulateGrad, _accumulate, _step)
topological_order = NATIVE.topological_order if NATIVE is not None else _topological_order
