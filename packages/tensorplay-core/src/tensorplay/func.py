"""``tensorplay.func``: function transforms (PyTorch's ``torch.func``)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from tensorplay import _factories
from tensorplay._tensor import Tensor
from tensorplay._vmap import vmap
from tensorplay.autograd import engine

__all__ = ["vmap", "jacrev"]


def jacrev(func: Callable, argnums: int = 0) -> Callable:
    """The Jacobian of ``func`` with respect to its argument ``argnums``, by reverse mode:
    one backward pass per output element, all of them in one ``vmap`` over the basis
    (PyTorch's ``torch.func.jacrev`` for one tensor argument and one tensor output). The
    result has shape ``output.shape + input.shape``."""
    if not callable(func):
        raise TypeError(f"jacrev(func): func must be callable, got {type(func).__name__}")
    if not isinstance(argnums, int):
        raise TypeError(f"jacrev(argnums={argnums!r}): one int (the argument to differentiate)")

    @functools.wraps(func)
    def jacobian(*args, **kwargs):
        if not -len(args) <= argnums < len(args):
            raise ValueError(f"jacrev: argnums={argnums} but the call has {len(args)} arguments")
        x = args[argnums]
        if not isinstance(x, Tensor):
            raise TypeError(f"jacrev: argument {argnums} must be a Tensor, got {type(x).__name__}")
        xr = x.detach().requires_grad_()
        call = list(args)
        call[argnums] = xr
        out = func(*call, **kwargs)
        if not isinstance(out, Tensor):
            raise TypeError(f"jacrev: func must return one Tensor, got {type(out).__name__}")
        n = out.numel()
        basis = _factories.eye(n, dtype=out.dtype, device=out.device).reshape(n, *out.shape)

        def row(v):
            (g,) = engine.grad(out, xr, v, retain_graph=True, allow_unused=True)
            return g if g is not None else _factories.zeros_like(xr)

        return vmap(row)(basis).reshape(*out.shape, *x.shape)

    return jacobian
