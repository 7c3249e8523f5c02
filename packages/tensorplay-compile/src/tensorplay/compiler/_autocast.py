"""``tp.compile`` under ``tp.autocast``: the state that keys the cache, and real dtypes.

Autocast picks an op's dtype when the op runs, from its inputs' device type (matmul in
bfloat16 on CPU). Tracing propagates shapes with meta tensors, whose device type no
autocast covers, so under autocast the captured metadata says float32 where eager
gives bfloat16, and a kernel built from it would be handed tensors of another dtype.
``run_recording_dtypes`` therefore runs the graph once through the interpreter (the
real ops, under the caller's autocast) and replaces each node's meta value by what the
node really produced; backends then build from eager's dtypes, and that run's result
is the call's result.
"""

from __future__ import annotations

from typing import Any

import tensorplay as tp
from tensorplay.graph import GraphModule, Interpreter
from tensorplay.graph._graph import Node
from tensorplay.graph._tracer import _meta_like

__all__ = ["autocast_state", "run_recording_dtypes"]

_DEVICE_TYPES = ("cpu", "cuda")  # the device types tp.autocast accepts


def autocast_state() -> tuple:
    """``(device type, dtype)`` for every device type autocast is enabled for, here."""
    return tuple(
        (dev, tp.amp.get_autocast_dtype(dev))
        for dev in _DEVICE_TYPES
        if tp.amp.is_autocast_enabled(dev)
    )


class _RecordingInterpreter(Interpreter):
    """The interpreter, writing each result's shape and dtype into its node's meta."""

    def run_node(self, node: Node) -> Any:
        value = super().run_node(node)
        if node.op in ("call_function", "call_method"):
            if isinstance(value, tp.Tensor):
                node.meta["val"] = _meta_like(value)
            elif isinstance(value, tuple) and all(isinstance(v, tp.Tensor) for v in value):
                node.meta["val"] = tuple(_meta_like(v) for v in value)
        return value


def run_recording_dtypes(gm: GraphModule, args: list) -> Any:
    """Run ``gm`` on ``args`` eagerly; afterwards its nodes' meta values are the real ones."""
    return _RecordingInterpreter(gm).run(*args)
