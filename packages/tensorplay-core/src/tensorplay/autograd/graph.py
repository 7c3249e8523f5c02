"""The backward graph: nodes (``tensor.grad_fn``), edges, saved tensors and hooks.

A node turns the gradients of its outputs into gradients of its inputs
(``apply``); ``next_functions`` are the edges to the nodes that produced those
inputs, as ``(node, output_nr)`` pairs. Leaves that require grad end in an
``AccumulateGrad`` node, which adds into ``tensor.grad``.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from types import MappingProxyType

from tensorplay._native import NATIVE
from tensorplay._tensor import Tensor
from tensorplay.autograd import grad_mode

__all__ = [
    "Node",
    "AccumulateGrad",
    "SavedTensor",
    "saved_tensors_hooks",
    "RemovableHandle",
    "edge_of",
    "grad_fn_of",
    "register_view_rebuild",
]


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook."""

    def __init__(self, hooks: list, fn):
        self._hooks, self._fn = hooks, fn

    def remove(self) -> None:
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)


class Node:
    """One step of the backward graph.

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

    def apply(self, grad_outputs: list) -> tuple:
        raise NotImplementedError

    def release(self) -> None:
        """Free what backward needed (the graph was not retained)."""
        self._released = True

    def register_hook(self, fn) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs)`` runs after this node; may return new grad_inputs."""
        hooks = self._own("_hooks", list)
        hooks.append(fn)
        return RemovableHandle(hooks, fn)

    def register_prehook(self, fn) -> RemovableHandle:
        """``fn(grad_outputs)`` runs before this node; may return new grad_outputs."""
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
    """

    __slots__ = (
        "_packed",
        "_unpack",
        "_version",
        "_storage",
        "_node",
        "_output_nr",
        "_requires_grad",
    )

    def __init__(self, t, node=None):
        self._version = t._version
        self._storage = t._storage
        self._requires_grad = t.requires_grad
        if node is not None and t.grad_fn is node:  # an output of its own node
            self._node, self._output_nr = weakref.ref(node), t._output_nr
            t = t.detach()
            t._base = None  # the detached view's base would be the output: a cycle again
        else:
            self._node, self._output_nr = None, 0
        hooks = _saved_hooks.stack
        if hooks:
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
        return t


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message: str = ""):
    prev = _saved_hooks.stack
    _saved_hooks.stack = ()
    try:
        yield
    finally:
        _saved_hooks.stack = prev
