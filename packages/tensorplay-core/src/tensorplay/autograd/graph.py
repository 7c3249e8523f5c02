"""The backward graph: nodes (``tensor.grad_fn``), edges, saved tensors and hooks.

A node turns the gradients of its outputs into gradients of its inputs
(``apply``); ``next_functions`` are the edges to the nodes that produced those
inputs, as ``(node, output_nr)`` pairs. Leaves that require grad end in an
``AccumulateGrad`` node, which adds into ``tensor.grad``. ``register_multi_grad_hook``
watches the gradients of several tensors in one backward pass (``GraphTask``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from types import MappingProxyType

from tensorplay._native import NATIVE
from tensorplay._tensor import Tensor, contiguous_strides
from tensorplay.autograd import anomaly_mode, forward_ad, grad_mode

__all__ = [
    "Node",
    "AccumulateGrad",
    "SavedTensor",
    "saved_tensors_hooks",
    "RemovableHandle",
    "register_multi_grad_hook",
    "GraphTask",
    "current_graph_task",
    "edge_of",
    "grad_fn_of",
    "register_view_rebuild",
]

_anomaly = anomaly_mode.state


class RemovableHandle:
    """Returned by ``register_hook``: ``remove()`` unregisters the hook (again is a no-op);
    as a context manager, the hook is removed on exit."""

    def __init__(self, hooks: list, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self) -> None:
        for i, f in enumerate(self._hooks):
            if f is self._fn:
                del self._hooks[i]
                return

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> bool:
        self.remove()
        return False


def _check_hook(where: str, fn) -> None:
    if not callable(fn):
        raise TypeError(f"{where}: the hook must be callable, got {type(fn).__name__}")


class Node:
    """One step of the backward graph: the type of every ``tensor.grad_fn``.

    What a user may rely on (as torch's ``torch.autograd.graph.Node``):

    * ``name()``: ``MulBackward0`` for op ``mul``, ``<Function>Backward`` for a custom
      ``Function``, ``AccumulateGrad`` for a leaf's accumulator;
    * ``next_functions``: one ``(node, output_nr)`` pair per input, ``(None, 0)`` for an
      input no gradient flows to, the leaf's ``AccumulateGrad`` for a leaf;
    * ``metadata``: a dict of your own (anomaly detection keeps ``"traceback_"`` there);
    * ``register_prehook(fn(grad_outputs))`` and ``register_hook(fn(grad_inputs,
      grad_outputs))``: may return replacements (a tuple of the same length).

    Hook containers are empty class-level defaults until a hook is registered (every op
    of a recorded forward makes a node; almost none ever gets a hook):
    ``_hooks``: fn(grad_inputs, grad_outputs) -> new grad_inputs | None;
    ``_prehooks``: fn(grad_outputs) -> new grad_outputs | None;
    ``_tensor_hooks``: output_nr -> [fn(grad) -> grad | None];
    ``_retained``: output_nr -> weakref of a tensor keeping ``.grad``.
    """

    _hooks: list | tuple = ()
    _prehooks: list | tuple = ()
    _tensor_hooks: dict | MappingProxyType = MappingProxyType({})
    _retained: dict | MappingProxyType = MappingProxyType({})
    _released = False

    def __init__(self, next_functions: tuple = (), n_outputs: int = 1):
        self.next_functions = next_functions
        self.n_outputs = n_outputs
        if _anomaly.enabled:
            anomaly_mode.record(self)

    def _own(self, name: str, make: type):
        """This node's own hook container ``name`` (made on first registration)."""
        box = self.__dict__.get(name)
        if box is None:
            box = make()
            setattr(self, name, box)
        return box

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    @property
    def metadata(self) -> dict:
        """A dict stored on the node, for your own annotations (made on first access)."""
        return self._own("_metadata", dict)

    def apply(self, grad_outputs: list) -> tuple:
        raise NotImplementedError

    def release(self) -> None:
        """Free what backward needed (the graph was not retained)."""
        self._released = True

    def register_hook(self, fn) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs)`` runs after this node (``grad_inputs``: one entry
        per ``next_functions`` edge); it may return a tuple of new grad_inputs."""
        _check_hook("Node.register_hook", fn)
        hooks = self._own("_hooks", list)
        hooks.append(fn)
        return RemovableHandle(hooks, fn)

    def register_prehook(self, fn) -> RemovableHandle:
        """``fn(grad_outputs)`` runs before this node; it may return a tuple of new
        grad_outputs."""
        _check_hook("Node.register_prehook", fn)
        hooks = self._own("_prehooks", list)
        hooks.append(fn)
        return RemovableHandle(hooks, fn)


class AccumulateGrad(Node):
    """The end of the graph for a leaf: adds the incoming gradient into ``leaf.grad``."""

    def __init__(self, leaf):
        super().__init__(())
        self.variable = leaf

    def apply(self, grad_outputs):
        g = grad_outputs[0]
        leaf = self.variable
        if g is None:
            return ()
        if leaf.grad is None:
            # always a fresh, contiguous tensor: g may be an expanded (stride-0) view that
            # add_ would refuse, or a tensor the graph still uses. Under create_graph the
            # clone is recorded, so .grad keeps g's history.
            leaf.grad = g.clone() if grad_mode.state.enabled else g.detach().clone()
        elif grad_mode.state.enabled:
            leaf.grad = leaf.grad + g
        else:
            leaf.grad.add_(g)
        return ()

    def accumulate_owned(self, g) -> None:
        """``apply((g,))`` for a gradient the caller owns outright (no other reference):
        the leaf's first ``.grad`` is ``g`` itself when nothing could tell the difference
        from the copy, a plain contiguous tensor of the leaf's dtype and device that is
        not a view and carries no history."""
        leaf = self.variable
        if (
            leaf.grad is None
            and not grad_mode.state.enabled
            and type(g) is Tensor
            and g._base is None
            and not g._offset
            and g.grad_fn is None
            and not g.requires_grad
            and g.dtype is leaf.dtype
            and g.device == leaf.device
            and (g._stride is None or g._stride == contiguous_strides(g._shape))
        ):
            leaf.grad = g
            return
        self.apply((g,))


def accumulator(leaf) -> AccumulateGrad:
    """The single AccumulateGrad of a leaf (kept weakly so it dies with the graph)."""
    ref = leaf.__dict__.get("_accumulator")
    node = ref() if ref is not None else None
    if node is None:
        node = AccumulateGrad(leaf)
        leaf.__dict__["_accumulator"] = weakref.ref(node)
    return node


def _no_rebuild(t) -> None:
    raise RuntimeError("tensorplay.autograd._record has not registered its view rebuild")


_rebuild_view = _no_rebuild


def register_view_rebuild(fn) -> None:
    """Install ``fn(view)``, which gives ``view`` a history reading its base's current one.
    (It builds an op-table node, so it lives with the recording code in ``_record``, which
    imports this module.)"""
    global _rebuild_view
    _rebuild_view = fn


def grad_fn_of(t):
    """``t.grad_fn``, rebuilt first when ``t`` is a view whose memory was written in place
    since its history was recorded: the write (into its base or another view of it) is not
    in that history. Views recorded by a view op carry the version they saw (``_view_version``,
    None on other tensors), so the common case is one comparison. torch regenerates a view's
    ``grad_fn`` the same way (as ``AsStridedBackward0`` of its base)."""
    seen = t._view_version
    if seen is not None and seen != t._storage._version:
        _rebuild_view(t)
    return t.grad_fn


def edge_of(t) -> tuple:
    """The ``(node, output_nr)`` a gradient for tensor ``t`` flows into (``(None, 0)``: none)."""
    if grad_fn_of(t) is not None:
        return (t.grad_fn, t._output_nr)
    if t.requires_grad:
        return (accumulator(t), 0)
    return _NO_EDGE


_NO_EDGE = (None, 0)  # an input no gradient flows to


def _input_edges(items) -> tuple:
    """What every recording reads of a new node's inputs, in one pass: ``(edges, meta)``,
    per item ``edge_of(x)`` and ``(x._shape, x.dtype)`` for a Tensor, ``(None, 0)`` and
    None for anything else. (``tensorplay._C.input_edges`` is the native twin.)"""
    edges, meta = [], []
    for x in items:
        if isinstance(x, Tensor):
            edges.append(edge_of(x))
            meta.append((x._shape, x.dtype))
        else:
            edges.append(_NO_EDGE)
            meta.append(None)
    return tuple(edges), meta


if NATIVE is not None:
    NATIVE.init_edges(grad_fn_of, accumulator)
input_edges = NATIVE.input_edges if NATIVE is not None else _input_edges


# ---- saved tensors ---------------------------------------------------------------------------


class _Hooks(threading.local):
    stack: tuple = ()


_saved_hooks = _Hooks()


class saved_tensors_hooks:
    """``pack(tensor) -> obj`` when a tensor is saved for backward, ``unpack(obj) -> tensor``
    when backward needs it (e.g. to offload or compress activations)."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        _saved_hooks.stack = _saved_hooks.stack + ((self.pack_hook, self.unpack_hook),)
        return self

    def __exit__(self, *exc):
        _saved_hooks.stack = _saved_hooks.stack[:-1]
        return False


