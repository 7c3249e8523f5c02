"""``zero_grads``: what ``Module.zero_grad`` and ``Optimizer.zero_grad`` both do."""

from __future__ import annotations

from collections.abc import Iterable

import tensorplay as tp
from tensorplay import Tensor


def zero_grads(params: Iterable[Tensor], set_to_none: bool = True) -> None:
    """Reset each tensor's ``.grad``: to None, or (``set_to_none=False``) to zeros in place
    (a gradient with history, from ``create_graph=True``, is detached first, as torch does)."""
    for p in params:
        g = p.grad
        if g is None:
            continue
        if set_to_none:
            p.grad = None
            continue
        if g.grad_fn is not None:
            g = g.detach()
            p.grad = g
        elif g.requires_grad:
            g.requires_grad_(False)
        with tp.no_grad():
            g.zero_()
