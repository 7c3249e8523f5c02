"""``Node`` and ``Graph``: the captured program as a list of nodes in execution order.

A node is one step: ``placeholder`` (an input), ``get_attr`` (an attribute of the module:
a constant tensor), ``call_function`` (``target(*args, **kwargs)``), ``call_method``
(``args[0].<target>(*args[1:], **kwargs)``), ``call_module`` (the module's submodule
``target`` called on the arguments) or ``output`` (what the program returns). Arguments
refer to earlier nodes directly, so the graph is its own use-def chain: every node keeps
``users``, the nodes reading it, up to date whenever ``args``/``kwargs`` change.

Editing follows ``torch.fx``: ``with graph.inserting_after(node):`` then
``graph.call_function(...)``; ``node.replace_all_uses_with(new)``; ``graph.erase_node``;
``graph.eliminate_dead_code()``; ``graph.lint()``. The nodes form a doubly linked list, so
a pass may erase or insert nodes while it iterates over ``graph.nodes``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import keyword
import operator
import re
from collections.abc import Callable, Iterator
from typing import Any

import tensorplay as tp

__all__ = ["Graph", "Node", "PythonCode", "is_name", "map_args", "target_name"]

OPCODES = ("placeholder", "get_attr", "call_function", "call_method", "call_module", "output")
# Names the generated code uses for itself; a node may not take them. (torch.fx also
# refuses every builtin name; our code calls only these, so `sum` stays a node name.)
_RESERVED = frozenset({"self", "tp", "operator", "getattr", "slice", "inf", "nan"})
# A name and its numeric suffix: ``add_2`` -> ("add", "2"), as torch.fx's namespace reads it.
_NUMBERED = re.compile(r"^([A-Za-z_][0-9A-Za-z_]*?)(?:_(\d+))?$")
# Strings the generated code may spell as literals; any other string becomes a global.
_PLAIN_STRING = re.compile(r"[A-Za-z0-9_.:+-]*")


def map_args(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` with ``fn`` applied to every leaf of its nested tuples/lists/dicts."""
    if type(value) is tuple:
        return tuple(map_args(v, fn) for v in value)
    if hasattr(value, "_fields") and isinstance(value, tuple):  # named tuples keep their type
        return type(value)(*(map_args(v, fn) for v in value))
    if type(value) is list:
        return [map_args(v, fn) for v in value]
    if type(value) is dict:
        return {k: map_args(v, fn) for k, v in value.items()}
    if type(value) is slice:
        return slice(map_args(value.start, fn), map_args(value.stop, fn), map_args(value.step, fn))
    return fn(value)


def target_name(target: Any) -> str:
    """A short readable name for a call target: ``exp``, ``add_``, ``getitem``, ``demo::scaled``."""
    if isinstance(target, str):
        return target
    name = getattr(target, "name", None)  # library ops: "namespace::op"
    if isinstance(name, str) and "::" in name:
        return name
    return getattr(target, "__name__", None) or type(target).__name__


def is_name(text: Any) -> bool:
    """``text`` may appear as a name in generated source: an identifier, not a keyword."""
    return isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)


def _identifier(text: str) -> str:
    """``text`` as an ASCII Python identifier (``demo::scaled`` -> ``demo_scaled``)."""
    name = re.sub(r"[^0-9A-Za-z_]+", "_", text) or "node"
    return "_" + name if name[0].isdigit() else name


def _is_in_place(name: str) -> bool:
    """PyTorch's naming convention: ``add_`` writes into its first argument."""
    return name.endswith("_") and not name.startswith("_")


class _Root:
    """The sentinel closing a graph's circular list of nodes."""

    def __init__(self) -> None:
        self._prev: Node | _Root = self
        self._next: Node | _Root = self
        self._erased = False


