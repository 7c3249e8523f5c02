"""Symbolic capture: ``Tracer`` runs a function on ``Proxy`` values and records a ``Graph``.

How a call reaches the tracer:

* core ops (``tp.exp(p)``, ``p.exp()``, ``p + 1``): ``Proxy`` implements
  ``__tensorplay_function__``, so the dispatcher hands every public op that receives a
  proxy to ``Proxy.__tensorplay_function__``, which records a ``call_function`` node.
  Methods are recorded as ``call_method`` nodes, operators as calls of the op function:
  ``x + y`` and ``tp.add(x, y)`` are both ``tp.add`` (torch.fx records ``operator.add``
  for the first), so a pass or a pattern matches an op whichever way it was spelled.
* library ops (``custom_op``, ``triton_op``, ``tile_lang_op``) are entries of the same
  dispatcher (``TensorOp``), so they reach ``Proxy.__tensorplay_function__`` the same way
  and become one opaque node: the op's body never runs. (Other code holding a proxy can
  call core's ``capture_call(target, args, kwargs)``, which lands in
  ``Tracer.record_call``.)
* functions marked with ``wrap`` record one ``call_function`` node (``Tracer.record``)
  instead of being traced through.

Every node gets ``meta["val"]``: its result computed by the same call on meta tensors
(shape and dtype only, never real kernels). A value Python needs concretely (``bool(p)``,
``p.item()``, ``int(p)``) cannot be known symbolically: that raises ``GraphCaptureError``
naming the user's line.
"""

from __future__ import annotations

import inspect
import linecache
import operator
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorplay as tp
from tensorplay import capture
from tensorplay._extension import OPS, TensorOp
from tensorplay.capture import GraphCaptureError
from tensorplay.graph._graph import Graph, Node, map_args
from tensorplay.graph._module import GraphModule
from tensorplay.graph._shape_prop import _meta_like, propagate

__all__ = ["Proxy", "Tracer", "get_graph_node_names", "symbolic_trace", "user_frame"]

# Tensor attributes read from the value's metadata instead of being recorded.
_SHAPE_ATTRS = frozenset({"shape", "size", "numel", "stride"})
_META_ATTRS = frozenset(
    {"dtype", "device", "ndim", "dim", "is_cuda", "is_meta", "is_floating_point", "is_complex"}
)
# Reading these needs the data itself: no symbolic answer exists.
_DATA_ATTRS = frozenset({"item", "tolist", "numpy", "data_ptr", "grad", "data", "backward"})
# Core's files and ours: the user's line is the first frame outside them.
_PACKAGE_DIRS = tuple(str(Path(p).resolve()) for p in tp.__path__)


def user_frame() -> tuple[str, int, str] | None:
    """(file, line, source text) of the innermost frame outside TensorPlay, if any."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        ours = filename.startswith("<tensorplay") or (
            not filename.startswith("<") and str(Path(filename).resolve()).startswith(_PACKAGE_DIRS)
        )
        if not ours:
            text = linecache.getline(filename, frame.f_lineno).strip()
            return filename, frame.f_lineno, text
        frame = frame.f_back
    return None


def capture_error(what: str, fix: str) -> GraphCaptureError:
    """A ``GraphCaptureError`` saying ``what`` happened on the user's line and ``fix``."""
    where = user_frame()
    at = f" at {where[0]}:{where[1]}: `{where[2]}`" if where else ""
    return GraphCaptureError(f"{what}{at}. {fix}")


_DATA_FIX = (
    "A traced value has no data: Python cannot branch on it or convert it. Rewrite with "
    "tensor ops (tp.where(cond, a, b), tp.clamp, masks), pass the value as a plain "
    "argument, or let tp.compile fall back to eager (fullgraph=False)"
)