class SavedTensor:
    """A tensor kept for backward, with the version it had when saved.

    Outputs of the node that saves them are kept without their ``grad_fn`` (that
    would be a reference cycle); ``unpack`` re-attaches it for ``create_graph``.
    Inside a dual level the tensor's forward-mode tangent is kept too, and ``unpack``
    gives a dual tensor (as torch's ``SavedVariable``): a backward pass run under forward
    mode (forward over reverse by hand, ``tp.func.jvp`` of a gradient) then differentiates
    the formulas that read saved values (tanh's and exp's read their output).
    """

    __slots__ = (
        "_packed",
        "_unpack",
        "_version",
        "_storage",
        "_node",
        "_output_nr",
        "_requires_grad",
        "_tangent",
    )

    def __init__(self, t, node=None):
        self._version = t._version
        self._storage = t._storage
        self._requires_grad = t.requires_grad
        self._tangent = None
        dual = forward_ad.state.level is not None and not forward_ad.state.busy
        if node is not None and t.grad_fn is node:  # an output of its own node
            self._node, self._output_nr = weakref.ref(node), t._output_nr
            if dual:
                self._tangent = _LateTangent(t)
            t = t.detach()
            t._base = None  # the detached view's base would be the output: a cycle again
        else:
            self._node, self._output_nr = None, 0
        hooks = _saved_hooks.stack
        if hooks:
            if dual and self._tangent is None:  # (pack may keep the values alone)
                self._tangent = t.__dict__.get("_fw_tangent")
            pack, self._unpack = hooks[-1]
            self._packed = pack(t)
        else:
            self._packed, self._unpack = t, None

    def unpack(self, op_name: str = "backward"):
        if self._storage._version != self._version:
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{op_name}] is at version {self._storage._version}; "
                f"expected version {self._version} instead. Hint: clone() the tensor before "
                "modifying it in place, or avoid the in-place operation."
            )
        t = self._packed if self._unpack is None else self._unpack(self._packed)
        if self._node is not None:
            node = self._node()
            if node is not None and self._requires_grad:
                t = t.detach()
                t.requires_grad = True
                t.grad_fn, t._output_nr = node, self._output_nr
        tangent = self._tangent
        if tangent is not None and forward_ad.state.level is not None:
            if type(tangent) is _LateTangent:
                tangent = tangent.get()
            if tangent is not None and "_fw_tangent" not in t.__dict__:
                if t is self._packed:
                    t = t.view_as(t)  # (the kept tensor itself stays as it was saved)
                t._fw_tangent = tangent
        return t


