"""Compilation for TensorPlay (distribution ``tensorplay-compile``).

Will hold ``compile`` (exposed as ``tp.compile``), the backend registry and the TVM
lowering (``tensorplay-compile[tvm]``).
"""

from __future__ import annotations

__all__: list[str] = []
