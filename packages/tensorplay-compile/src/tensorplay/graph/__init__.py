"""Graph capture for TensorPlay (distribution ``tensorplay-compile``).

``Tracer().trace(fn, sample_inputs={"x": x})`` records the TensorPlay calls of ``fn`` as
a ``Graph`` of ``Node`` s inside a callable ``GraphModule``; ``Interpreter`` runs one node
at a time. The tracer plugs into core's capture interface (``tensorplay.capture``), so
library ops record as one node each.
"""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.capture import GraphCaptureError
from tensorplay.graph._graph import Graph, Node
from tensorplay.graph._interpreter import Interpreter
from tensorplay.graph._module import GraphModule
from tensorplay.graph._tracer import Proxy, Tracer

__all__ = ["Graph", "GraphCaptureError", "GraphModule", "Interpreter", "Node", "Proxy", "Tracer"]


def symbolic_trace(fn, sample_inputs=None) -> GraphModule:  # noqa: ANN001 - mirrors Tracer.trace
    """``Tracer().trace(fn, sample_inputs)``: capture ``fn`` into a ``GraphModule``."""
    return Tracer().trace(fn, sample_inputs)


__all__ += ["symbolic_trace"]
