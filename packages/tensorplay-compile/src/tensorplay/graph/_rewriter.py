"""``replace_pattern``: find a subgraph shaped like one function and splice in another.

Like ``torch.fx.subgraph_rewriter.replace_pattern``: the pattern's placeholders match any
value (a node or a literal argument), every other pattern node matches a node with the
same op, target and argument structure, and literals must be equal. A match is kept
only when no value computed inside it (except what the pattern returns) is read
outside it, and matches do not overlap (the earliest in graph order wins). Each match is
replaced by a copy of the replacement graph, its placeholders bound to what the
pattern's placeholders matched, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from tensorplay.graph._graph import Graph, Node
from tensorplay.graph._module import GraphModule
from tensorplay.graph._tracer import symbolic_trace

__all__ = ["Match", "replace_pattern"]


class Match(NamedTuple):
    """One replaced occurrence.

    As in torch.fx: ``anchor`` is the pattern node the match grew from (its first
    returned value; ``nodes_map[anchor]`` is the graph node it matched); ``nodes_map``:
    pattern node -> what it matched (a graph node, or a literal for a placeholder);
    ``replacements``: the nodes inserted in its place.
    """

    anchor: Node
    nodes_map: dict[Node, Any]
    replacements: list[Node]


def replace_pattern(
    gm: GraphModule,
    pattern: Callable | Graph | GraphModule,
    replacement: Callable | Graph | GraphModule,
) -> list[Match]:
    """Replace every non-overlapping occurrence of ``pattern`` in ``gm`` by ``replacement``.

    ``pattern`` and ``replacement`` are functions (traced with ``symbolic_trace``),
    ``GraphModule`` s or ``Graph`` s taking the same number of inputs and returning the
    same number of values. Recompiles ``gm`` and returns the matches, in graph order.

    Example::

        def pattern(x, y):
            return tp.relu(x + y)

        def replacement(x, y):
            return tp.clamp(tp.add(x, y), min=0.0)

        matches = replace_pattern(gm, pattern, replacement)

    Raises:
        ValueError: the two take different numbers of inputs, return different numbers
            of values, or the pattern has an input it does not use.
    """
    if not isinstance(gm, GraphModule):
        raise TypeError(
            f"replace_pattern(gm, ...): gm must be a GraphModule, got {type(gm).__name__}"
        )
    p_module, p_graph = _as_module(pattern, "pattern")
    r_module, r_graph = _as_module(replacement, "replacement")
    p_inputs, r_inputs = p_graph.placeholders, r_graph.placeholders
    if len(p_inputs) != len(r_inputs):
        raise ValueError(
            f"replace_pattern: the pattern takes {len(p_inputs)} input(s) "
            f"{[n.name for n in p_inputs]} but the replacement {len(r_inputs)} "
            f"{[n.name for n in r_inputs]}; they must take the same inputs, in order"
        )
    unused = [n.name for n in p_inputs if not n.users]
    if unused:
        raise ValueError(
            f"replace_pattern: pattern input(s) {unused} are unused, so they cannot match "
            "anything; remove them from the pattern (and the replacement)"
        )
    p_returns = _returned(p_graph, "pattern")
    r_returns = _returned(r_graph, "replacement")
    if len(p_returns) != len(r_returns):
        raise ValueError(
            f"replace_pattern: the pattern returns {len(p_returns)} value(s), the replacement "
            f"{len(r_returns)}; they must return as many"
        )
    matcher = _Matcher(gm, p_module, p_graph, p_returns)
    graph = gm.graph
    replaced: dict[Node, Node] = {}  # a returned node of an earlier match -> its replacement
    done = []
    for nodes_map in matcher.matches():
        bindings = [_current(nodes_map[p], replaced) for p in p_inputs]
        values: dict[Node, Any] = dict(zip(r_inputs, bindings))
        outs = [nodes_map[p] for p in p_returns]
        with _insertion_point(graph, outs):
            new_nodes = [
                _copy(graph, gm, r_module, node, values)
                for node in r_graph.nodes
                if node.op not in ("placeholder", "output")
            ]
        for old, r in zip(outs, r_returns):
            old.replace_all_uses_with(values[r])
            replaced[old] = values[r]
        for p in reversed(p_graph.nodes):
            if p.op not in ("placeholder", "output"):
                graph.erase_node(nodes_map[p])
        done.append(Match(p_returns[0], nodes_map, new_nodes))
    graph.lint()
    gm.recompile()
    return done


def _as_module(obj: Any, what: str) -> tuple[GraphModule | None, Graph]:
    if isinstance(obj, GraphModule):
        return obj, obj.graph
    if isinstance(obj, Graph):
        return obj.owning_module, obj
    if callable(obj):
        gm = symbolic_trace(obj)
        return gm, gm.graph
    raise TypeError(
        f"replace_pattern: {what} must be a function, a GraphModule or a Graph, got "
        f"{type(obj).__name__}"
    )


def _returned(graph: Graph, what: str) -> list[Node]:
    """The nodes ``graph`` returns: one node, or a flat tuple/list of nodes."""
    value = graph.output_node.args[0]
    values = list(value) if type(value) in (tuple, list) else [value]
    if not all(isinstance(v, Node) for v in values) or (
        what == "pattern" and any(v.op == "placeholder" for v in values)
    ):
        kind = "ops to match, not an input or a constant" if what == "pattern" else "values"
        raise ValueError(f"replace_pattern: the {what} must return computed {kind}; got {value!r}")
    return values


def _current(value: Any, replaced: dict[Node, Node]) -> Any:
    """``value``, or what replaced it when an earlier match rewrote it."""
    while isinstance(value, Node) and value in replaced:
        value = replaced[value]
    return value


class _Matcher:
    """Finds the non-overlapping matches of a pattern graph in ``gm.graph``."""

    def __init__(
        self, gm: GraphModule, p_module: GraphModule | None, p_graph: Graph, returns: list[Node]
    ) -> None:
        self.gm = gm
        self.p_module = p_module
        self.p_graph = p_graph
        self.returns = returns
        self.inner = [n for n in p_graph.nodes if n.op not in ("placeholder", "output")]

    def matches(self) -> list[dict[Node, Any]]:
        found, taken = [], set()
        for candidate in self.gm.graph.nodes:
            nodes_map = self._match_from(candidate)
            if nodes_map is None:
                continue
            inner = {nodes_map[p] for p in self.inner}
            if inner & taken:
                continue
            taken |= inner
            found.append(nodes_map)
        return found

    def _match_from(self, anchor: Node) -> dict[Node, Any] | None:
        nodes_map: dict[Node, Any] = {}
        if not self._node(self.returns[0], anchor, nodes_map):
            return None
        for p in self.returns[1:]:  # further returned values: any node that matches
            for g in self.gm.graph.nodes:
                trial = dict(nodes_map)
                if self._node(p, g, trial):
                    nodes_map = trial
                    break
            else:
                return None
        return nodes_map if self._self_contained(nodes_map) else None

    def _self_contained(self, nodes_map: dict[Node, Any]) -> bool:
        """Distinct nodes; nothing outside reads a value the match computes and does not
        return; an input of the match is not computed inside it."""
        inner = [nodes_map[p] for p in self.inner]
        members = set(inner)
        if len(members) != len(inner):
            return False
        outs = {nodes_map[p] for p in self.returns}
        for node in inner:
            if node not in outs and any(u not in members for u in node.users):
                return False
        inputs = (nodes_map[p] for p in self.p_graph.placeholders)
        return not any(isinstance(v, Node) and v in members for v in inputs)

    def _node(self, p: Node, g: Any, nodes_map: dict[Node, Any]) -> bool:
        if p in nodes_map:
            return _same_literal(nodes_map[p], g)
        if p.op == "placeholder":  # an input of the pattern matches any value
            nodes_map[p] = g
            return True
        if not isinstance(g, Node) or g.op != p.op or not self._same_target(p, g):
            return False
        if len(p.args) != len(g.args) or p.kwargs.keys() != g.kwargs.keys():
            return False
        nodes_map[p] = g
        return self._arg(p.args, g.args, nodes_map) and self._arg(p.kwargs, g.kwargs, nodes_map)

    def _arg(self, p: Any, g: Any, nodes_map: dict[Node, Any]) -> bool:
        if isinstance(p, Node):
            return self._node(p, g, nodes_map)
        if type(p) in (tuple, list):
            return (
                type(g) is type(p)
                and len(g) == len(p)
                and all(self._arg(a, b, nodes_map) for a, b in zip(p, g))
            )
        if type(p) is dict:
            return (
                type(g) is dict
                and g.keys() == p.keys()
                and all(self._arg(p[k], g[k], nodes_map) for k in p)
            )
        return _same_literal(p, g)

    def _same_target(self, p: Node, g: Node) -> bool:
        if p.op == "get_attr" and self.p_module is not None:  # the same tensor object
            return getattr(self.p_module, p.target) is getattr(self.gm, g.target, None)
        return p.target is g.target or (isinstance(p.target, str) and p.target == g.target)


def _same_literal(a: Any, b: Any) -> bool:
    if isinstance(a, Node) or isinstance(b, Node):
        return a is b
    return type(a) is type(b) and a == b


def _insertion_point(graph: Graph, outs: list[Node]) -> Any:
    """Before the first node reading a returned value (the match's values are all ready
    there); after the last returned node when nothing reads them."""
    readers = {u for o in outs for u in o.users}
    for node in graph.nodes:
        if node in readers:
            return graph.inserting_before(node)
    last = [n for n in graph.nodes if n in set(outs)][-1]
    return graph.inserting_after(last)


def _copy(
    graph: Graph, gm: GraphModule, r_module: GraphModule | None, node: Node, values: dict
) -> Node:
    """Copy a replacement node into ``graph``; attributes it reads are added to ``gm``."""
    copy = graph.node_copy(node, lambda n: values[n])
    if node.op in ("get_attr", "call_module") and r_module is not None:
        copy.target = _adopt(gm, node.target, getattr(r_module, node.target))
    values[node] = copy
    return copy


def _adopt(gm: GraphModule, target: str, value: Any) -> str:
    """The name under which ``gm`` holds ``value``: ``target`` or a fresh variant of it."""
    name, i = target, 0
    while True:
        try:
            held = getattr(gm, name)
        except AttributeError:
            setattr(gm, name, value)
            return name
        if held is value:
            return name
        i += 1
        name = f"{target}_{i}"