class Node:
    """One step of a ``Graph``. ``meta["val"]`` holds the value's shape/dtype (a meta tensor).

    ``args``/``kwargs`` may be reassigned: the ``users`` of the nodes read before and after
    are updated. ``users`` maps each node reading this one to ``None`` (an ordered set).
    """

    def __init__(
        self, graph: Graph, name: str, op: str, target: Any, args: tuple, kwargs: dict
    ) -> None:
        if op not in OPCODES:
            raise ValueError(f"Node op must be one of {OPCODES}, got {op!r}")
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self.meta: dict[str, Any] = {}
        self.users: dict[Node, None] = {}
        self._inputs: dict[Node, None] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._prev: Node | _Root = self  # linked into the graph by Graph.create_node
        self._next: Node | _Root = self
        self._erased = False
        self._set_args(tuple(args), dict(kwargs))

    # ---- arguments and uses --------------------------------------------------------------

    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, value: tuple) -> None:
        self._set_args(tuple(value), self._kwargs)

    @property
    def kwargs(self) -> dict:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value: dict) -> None:
        self._set_args(self._args, dict(value))

    def _set_args(self, args: tuple, kwargs: dict) -> None:
        """The one place arguments change: ``users`` of old and new inputs follow."""
        found: dict[Node, None] = {}

        def visit(v: Any) -> Any:
            if isinstance(v, Node):
                if v.graph is not self.graph or v._erased:
                    where = "was erased" if v._erased else "belongs to another graph"
                    raise ValueError(
                        f"node {self.name!r}: argument %{v.name} {where}; pass a node of this "
                        "graph (copy nodes between graphs with graph.node_copy(node, "
                        "arg_transform))"
                    )
                found[v] = None
            return v

        map_args((args, kwargs), visit)
        for old in self._inputs:
            old.users.pop(self, None)
        self._args, self._kwargs, self._inputs = args, kwargs, found
        for new in found:
            new.users[self] = None

    @property
    def all_input_nodes(self) -> list[Node]:
        """The nodes this node reads, in argument order, each once."""
        return list(self._inputs)

    def replace_input_with(self, old_input: Node, new_input: Any) -> None:
        """Read ``new_input`` wherever this node read ``old_input``."""
        swap = lambda v: new_input if v is old_input else v  # noqa: E731
        self._set_args(map_args(self._args, swap), map_args(self._kwargs, swap))

    def replace_all_uses_with(
        self, replace_with: Node, delete_user_cb: Callable[[Node], bool] | None = None
    ) -> list[Node]:
        """Make every user read ``replace_with`` instead; return the users changed.

        ``delete_user_cb(user)`` returning False keeps that user on this node.
        NOTE: unlike torch.fx, ``replace_with`` itself is never rewired (reading itself
        would be a cycle), so ``new = f(node); node.replace_all_uses_with(new)`` needs no
        callback.
        """
        if not isinstance(replace_with, Node):
            raise TypeError(
                f"{self.name}.replace_all_uses_with(replace_with): replace_with must be a "
                f"Node, got {type(replace_with).__name__}; to use a constant, set each "
                "user's args instead"
            )
        changed = []
        for user in list(self.users):
            if user is replace_with or (delete_user_cb is not None and not delete_user_cb(user)):
                continue
            user.replace_input_with(self, replace_with)
            changed.append(user)
        return changed

    # ---- position ------------------------------------------------------------------------

    def prepend(self, x: Node) -> None:
        """Move (or insert) ``x`` right before this node."""
        self._check_movable(x, "prepend")
        x._unlink()
        x._link_between(self._prev, self)

    def append(self, x: Node) -> None:
        """Move (or insert) ``x`` right after this node."""
        self._check_movable(x, "append")
        x._unlink()
        x._link_between(self, self._next)

    def _check_movable(self, x: Node, how: str) -> None:
        if x.graph is not self.graph or x._erased or self._erased:
            raise ValueError(
                f"{self.name}.{how}({x.name}): both nodes must be live nodes of one graph"
            )
        if x is self:
            raise ValueError(f"{self.name}.{how}({x.name}): a node cannot move next to itself")

    def _unlink(self) -> None:
        # the node keeps its own links, so an iterator standing on it can go on
        self._prev._next, self._next._prev = self._next, self._prev

    def _link_between(self, prev: Node | _Root, nxt: Node | _Root) -> None:
        self._prev, self._next = prev, nxt
        prev._next = nxt._prev = self

    # ---- reading -------------------------------------------------------------------------

    def is_impure(self) -> bool:
        """Whether dead-code elimination must keep this node although nothing reads it.

        Placeholders, the output, in-place ops (a method or function named ``..._``,
        ``operator.setitem``, an ``out=`` argument), library ops that mutate an argument
        (``mutates_args``) and modules marked ``_is_impure`` are impure.
        """
        if self.op in ("placeholder", "output"):
            return True
        if self.op == "call_method":
            return _is_in_place(self.target)
        if self.op == "call_function":
            target = self.target
            return (
                target is operator.setitem
                or "out" in self._kwargs
                or bool(getattr(target, "mutates_args", ()))
                or _is_in_place(getattr(target, "__name__", ""))
            )
        if self.op == "call_module":
            module = getattr(self.graph.owning_module, self.target, None)
            return bool(getattr(module, "_is_impure", False))
        return False

    @property
    def op_name(self) -> str:
        """What the node computes, for tables and reports (``exp``, ``demo::scaled``, ``x``)."""
        return target_name(self.target)

    def format_node(self) -> str:
        args = ", ".join(_fmt(a) for a in self._args)
        kwargs = ", ".join(f"{k}={_fmt(v)}" for k, v in self._kwargs.items())
        inner = ", ".join(x for x in (args, kwargs) if x)
        if self.op == "placeholder":
            return f"%{self.name} : placeholder"
        if self.op == "output":
            return f"return {inner}"
        if self.op == "get_attr":
            return f"%{self.name} : get_attr[{self.target}]"
        return f"%{self.name} : {self.op}[{self.op_name}]({inner})"

    def __repr__(self) -> str:
        return self.name