class _LateTangent:
    """The tangent of a saved output. The dispatcher gives an output its tangent after
    recording its node (so that a tangent formula reading the output is differentiable),
    so the tangent is not there when the node saves the output: read it from the output
    while the output lives, and keep it when the output dies."""

    __slots__ = ("_output", "_kept")

    def __init__(self, output):
        self._output = weakref.ref(output)
        self._kept: list = [None]
        # the finalizer holds the output's instance dict, not the output, and nothing here
        # holds the finalizer: no reference cycle through the node
        weakref.finalize(output, _keep_tangent, output.__dict__, self._kept).atexit = False

    def get(self):
        output = self._output()
        if output is not None:
            return output.__dict__.get("_fw_tangent")
        return self._kept[0]


def _keep_tangent(fields: dict, kept: list) -> None:
    kept[0] = fields.get("_fw_tangent")


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message: str = ""):
    prev = _saved_hooks.stack
    _saved_hooks.stack = ()
    try:
        yield
    finally:
        _saved_hooks.stack = prev


# ---- the running backward pass, and hooks over several tensors --------------------------------


class GraphTask:
    """One backward pass as hooks see it (``current_graph_task()`` while it runs): which
    nodes it runs, scratch space for hooks, and callbacks run when it ends. Made only when
    something asks for it: a pass starts as its bare list of nodes on ``_passes.stack``."""

    __slots__ = ("_order", "_nodes", "_scratch", "_callbacks")

    def __init__(self, order: list):
        self._order = order  # the nodes the engine will run, in its order
        self._nodes = None
        self._scratch = None
        self._callbacks = None

    def will_execute(self, node) -> bool:
        """Does this pass run ``node`` (torch's ``_will_engine_execute_node``)? A node that
        no gradient reaches is skipped all the same."""
        if self._nodes is None:
            self._nodes = set(self._order)
        return node in self._nodes

    def scratch(self) -> dict:
        """A dict that lives as long as this pass (hooks keep per-pass state there)."""
        if self._scratch is None:
            self._scratch = {}
        return self._scratch

    def queue_callback(self, fn) -> None:
        """Call ``fn()`` once the pass has run every node (and only if it succeeds)."""
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(fn)

    def finish(self) -> None:
        """Run the queued callbacks (a callback may queue more)."""
        callbacks = self._callbacks
        while callbacks:
            callbacks.pop(0)()


