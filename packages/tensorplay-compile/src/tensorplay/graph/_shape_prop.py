"""Shape propagation: a node's ``meta`` from the same call on meta tensors.

``meta["val"]`` is the node's result computed on meta tensors (shape and dtype, never real
kernels); ``meta["device"]`` the device its inputs live on (meta tensors have none) and
``meta["requires_grad"]`` whether any input requires grad. The tracer fills them as it
records; ``propagate_shapes(gm)`` refills a whole edited graph (``tp.compile`` runs it
after user passes, since backends read ``meta``).
"""

from __future__ import annotations

from typing import Any

import tensorplay as tp
from tensorplay import capture
from tensorplay.graph._graph import Node, map_args
from tensorplay.graph._module import GraphModule

__all__ = ["propagate", "propagate_shapes"]


def propagate(node: Node, module: GraphModule | None = None) -> None:
    """Fill ``node.meta`` (``val`` when every input's is known) for a call node.

    ``module`` resolves ``call_module`` targets. A call that fails on meta tensors leaves
    ``val`` unset and records why in ``meta["meta_error"]``.
    """
    unknown = []

    def meta(v: Any) -> Any:
        if isinstance(v, Node):
            val = v.meta.get("val")
            if val is None:
                unknown.append(v)
            return val
        return v

    args, kwargs = map_args(node.args, meta), map_args(node.kwargs, meta)
    inputs = node.all_input_nodes
    node.meta["requires_grad"] = any(n.meta.get("requires_grad", False) for n in inputs)
    node.meta["device"] = next((n.meta["device"] for n in inputs if "device" in n.meta), None)
    if unknown:
        return
    # a library op given meta tensors must run, not record into a live capture
    tracer = capture.pop_tracer() if capture.capturing() else None
    try:
        with tp.no_grad():
            if node.op == "call_method":
                val = getattr(args[0], node.target)(*args[1:], **kwargs)
            elif node.op == "call_module":
                val = module.get_submodule(node.target)(*args, **kwargs)
            else:
                val = node.target(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any failure only means "shape unknown"
        node.meta["meta_error"] = f"{type(e).__name__}: {e}"
        return
    finally:
        if tracer is not None:
            capture.push_tracer(tracer)
    if _is_meta_value(val):
        node.meta["val"] = val


def propagate_shapes(gm: GraphModule) -> GraphModule:
    """Recompute ``meta`` of every node after ``gm.graph`` was edited; returns ``gm``.

    Placeholders keep theirs (the tracer took it from the sample inputs); ``get_attr``
    nodes take their tensor's; every call is run again on meta tensors.
    """
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        for key in ("val", "meta_error"):
            node.meta.pop(key, None)
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if isinstance(value, tp.Tensor):
                node.meta["val"] = _meta_like(value)
                node.meta["device"] = value.device
        else:
            propagate(node, gm)
    return gm


def _meta_like(t: Any) -> Any:
    return tp.empty(tuple(t.shape), dtype=t.dtype, device="meta")


def _is_meta_value(v: Any) -> bool:
    if isinstance(v, tuple):
        return all(_is_meta_value(x) for x in v)
    return isinstance(v, tp.Tensor) and v.device.type == "meta"