class Proxy(capture.Proxy):
    """A symbolic tensor: the value of ``node`` while ``tracer`` records."""

    __slots__ = ("node", "tracer")

    def __init__(self, node: Node, tracer: Tracer) -> None:
        self.node = node
        self.tracer = tracer

    def __repr__(self) -> str:
        return f"Proxy({self.node.name})"

    # ---- the core protocol: every public op given a Proxy comes here -------------------

    def __tensorplay_function__(self, func, types, args=(), kwargs=None):
        # a library op (a TensorOp entry) is one opaque node: its body never runs
        return self.tracer.record(func, args, kwargs or {}, opaque=isinstance(func, TensorOp))

    # ---- metadata and methods ------------------------------------------------------------

    def _meta(self, attr: str) -> Any:
        val = self.node.meta.get("val")
        if val is None:
            raise capture_error(
                f"{attr} of {self.node.name} ({self.node.op_name}) is unknown during capture",
                "Shapes come from fake/meta kernels: register a fake kernel for the op "
                "(register_fake) or avoid reading it",
            )
        return val

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _DATA_ATTRS:
            raise capture_error(f"Tensor.{name} on a traced value", _DATA_FIX)
        if name in _SHAPE_ATTRS:
            self.tracer.shape_specialized = True
            return getattr(self._meta(name), name)
        if name in _META_ATTRS:
            return getattr(self._meta(name), name)
        if name == "requires_grad":
            return bool(self.node.meta.get("requires_grad", False))
        static = inspect.getattr_static(tp.Tensor, name, None)
        if isinstance(static, property):  # Tensor.T and friends are compositions of ops
            return static.fget(self)
        if static is None or not callable(getattr(tp.Tensor, name, None)):
            raise AttributeError(f"'Tensor' has no attribute {name!r} (while tracing)")

        def method(*args: Any, **kwargs: Any) -> Any:
            return self.tracer.record(name, (self, *args), kwargs, method=True)

        method.__name__ = name
        return method

    def __len__(self) -> int:
        self.tracer.shape_specialized = True
        shape = self._meta("len()").shape
        if not shape:
            raise capture_error("len() of a 0-d traced value", "0-d tensors have no length")
        return shape[0]

    def __iter__(self):
        # unrolled along dim 0, as iterating a tensor would
        return iter([self[i] for i in range(len(self))])

    def __bool__(self) -> bool:
        raise capture_error("data-dependent control flow: bool() of a traced value", _DATA_FIX)

    def __int__(self) -> int:
        raise capture_error("int() of a traced value", _DATA_FIX)

    def __float__(self) -> float:
        raise capture_error("float() of a traced value", _DATA_FIX)

    def __index__(self) -> int:
        raise capture_error("a traced value used as a Python index", _DATA_FIX)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise capture_error("numpy conversion of a traced value", _DATA_FIX)

    def __getitem__(self, index: Any) -> Proxy:
        return self.tracer.record(operator.getitem, (self, index), {})

    def __setitem__(self, index: Any, value: Any) -> None:
        self.tracer.record(operator.setitem, (self, index, value), {})

    def __pos__(self) -> Proxy:
        return self

    __hash__ = object.__hash__  # the comparison operators below return proxies


def _install_operators() -> None:
    """Give ``Proxy`` every operator ``Tensor`` has, recording the op's function."""
    for row in OPS.values():
        for dunder in row.dunders:
            if dunder.startswith("__i") and dunder not in ("__invert__",):
                fn, swap = row.inplace_fn, False
            else:
                fn, swap = row.fn, dunder.startswith("__r") and dunder != "__rshift__"

            def op(self: Proxy, *other: Any, _fn=fn, _swap=swap) -> Any:
                args = (other[0], self) if _swap else (self, *other)
                return self.tracer.record(_fn, args, {})

            op.__name__ = dunder
            setattr(Proxy, dunder, op)