def _fmt(v: Any) -> str:
    if isinstance(v, Node):
        return f"%{v.name}"
    if type(v) in (tuple, list):
        inner = ", ".join(_fmt(x) for x in v)
        return f"({inner}{',' if len(v) == 1 else ''})" if type(v) is tuple else f"[{inner}]"
    if type(v) is dict:
        return "{" + ", ".join(f"{k!r}: {_fmt(x)}" for k, x in v.items()) + "}"
    return repr(v)


class _NodeList:
    """``graph.nodes``: the live nodes in order; iterating survives erasing and inserting.

    Read-only: nodes are added by ``Graph.create_node`` (and its helpers), removed by
    ``Graph.erase_node`` and moved by ``Node.prepend`` / ``Node.append``.
    """

    def __init__(self, graph: Graph, *, reverse: bool = False) -> None:
        self._graph = graph
        self._reverse = reverse

    def __iter__(self) -> Iterator[Node]:
        root = self._graph._root
        step = "_prev" if self._reverse else "_next"
        cur = getattr(root, step)
        while cur is not root:
            if not cur._erased:
                yield cur
            cur = getattr(cur, step)

    def __reversed__(self) -> Iterator[Node]:
        return iter(_NodeList(self._graph, reverse=not self._reverse))

    def __len__(self) -> int:
        return self._graph._len

    def __getitem__(self, index: int | slice) -> Any:
        return list(self)[index]

    def __contains__(self, node: object) -> bool:
        return isinstance(node, Node) and node.graph is self._graph and not node._erased

    def __repr__(self) -> str:
        return f"[{', '.join(n.name for n in self)}]"


@dataclasses.dataclass
class PythonCode:
    """What ``Graph.python_code`` generates (torch.fx's ``PythonCode``): the source of
    ``forward(self, ...)`` and the globals it runs with."""

    src: str
    globals: dict[str, Any]


