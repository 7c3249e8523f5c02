"""``Node`` and ``Graph``: the captured program as a list of nodes in execution order.

A node is one step: ``placeholder`` (an input), ``get_attr`` (a constant tensor held by
the module), ``call_function`` (``target(*args, **kwargs)``), ``call_method``
(``args[0].<target>(*args[1:], **kwargs)``) or ``output`` (what the program returns).
Arguments refer to earlier nodes directly, so the graph is its own use-def chain.
"""

from __future__ import annotations

import keyword
import operator
import re
from collections.abc import Callable, Iterator
from typing import Any

import tensorplay as tp

__all__ = ["Graph", "Node", "is_name", "map_args", "target_name"]

OPCODES = ("placeholder", "get_attr", "call_function", "call_method", "output")
# Names the generated code uses for itself; a node may not take them.
_RESERVED = frozenset({"self", "tp", "operator", "inf", "nan"})
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
    """``text`` turned into a Python identifier (``demo::scaled`` -> ``demo_scaled``)."""
    name = re.sub(r"\W+", "_", text).strip("_") or "node"
    if not name.isidentifier():  # \w also matches characters no identifier may hold (``²``)
        name = re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_") or "node"
    if name[0].isdigit():
        name = "_" + name
    return name if name.isidentifier() else "node"


class Node:
    """One step of a ``Graph``. ``meta["val"]`` holds the value's shape/dtype (a meta tensor)."""

    def __init__(
        self, graph: Graph, name: str, op: str, target: Any, args: tuple, kwargs: dict
    ) -> None:
        if op not in OPCODES:
            raise ValueError(f"Node op must be one of {OPCODES}, got {op!r}")
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self.args = args
        self.kwargs = kwargs
        self.meta: dict[str, Any] = {}
        self.users: dict[Node, None] = {}  # insertion-ordered set of the nodes reading this one
        for n in self.all_input_nodes:
            n.users[self] = None

    @property
    def all_input_nodes(self) -> list[Node]:
        """The nodes this node reads, in argument order, each once."""
        found: dict[Node, None] = {}

        def visit(v: Any) -> Any:
            if isinstance(v, Node):
                found[v] = None
            return v

        map_args((self.args, self.kwargs), visit)
        return list(found)

    @property
    def op_name(self) -> str:
        """What the node computes, for tables and reports (``exp``, ``demo::scaled``, ``x``)."""
        return target_name(self.target)

    def format_node(self) -> str:
        args = ", ".join(_fmt(a) for a in self.args)
        kwargs = ", ".join(f"{k}={_fmt(v)}" for k, v in self.kwargs.items())
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


class Graph:
    """An ordered list of ``Node`` s; node names are unique, readable identifiers."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._used: dict[str, int] = {}

    # ---- building ------------------------------------------------------------------------

    def _unique(self, base: str) -> str:
        base = _identifier(base)
        if keyword.iskeyword(base) or base in _RESERVED:
            base += "_1"
        count = self._used.get(base)
        if count is None:
            self._used[base] = 0
            return base
        while True:  # add, add_1, add_2, ... skipping names a user already took
            count += 1
            candidate = f"{base}_{count}"
            if candidate not in self._used:
                self._used[base] = count
                self._used[candidate] = 0
                return candidate

    def create_node(
        self,
        op: str,
        target: Any,
        args: tuple = (),
        kwargs: dict | None = None,
        name: str | None = None,
    ) -> Node:
        """Append a node; its name is ``name`` (or derived from ``target``) made unique."""
        base = name if name is not None else _default_name(op, target)
        node = Node(self, self._unique(base), op, target, tuple(args), dict(kwargs or {}))
        self.nodes.append(node)
        return node

    def placeholder(self, name: str) -> Node:
        return self.create_node("placeholder", name, name=name)

    def get_attr(self, attr: str) -> Node:
        return self.create_node("get_attr", attr, name=attr)

    def call_function(self, target: Callable, args: tuple = (), kwargs: dict | None = None) -> Node:
        return self.create_node("call_function", target, args, kwargs)

    def call_method(self, method: str, args: tuple = (), kwargs: dict | None = None) -> Node:
        return self.create_node("call_method", method, args, kwargs)

    def output(self, result: Any) -> Node:
        return self.create_node("output", "output", (result,), name="output")

    # ---- reading -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

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

    def python_code(self) -> tuple[str, dict[str, Any]]:
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
            return f"getattr({obj}, {constant(name, 'attr')})"

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
            elif n.op == "output":
                body.append(f"return {src(n.args[0])}")
        head = f"def forward(self{''.join(', ' + p for p in params)}):"
        return "\n".join([head] + ["    " + line for line in body or ["return None"]]) + "\n", env

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
    if op == "call_method":
        return str(target)
    return target_name(target)
