"""``Interpreter``: run a ``GraphModule`` one node at a time.

Backends subclass it to replace how some nodes run (the TVM backend runs fused
regions as kernels and everything else, library ops included, through here, which
calls the real ops with their kernels and autograd).
"""

from __future__ import annotations

from typing import Any

from tensorplay.graph._graph import Node, map_args
from tensorplay.graph._module import GraphModule

__all__ = ["Interpreter"]


class Interpreter:
    """Execute ``module.graph`` node by node; override ``run_node`` or the per-opcode methods."""

    def __init__(self, module: GraphModule) -> None:
        self.module = module
        self.env: dict[Node, Any] = {}
        # the last node reading each value: the value is dropped after it (peak memory)
        self._last_use: dict[Node, list[Node]] = {}
        seen: set[Node] = set()
        for node in reversed(module.graph.nodes):
            for inp in node.all_input_nodes:
                if inp not in seen:
                    seen.add(inp)
                    self._last_use.setdefault(node, []).append(inp)

    def run(self, *args: Any) -> Any:
        """Run the graph on ``args`` (one per placeholder, in order) and return its output."""
        placeholders = self.module.graph.placeholders
        if len(args) != len(placeholders):
            names = [p.name for p in placeholders]
            raise TypeError(f"the graph takes {len(names)} inputs {names}, got {len(args)}")
        self._args = iter(args)
        self.env = {}
        try:
            for node in self.module.graph.nodes:
                value = self.run_node(node)
                if node.op == "output":
                    return value
                self.env[node] = value
                for dead in self._last_use.get(node, ()):
                    self.env.pop(dead, None)
        finally:
            self.env = {}
        return None

    def fetch(self, value: Any) -> Any:
        """``value`` with every ``Node`` replaced by the value it computed."""
        return map_args(value, lambda v: self.env[v] if isinstance(v, Node) else v)

    def run_node(self, node: Node) -> Any:
        args, kwargs = self.fetch(node.args), self.fetch(node.kwargs)
        return getattr(self, node.op)(node.target, args, kwargs)

    # ---- one method per opcode (FX's names) ----------------------------------------------

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        return next(self._args)

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.module, target)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.module.get_submodule(target)(*args, **kwargs)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        return target(*args, **kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Any:
        self_obj, *rest = args
        return getattr(self_obj, target)(*rest, **kwargs)

    def output(self, target: str, args: tuple, kwargs: dict) -> Any:
        return args[0]
