"""``tp.compile(mode="reduce-overhead")``: an artifact replayed from CUDA graphs.

The first call of a specialisation on CUDA tensors builds its graphs (after the artifact
ran once eagerly, so its kernels are compiled); later calls copy their tensors into the
graph's static inputs and replay. With grad enabled and an input that requires grad, the
forward and the backward are captured as two graphs (``tp.cuda.make_graphed_callables``);
otherwise the forward alone is.

As in torch, the outputs are the graph's static tensors: the next call of the same
specialisation overwrites them (``clone()`` what must outlive it). A compiled region that
synchronises with the host (``.item()``, printing, data-dependent shapes) cannot be
captured: the first graphed call raises an error naming the call. CPU inputs run the
artifact as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorplay as tp

__all__ = ["MODES", "graphed_runner", "on_cuda"]

MODES = ("default", "reduce-overhead")
_WARMUP = 2  # eager runs on a side stream before a capture


def graphed_runner(fn: Callable, tensors: list) -> Callable:
    """A callable that runs ``fn(*tensors_like)`` by replaying CUDA graphs of it."""
    try:
        if tp.is_grad_enabled() and any(t.requires_grad for t in tensors):
            samples = tuple(t.detach().clone().requires_grad_(t.requires_grad) for t in tensors)
            return tp.cuda.make_graphed_callables(fn, samples, num_warmup_iters=_WARMUP)
        return _forward_only(fn, tensors)
    except Exception as e:  # noqa: BLE001 - any failure of the capture is reported as one
        raise RuntimeError(
            f"tp.compile(mode='reduce-overhead'): the compiled region cannot be captured "
            f"into a CUDA graph: {e}"
        ) from e


def _forward_only(fn: Callable, tensors: list) -> Callable:
    static = [t.detach().clone() for t in tensors]
    side = tp.cuda.Stream()
    side.wait_stream(tp.cuda.current_stream())
    with tp.cuda.stream(side):
        for _ in range(_WARMUP):
            fn(*static)
    tp.cuda.current_stream().wait_stream(side)
    graph = tp.cuda.CUDAGraph()
    with tp.cuda.graph(graph):
        out = fn(*static)

    def replay(*args: Any) -> Any:
        for s, t in zip(static, args):
            if s.data_ptr() != t.data_ptr():
                s.copy_(t)
        graph.replay()
        return out

    return replay


def on_cuda(tensors: list) -> bool:
    return bool(tensors) and all(t.device.type == "cuda" for t in tensors)
