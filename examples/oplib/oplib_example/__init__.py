"""The Python side of the oplib_example op library (optional).

The operators need no import of this package: installing the wheel is enough for
``tp.ops.oplib_example.fused_bias_gelu`` and the others (see ops.yaml). This module only
adds a convenience on top of them.
"""

from __future__ import annotations

import tensorplay as tp

__all__ = ["bias_gelu_layer"]


def bias_gelu_layer(x: tp.Tensor, bias: tp.Tensor, alpha: float = 1.0) -> tp.Tensor:
    """``alpha * gelu(x + bias)`` through the library's fused operator."""
    return tp.ops.oplib_example.fused_bias_gelu(x, bias, alpha=alpha)