class _Passes(threading.local):
    def __init__(self):
        # the passes running on this thread, innermost last: each its list of nodes (what
        # the engine pushes), replaced by its GraphTask when one is asked for
        self.stack: list = []


_passes = _Passes()


def current_graph_task() -> GraphTask | None:
    """The innermost backward pass running on this thread, or None outside one."""
    stack = _passes.stack
    if not stack:
        return None
    top = stack[-1]
    if type(top) is not GraphTask:
        top = stack[-1] = GraphTask(top)
    return top


class _MultiHandle:
    """The handle of ``register_multi_grad_hook``: ``remove()`` removes every hook it set."""

    def __init__(self, handles: tuple):
        self._handles = handles

    def remove(self) -> None:
        for h in self._handles:
            h.remove()

    def __enter__(self) -> _MultiHandle:
        return self

    def __exit__(self, *exc) -> bool:
        self.remove()
        return False


def register_multi_grad_hook(tensors, fn, *, mode: str = "all") -> _MultiHandle:
    """Call ``fn`` once per backward pass with the gradients of several tensors.

    Args:
        tensors: a sequence of tensors.
        fn: ``mode="all"``: ``fn(grads)``, once every gradient of ``tensors`` that the pass
            computes has arrived; ``grads`` is a tuple with one entry per tensor, None for
            a tensor the pass does not reach (not in its graph, or not needed for the
            ``inputs`` of ``autograd.grad`` / ``backward``). ``mode="any"``: ``fn(grad)``
            with the first gradient that arrives. What ``fn`` returns is ignored, and it
            must not modify the gradients.
        mode: ``"all"`` (default) or ``"any"``.

    Returns a handle whose ``remove()`` unregisters the hook.

    Raises ``ValueError`` for another mode, ``TypeError`` when ``fn`` is not callable or
    an element is not a Tensor, and (``"all"``) ``RuntimeError`` naming a tensor that does
    not require grad (``"any"`` skips those, as torch).

    Example::

        a, b = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
        register_multi_grad_hook((a, b), lambda grads: print(grads))
        (a * b).sum().backward()       # prints both gradients, once
    """
    if mode not in ("all", "any"):
        raise ValueError(f"register_multi_grad_hook: mode must be 'all' or 'any', got {mode!r}")
    _check_hook("register_multi_grad_hook", fn)
    if isinstance(tensors, Tensor):
        raise TypeError(
            "register_multi_grad_hook: tensors must be a sequence of tensors; wrap "
            "a single tensor as (t,)"
        )
    tensors = tuple(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"register_multi_grad_hook: tensors[{i}] is a {type(t).__name__}, expected a Tensor"
            )
    key = object()  # this registration's slot in each pass's scratch
    if mode == "any":

        def first(grad):
            scratch = current_graph_task().scratch()
            if key not in scratch:
                scratch[key] = True
                fn(grad)

        return _MultiHandle(tuple(t.register_hook(first) for t in tensors if t.requires_grad))

    for i, t in enumerate(tensors):
        if not t.requires_grad:
            raise RuntimeError(
                f"register_multi_grad_hook: tensors[{i}] does not require grad, so no gradient "
                "ever reaches it; leave it out (mode='any' skips such tensors)"
            )
    # each tensor's node (a leaf's AccumulateGrad), held so that later graphs use the same
    nodes = [edge_of(t)[0] for t in tensors]

    def hook_for(i: int):
        def hook(grad):
            # (a pass runs its hooks on its own thread: no lock)
            task = current_graph_task()
            scratch = task.scratch()
            pending = scratch.get(key)
            if pending is None:  # the first gradient of this pass: count those to come
                expected = sum(task.will_execute(n) for n in nodes)
                pending = scratch[key] = _Pending(expected, len(nodes))
                # a node the pass runs may still get no gradient (the engine then skips it
                # and its hooks): the end of the pass is the latest fn runs
                task.queue_callback(lambda: pending.fire(fn))
            pending.grads[i] = grad
            pending.left -= 1
            if pending.left == 0:
                pending.fire(fn)

        return hook

    return _MultiHandle(tuple(t.register_hook(hook_for(i)) for i, t in enumerate(tensors)))


class _Pending:
    """The gradients one ``register_multi_grad_hook`` (mode "all") collected in one pass."""

    __slots__ = ("left", "grads", "fired")

    def __init__(self, left: int, n: int):
        self.left, self.grads, self.fired = left, [None] * n, False

    def fire(self, fn) -> None:
        if not self.fired:
            self.fired = True
            fn(tuple(self.grads))
