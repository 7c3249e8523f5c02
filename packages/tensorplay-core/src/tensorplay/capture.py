"""Public capture interface (see ``tensorplay._capture``): used by library ops and kernel
wrappers to ask whether a graph capture is live and whether arguments are symbolic."""

from tensorplay._capture import (
    GraphCaptureError,
    Proxy,
    capture_call,
    capturing,
    contains_proxy,
    current_tracer,
    pop_tracer,
    push_tracer,
    tracing,
)

__all__ = [
    "GraphCaptureError",
    "Proxy",
    "capture_call",
    "capturing",
    "contains_proxy",
    "current_tracer",
    "pop_tracer",
    "push_tracer",
    "tracing",
]