class Graph:
    """An ordered list of ``Node`` s; node names are unique, readable identifiers."""

    def __init__(self) -> None:
        self._root = _Root()
        self._len = 0
        self._used_names: set[str] = set()
        self._base_count: dict[str, int] = {}
        # (anchor, "before" | "after"): where create_node puts the next node
        self._insert_point: tuple[Node | _Root, str] = (self._root, "before")
        self.owning_module: Any = None  # the GraphModule built on this graph, if any

    @property
    def nodes(self) -> _NodeList:
        return _NodeList(self)

    # ---- building ------------------------------------------------------------------------

    def _unique(self, candidate: str) -> str:
        """A fresh name from ``candidate``: torch.fx's rule (``add``, ``add_1``, ...; an
        explicit ``add_5`` is kept, or continues at ``add_6`` when taken)."""
        candidate = _identifier(candidate)
        match = _NUMBERED.match(candidate)  # always matches: _identifier made it ASCII
        base, num = match.groups() if match else (candidate, None)
        if num is None or candidate in self._used_names:
            count = self._base_count.get(base, 0)
            if keyword.iskeyword(candidate) or candidate in _RESERVED:
                count += 1
                candidate = f"{base}_{count}"
        else:
            count = int(num)
        while candidate in self._used_names:
            count += 1
            candidate = f"{base}_{count}"
        self._used_names.add(candidate)
        self._base_count[base] = count
        return candidate

    def create_node(
        self,
        op: str,
        target: Any,
        args: tuple = (),
        kwargs: dict | None = None,
        name: str | None = None,
    ) -> Node:
        """Insert a node at the insertion point (the end, unless ``inserting_before`` /
        ``inserting_after`` moved it); its name is ``name`` (or from ``target``) made unique."""
        anchor, where = self._insert_point
        if anchor._erased:
            raise RuntimeError(
                f"the insertion point ({where} node {anchor!r}) was erased; choose another "
                "with graph.inserting_before(node) / graph.inserting_after(node)"
            )
        base = name if name is not None else _default_name(op, target)
        node = Node(self, self._unique(base), op, target, tuple(args or ()), dict(kwargs or {}))
        if where == "before":
            node._link_between(anchor._prev, anchor)
        else:  # the point follows the new node: nodes created in a row keep their order
            node._link_between(anchor, anchor._next)
            self._insert_point = (node, "after")
        self._len += 1
        return node

    @contextlib.contextmanager
    def _inserting(self, point: tuple[Node | _Root, str]) -> Iterator[None]:
        saved, self._insert_point = self._insert_point, point
        try:
            yield
        finally:
            self._insert_point = saved

    def inserting_before(self, node: Node | None = None) -> contextlib.AbstractContextManager:
        """``with graph.inserting_before(node):`` new nodes go right before ``node``, in the
        order they are created (``None``: at the start of the graph)."""
        if node is None:
            return self._inserting((self._root, "after"))
        self._check_owned(node, "inserting_before")
        return self._inserting((node, "before"))

    def inserting_after(self, node: Node | None = None) -> contextlib.AbstractContextManager:
        """``with graph.inserting_after(node):`` new nodes go right after ``node``, in the
        order they are created (``None``: at the end of the graph).

        NOTE: torch.fx inserts each new node directly after ``node``, so two nodes created
        in a row come out reversed; here they stay in creation order.
        """
        if node is None:
            return self._inserting((self._root, "before"))
        self._check_owned(node, "inserting_after")
        return self._inserting((node, "after"))

    def _check_owned(self, node: Node, what: str) -> None:
        if not isinstance(node, Node) or node.graph is not self or node._erased:
            raise ValueError(f"{what}({node!r}): the node is not a live node of this graph")

    def placeholder(self, name: str) -> Node:
        return self.create_node("placeholder", name, name=name)

    def get_attr(self, qualified_name: str) -> Node:
        """A node reading the module's attribute ``qualified_name`` (``"layer.weight"``)."""
        return self.create_node("get_attr", qualified_name, name=qualified_name)

    def call_function(
        self, the_function: Callable, args: tuple = (), kwargs: dict | None = None
    ) -> Node:
        return self.create_node("call_function", the_function, args, kwargs)

    def call_method(self, method_name: str, args: tuple = (), kwargs: dict | None = None) -> Node:
        return self.create_node("call_method", method_name, args, kwargs)

    def call_module(self, module_name: str, args: tuple = (), kwargs: dict | None = None) -> Node:
        """A node calling the module's submodule ``module_name`` (see
        ``GraphModule.add_submodule``)."""
        return self.create_node("call_module", module_name, args, kwargs)

    def output(self, result: Any) -> Node:
        return self.create_node("output", "output", (result,), name="output")

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda n: n) -> Node:
        """A copy of ``node`` (of any graph) at the insertion point; ``arg_transform`` maps
        each node it reads to this graph's value."""
        args = map_args(node.args, lambda v: arg_transform(v) if isinstance(v, Node) else v)
        kwargs = map_args(node.kwargs, lambda v: arg_transform(v) if isinstance(v, Node) else v)
        copy = self.create_node(node.op, node.target, args, kwargs, name=node.name)
        copy.meta = dict(node.meta)
        return copy

    def erase_node(self, to_erase: Node) -> None:
        """Remove a node nothing reads any more.

        Raises ``RuntimeError`` when the node still has users (replace them first:
        ``node.replace_all_uses_with(other)``), belongs to another graph or was erased.
        """
        if not isinstance(to_erase, Node) or to_erase.graph is not self:
            raise RuntimeError(f"erase_node({to_erase!r}): the node is not in this graph")
        if to_erase._erased:
            raise RuntimeError(f"erase_node({to_erase.name}): the node was already erased")
        if to_erase.users:
            users = ", ".join(u.name for u in to_erase.users)
            raise RuntimeError(
                f"erase_node({to_erase.name}): {len(to_erase.users)} node(s) still read it "
                f"({users}); make them read another node first "
                f"({to_erase.name}.replace_all_uses_with(new)) or erase them before it"
            )
        to_erase._unlink()
        to_erase._erased = True
        self._len -= 1
        # no longer a user of its inputs
        drop = lambda v: None if isinstance(v, Node) else v  # noqa: E731
        to_erase._set_args(map_args(to_erase.args, drop), map_args(to_erase.kwargs, drop))

    def eliminate_dead_code(self, is_impure_node: Callable[[Node], bool] | None = None) -> bool:
        """Erase every node nothing reads, except impure ones (``Node.is_impure``, or
        ``is_impure_node(node)`` when given). Returns whether the graph changed.

        Lints first: a node's users must come after it for one backward sweep to be enough.
        """
        self.lint()
        impure = is_impure_node or Node.is_impure
        changed = False
        for node in reversed(self.nodes):
            if not node.users and not impure(node):
                self.erase_node(node)
                changed = True
        return changed

    # ---- checking ------------------------------------------------------------------------

    def lint(self) -> None:
        """Check the graph is well formed; raise ``RuntimeError`` saying what is wrong.

        Checks: every node belongs to this graph and has a known op and a unique name;
        arguments are live nodes of this graph defined earlier (topological order);
        ``users`` agree with the arguments; nothing follows the output; call targets have
        the right type; with an owning ``GraphModule``, ``get_attr``/``call_module`` targets
        exist on it.
        """
        live = set(self.nodes)
        defined: set[Node] = set()
        names: set[str] = set()
        output: Node | None = None

        def fail(node: Node, what: str) -> RuntimeError:
            return RuntimeError(f"Graph.lint: node {node.name!r} ({node.format_node()}) {what}")

        for node in self.nodes:
            if node.graph is not self:
                raise fail(node, "belongs to another graph")
            if node.op not in OPCODES:
                raise fail(node, f"has op {node.op!r}; expected one of {OPCODES}")
            if node.name in names:
                raise fail(node, "reuses a name; give each node its own name")
            if output is not None:
                raise fail(node, f"comes after the output node {output.name!r}; insert it before")
            names.add(node.name)
            for inp in node.all_input_nodes:
                if inp.graph is not self:
                    raise fail(node, f"reads %{inp.name} of another graph (use node_copy)")
                if inp not in live:
                    raise fail(node, f"reads %{inp.name}, which was erased (a dangling reference)")
                if inp not in defined:
                    raise fail(
                        node,
                        f"reads %{inp.name} before it is defined: nodes must be in "
                        f"topological order (move it: {node.name}.prepend/append)",
                    )
                if node not in inp.users:
                    raise fail(node, f"is missing from %{inp.name}.users")
            for user in node.users:
                if user not in live or node not in user.all_input_nodes:
                    raise fail(node, f"lists {user.name!r} as a user, which does not read it")
            self._check_target(node, fail)
            defined.add(node)
            if node.op == "output":
                output = node

    def _check_target(self, node: Node, fail: Callable[[Node, str], RuntimeError]) -> None:
        if node.op == "call_function":
            if not callable(node.target):
                raise fail(node, f"has target {node.target!r}, which is not callable")
            return
        if not isinstance(node.target, str):
            raise fail(node, f"has target {node.target!r}; a {node.op} target is a string")
        module = self.owning_module
        if module is not None and node.op in ("get_attr", "call_module"):
            try:
                getattr(module, node.target)
            except AttributeError:
                fix = "add_submodule" if node.op == "call_module" else "setattr"
                raise fail(
                    node,
                    f"names {node.target!r}, which the GraphModule does not have; add it "
                    f"(gm.{fix}(...)) before linting",
                ) from None

    # ---- reading -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return self._len

    @property
    def placeholders(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "placeholder"]

    @property
    def output_node(self) -> Node:
        for n in reversed(self.nodes):
            if n.op == "output":
                return n
        raise RuntimeError("the graph has no output node (Graph.output(value) adds one)")

    def find_nodes(self, *, op: str, target: Any = None) -> list[Node]:
        """The nodes with opcode ``op`` (and, if given, ``target``), in order."""
        return [n for n in self.nodes if n.op == op and (target is None or n.target is target)]

    def tabular(self) -> str:
        """The table ``print_tabular`` prints: opcode, name, target, args, kwargs."""
        rows = [("opcode", "name", "target", "args", "kwargs")]
        for n in self.nodes:
            target = n.op_name if n.op in ("call_function", "call_method") else str(n.target)
            rows.append((n.op, n.name, target, _fmt(n.args), _fmt(n.kwargs)))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def print_tabular(self) -> None:
        """Print one row per node (like ``torch.fx.Graph.print_tabular``, no dependency)."""
        print(self.tabular())

    def to_dot(self, name: str = "tensorplay_graph") -> str:
        """The graph in Graphviz DOT: one box per node, one edge per use."""
        lines = [f"digraph {_identifier(name)} {{", "  rankdir=TB;", "  node [shape=box];"]
        for n in self.nodes:
            parts = [n.name] if n.op in ("placeholder", "output") else [n.name, n.op_name]
            val = n.meta.get("val")
            if val is not None and hasattr(val, "shape"):
                parts.append(f"{val.dtype.name}{list(val.shape)}")
            label = "\\n".join(_dot_escape(p) for p in parts)
            shape = "ellipse" if n.op in ("placeholder", "output") else "box"
            lines.append(f'  "{_dot_escape(n.name)}" [label="{label}", shape={shape}];')
        for n in self.nodes:
            for user in n.users:
                lines.append(f'  "{_dot_escape(n.name)}" -> "{_dot_escape(user.name)}";')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return "graph():\n" + "\n".join("    " + n.format_node() for n in self.nodes)

    # ---- code generation -----------------------------------------------------------------

    def python_code(self) -> PythonCode:
        """Python source of ``forward(self, <placeholders>)`` and the globals it needs.

        NOTE: only names checked by ``is_name`` and literals whose text we produce (numbers,
        plain strings) enter the source; every other user value (keyword names, method
        and attribute names, strings, objects) reaches the code as a global of the
        returned environment, so no user string is ever parsed as code.

        Raises ``ValueError`` naming a node whose name is not a usable identifier.
        """
        self._check_names()
        env: dict[str, Any] = {"tp": tp, "operator": operator}
        taken = {n.name for n in self.nodes}
        names: dict[int, str] = {}

        def constant(value: Any, base: str) -> str:
            """A fresh global holding ``value`` (``base`` is already an identifier)."""
            glob = f"_{base}"
            while glob in env or glob in taken:
                glob += "_"
            env[glob] = value
            return glob

        def ref(obj: Any) -> str:
            key = id(obj)
            if key not in names:
                base = _identifier(str(target_name(obj)))
                if getattr(tp, base, None) is obj:
                    names[key] = f"tp.{base}"
                elif getattr(tp.Tensor, base, None) is obj:
                    names[key] = f"tp.Tensor.{base}"
                elif getattr(operator, base, None) is obj:
                    names[key] = f"operator.{base}"
                else:
                    names[key] = constant(obj, base)
            return names[key]

        def src(v: Any) -> str:
            if isinstance(v, Node):
                return v.name
            if type(v) in (tuple, list):
                inner = ", ".join(src(x) for x in v)
                return (
                    f"({inner}{',' if len(v) == 1 else ''})" if type(v) is tuple else f"[{inner}]"
                )
            if type(v) is dict:
                return "{" + ", ".join(f"{src(k)}: {src(x)}" for k, x in v.items()) + "}"
            if type(v) is slice:
                return f"slice({src(v.start)}, {src(v.stop)}, {src(v.step)})"
            if v is None or type(v) in (bool, int) or v is Ellipsis:
                return repr(v)
            if type(v) is float and v == v and abs(v) != float("inf"):
                return repr(v)
            if type(v) is str and _PLAIN_STRING.fullmatch(v):
                return repr(v)
            return ref(v)  # any other constant (dtype, inf, a string, an object) is a global

        def call_args(args: tuple, kwargs: dict) -> str:
            parts = [src(a) for a in args]
            parts += [f"{k}={src(v)}" for k, v in kwargs.items() if is_name(k)]
            odd = {k: v for k, v in kwargs.items() if not is_name(k)}
            if odd:  # keyword names Python syntax cannot spell travel as a dict's keys
                items = ", ".join(f"{constant(k, 'kwarg')}: {src(v)}" for k, v in odd.items())
                parts.append(f"**{{{items}}}")
            return ", ".join(parts)

        def attribute(obj: str, name: Any) -> str:
            if is_name(name):
                return f"{obj}.{name}"
            # a dotted path ("0.weight", read through GraphModule.__getattr__) or another
            # string; one Python cannot spell as a literal safely travels as a global
            return f"getattr({obj}, {src(name) if type(name) is str else constant(name, 'attr')})"

        params = [n.name for n in self.placeholders]
        body = []
        for n in self.nodes:
            if n.op == "get_attr":
                body.append(f"{n.name} = {attribute('self', n.target)}")
            elif n.op == "call_function":
                body.append(f"{n.name} = {ref(n.target)}({call_args(n.args, n.kwargs)})")
            elif n.op == "call_method":
                rest = call_args(n.args[1:], n.kwargs)
                body.append(f"{n.name} = {attribute(src(n.args[0]), n.target)}({rest})")
            elif n.op == "call_module":
                call = call_args(n.args, n.kwargs)
                body.append(f"{n.name} = {attribute('self', n.target)}({call})")
            elif n.op == "output":
                body.append(f"return {src(n.args[0])}")
        head = f"def forward(self{''.join(', ' + p for p in params)}):"
        code = "\n".join([head] + ["    " + line for line in body or ["return None"]]) + "\n"
        return PythonCode(code, env)

    def _check_names(self) -> None:
        """Node names become variables of the generated code: identifiers, each used once."""
        seen: set[str] = set()
        for n in self.nodes:
            if not is_name(n.name) or n.name in _RESERVED or n.name in seen:
                why = "is used twice" if n.name in seen else "is not a usable Python identifier"
                raise ValueError(
                    f"node name {n.name!r} ({n.op} {n.op_name}) {why}; node names become "
                    "variables of the generated code. Rename the node to an unused identifier "
                    f"(not a keyword nor one of {sorted(_RESERVED)}) before recompile()"
                )
            seen.add(n.name)


def _dot_escape(text: str) -> str:
    """``text`` inside a DOT double-quoted string: a quote in a name cannot end it."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _default_name(op: str, target: Any) -> str:
    if op in ("call_method", "call_module"):
        return str(target)
    return target_name(target)