class Tracer:
    """Record a function's (or a module's) TensorPlay calls as a ``Graph``.

    ``Tracer().trace(fn, sample_inputs={"x": tensor})`` returns a ``GraphModule``; the
    sample inputs give shapes and dtypes (nothing runs on their data). Parameters not in
    ``sample_inputs`` are placeholders without shape information, unless ``concrete_args``
    fixes their value.
    """

    def __init__(self) -> None:
        self.graph = Graph()
        self.constants: dict[str, Any] = {}
        self._constant_nodes: dict[int, Node] = {}
        self._attribute_names: dict[int, str] = {}  # id(tensor) -> "layer.weight"
        self._anonymous = 0  # tensors that are no module's attribute: _tensor_constant<i>
        # set when the traced code read a shape: the graph is valid for these shapes only
        self.shape_specialized = False

    # ---- entry point ---------------------------------------------------------------------

    def trace(
        self,
        root: Callable,
        sample_inputs: dict[str, Any] | None = None,
        *,
        concrete_args: dict[str, Any] | None = None,
    ) -> GraphModule:
        """Capture ``root`` into a ``GraphModule`` whose inputs are its tensor parameters.

        Args:
            root: a function, or a module (an object with ``forward``, such as a
                ``tensorplay.nn.Module``): it is called as in eager mode (hooks run), its
                submodules are traced through, and its parameters and buffers
                (``named_parameters()`` / ``named_buffers()``) become ``get_attr`` nodes
                named by their qualified names (``"0.weight"``).
            sample_inputs: parameter name -> tensor giving its shape and dtype.
            concrete_args: parameter name -> value to specialise on: the value is used
                while tracing (Python branches on it are resolved) and the parameter is
                not an input of the graph.

        Raises:
            TypeError: ``root`` is not callable, or a name in ``sample_inputs`` /
                ``concrete_args`` is not one of its parameters.
        """
        if not callable(root):
            raise TypeError(f"Tracer.trace(root): root must be callable, got {type(root).__name__}")
        sample_inputs = dict(sample_inputs or {})
        concrete_args = dict(concrete_args or {})
        owner = getattr(root, "__self__", root)  # a bound method's module, or the module
        self._attribute_names = _attribute_names(owner)
        forward = getattr(root, "forward", None)
        params = inspect.signature(forward if callable(forward) else root).parameters
        named = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for what, given in (("sample_inputs", sample_inputs), ("concrete_args", concrete_args)):
            unknown = set(given) - set(params)
            if unknown and not (named and what == "sample_inputs"):
                raise TypeError(
                    f"Tracer.trace(): {what} names {sorted(unknown)} are not parameters of "
                    f"{getattr(root, '__name__', type(root).__name__)}"
                    f"{inspect.signature(forward if callable(forward) else root)}"
                )
        both = set(sample_inputs) & set(concrete_args)
        if both:
            raise TypeError(
                f"Tracer.trace(): {sorted(both)} given in both sample_inputs and concrete_args; "
                "a parameter is either an input (sample) or specialised (concrete)"
            )
        args: list = []
        kwargs: dict = {}
        for name, p in params.items():
            if p.kind is p.VAR_POSITIONAL:
                i = 0  # *args samples are named args_0, args_1, ...
                while f"{name}_{i}" in sample_inputs:
                    args.append(self._input(f"{name}_{i}", sample_inputs[f"{name}_{i}"]))
                    i += 1
                continue
            if p.kind is p.VAR_KEYWORD:
                for key in sample_inputs.keys() - params.keys():
                    kwargs[key] = self._input(key, sample_inputs[key])
                continue
            if name in concrete_args:
                value = concrete_args[name]
            elif name in sample_inputs:
                value = self._input(name, sample_inputs[name])
            elif p.default is not p.empty:
                value = p.default
            else:
                value = self._input(name, None)
            if p.kind is p.KEYWORD_ONLY:
                kwargs[name] = value
            else:
                args.append(value)
        with capture.tracing(self):
            result = root(*args, **kwargs)
        self.graph.output(map_args(result, self._as_arg))
        return GraphModule(self.graph, self.constants)

    def trace_inputs(self, fn: Callable, inputs: dict[str, Any]) -> GraphModule:
        """Capture ``fn(*proxies)``: one placeholder per entry of ``inputs`` (name -> sample)."""
        proxies = [self._input(name, sample) for name, sample in inputs.items()]
        with capture.tracing(self):
            result = fn(*proxies)
        self.graph.output(map_args(result, self._as_arg))
        return GraphModule(self.graph, self.constants)

    def _input(self, name: str, sample: Any) -> Any:
        if sample is not None and not isinstance(sample, tp.Tensor):
            return sample  # a plain value traces as itself (and is baked into the graph)
        node = self.graph.placeholder(name)
        if sample is not None:
            node.meta["val"] = _meta_like(sample)
            node.meta["device"] = sample.device
            node.meta["requires_grad"] = sample.requires_grad
        return Proxy(node, self)

    # ---- recording -----------------------------------------------------------------------

    def record_call(self, target: Any, args: tuple, kwargs: dict) -> Any:
        """Core's capture interface: record ``target(*args, **kwargs)`` as one node."""
        return self.record(target, args, kwargs, opaque=True)

    def record(
        self,
        target: Any,
        args: tuple,
        kwargs: dict,
        *,
        method: bool = False,
        opaque: bool = False,
    ) -> Any:
        """Append a node for the call and return a proxy (or a tuple of proxies) for it."""
        node_args = map_args(tuple(args), self._as_arg)
        node_kwargs = map_args(dict(kwargs), self._as_arg)
        op = "call_method" if method else "call_function"
        node = self.graph.create_node(op, target, node_args, node_kwargs)
        node.meta["opaque"] = opaque
        node.meta["stack"] = user_frame()
        propagate(node)
        val = node.meta.get("val")
        if isinstance(val, tuple):  # a multi-output op: one getitem node per output
            items = [
                self.record(operator.getitem, (Proxy(node, self), i), {}) for i in range(len(val))
            ]
            return type(val)(*items) if hasattr(val, "_fields") else tuple(items)
        if target is operator.setitem:
            return None
        return Proxy(node, self)

    def _as_arg(self, value: Any) -> Any:
        if isinstance(value, Proxy):
            if value.tracer is not self:
                raise GraphCaptureError(
                    f"{value!r} belongs to another capture; values cannot cross tracers"
                )
            return value.node
        if isinstance(value, tp.Tensor):  # a tensor made outside the capture: an attribute
            known = self._constant_nodes.get(id(value))
            if known is None:
                name = self._attribute_names.get(id(value))
                if name is None:
                    name = f"_tensor_constant{self._anonymous}"
                    self._anonymous += 1
                known = self.graph.get_attr(name)
                known.meta["val"] = _meta_like(value)
                known.meta["device"] = value.device
                self.constants[name] = value
                self._constant_nodes[id(value)] = known
            return known
        return value


