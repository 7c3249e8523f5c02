"""Graph capture and editing for TensorPlay (distribution ``tensorplay-compile``).

``Tracer().trace(fn, sample_inputs={"x": x})`` (or ``symbolic_trace``) records the
TensorPlay calls of ``fn`` as a ``Graph`` of ``Node`` s inside a callable ``GraphModule``;
``Interpreter`` runs one node at a time. The tracer plugs into core's capture interface
(``tensorplay.capture``), so library ops record as one node each. Graphs are edited as in
``torch.fx`` (``inserting_after``, ``replace_all_uses_with``, ``erase_node``,
``eliminate_dead_code``, ``lint``, ``replace_pattern``); see docs/graph.md.
"""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.capture import GraphCaptureError
from tensorplay.graph._graph import Graph, Node, PythonCode
from tensorplay.graph._interpreter import Interpreter
from tensorplay.graph._module import GraphModule
from tensorplay.graph._rewriter import Match, replace_pattern
from tensorplay.graph._shape_prop import propagate_shapes
from tensorplay.graph._tracer import Proxy, Tracer, get_graph_node_names, symbolic_trace
from tensorplay.graph._wrap import wrap

__all__ = [
    "Graph",
    "GraphCaptureError",
    "GraphModule",
    "Interpreter",
    "Match",
    "Node",
    "Proxy",
    "PythonCode",
    "Tracer",
    "get_graph_node_names",
    "propagate_shapes",
    "replace_pattern",
    "symbolic_trace",
    "wrap",
]
