"""Fusion barriers: captured nodes that are library ops, which no backend fuses across.

A leaf module: the backend registry (``_backends``), the partitioner (``_pointwise``) and
the TVM backend (``_tvm_backend``) all ask ``barrier_kind``, and it needs none of them.
"""

from __future__ import annotations

from tensorplay.graph._graph import Node

__all__ = ["barrier_kind"]


def barrier_kind(node: Node) -> str | None:
    """``"custom_op"`` / ``"triton_op"`` / ``"tile_lang_op"`` for library-op nodes, else None."""
    if node.op != "call_function" or not node.meta.get("opaque", False):
        return None
    target = node.target
    if getattr(target, "is_triton_op", False):
        return "triton_op"
    if getattr(target, "is_tile_lang_op", False):
        return "tile_lang_op"
    return "custom_op"