def symbolic_trace(
    root: Callable,
    sample_inputs: dict[str, Any] | None = None,
    *,
    concrete_args: dict[str, Any] | None = None,
) -> GraphModule:
    """``Tracer().trace(root, sample_inputs, concrete_args=...)``: capture ``root``."""
    return Tracer().trace(root, sample_inputs, concrete_args=concrete_args)


def get_graph_node_names(
    root: Callable,
    sample_inputs: dict[str, Any] | None = None,
    *,
    concrete_args: dict[str, Any] | None = None,
) -> tuple[list[str], list[str]]:
    """``(train_names, eval_names)``: the node names of ``root``'s graph in training and in
    evaluation mode, as torchvision's ``feature_extraction.get_graph_node_names`` returns.

    Inputs are listed, the output node is not. A module (anything with ``train()`` /
    ``eval()`` and ``training``) is traced once in each mode and left in the mode it was
    in; for a function both lists are the same.
    """
    switch = all(hasattr(root, a) for a in ("train", "eval", "training"))
    if not switch:
        names = _node_names(symbolic_trace(root, sample_inputs, concrete_args=concrete_args))
        return names, list(names)
    was_training = bool(root.training)
    try:
        root.train()
        train = _node_names(symbolic_trace(root, sample_inputs, concrete_args=concrete_args))
        root.eval()
        evaluation = _node_names(symbolic_trace(root, sample_inputs, concrete_args=concrete_args))
    finally:
        root.train(was_training)
    return train, evaluation


def _node_names(gm: GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.op != "output"]


def _attribute_names(owner: Any) -> dict[int, str]:
    """id(tensor) -> qualified name, for a module's parameters and buffers (duck-typed)."""
    names: dict[int, str] = {}
    for method in ("named_parameters", "named_buffers"):
        listing = getattr(owner, method, None)
        if callable(listing):
            for name, tensor in listing():
                names.setdefault(id(tensor), name)
    return names


_install_operators()
