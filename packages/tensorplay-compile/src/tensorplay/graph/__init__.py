"""Graph capture for TensorPlay (distribution ``tensorplay-compile``).

Will hold ``Graph``, ``Node``, ``GraphModule``, ``Tracer`` and ``Interpreter``: the tracer
behind core's capture interface (``capturing()``, ``capture_call``, ``Proxy``).
"""

from __future__ import annotations

__all__: list[str] = []
