"""``RMSprop`` (torch's ``torch.optim.RMSprop``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.optim import _foreach
from tensorplay.optim.optimizer import (
    Optimizer,
    _advance,
    _check_nonneg,
    _params_with_grad,
    _to_scalar,
)

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop, as ``torch.optim.RMSprop`` (``foreach`` as in ``Adam``).

    For each parameter with a gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g                  (square_avg)
        avg = sqrt(v - m * m) + eps, m = lerp(m, g, 1 - alpha) (centered; grad_avg m)
        avg = sqrt(v) + eps                                   (otherwise)
        buf = momentum * buf + g / avg; p = p - lr * buf      (momentum > 0)
        p = p - lr * g / avg                                  (otherwise)

    ``state[p]`` holds ``step``, ``square_avg`` and, as used, ``momentum_buffer``, ``grad_avg``.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
    ) -> None:
        _check_nonneg("lr", lr, "learning rate")
        _check_nonneg("eps", eps, "epsilon value")
        _check_nonneg("momentum", momentum)
        _check_nonneg("weight_decay", weight_decay)
        _check_nonneg("alpha", alpha)
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "alpha": alpha,
            "eps": eps,
            "centered": centered,
            "weight_decay": weight_decay,
            "foreach": foreach,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; returns ``closure()``'s loss when given."""
        loss = self._eval_closure(closure)
        with tp.no_grad():
            for group in self.param_groups:
                params = _params_with_grad(group, "RMSprop", real_only=True)
                if not params:
                    continue
                momentum, centered = group["momentum"], group["centered"]
                states = []
                for p in params:
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = tp.tensor(0.0, dtype=tp.float32)
                        state["square_avg"] = tp.zeros_like(p)
                    if momentum > 0 and "momentum_buffer" not in state:
                        state["momentum_buffer"] = tp.zeros_like(p)
                    if centered and "grad_avg" not in state:
                        state["grad_avg"] = tp.zeros_like(p)
                    _advance(state["step"])
                    states.append(state)
                grads = [p.grad for p in params]
                columns = [params, grads, [s["square_avg"] for s in states]]
                avgs = [s["grad_avg"] for s in states] if centered else None
                bufs = [s["momentum_buffer"] for s in states] if momentum > 0 else None
                hyper = dict(
                    lr=_to_scalar(group["lr"]),
                    alpha=group["alpha"],
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    momentum=momentum,
                    maximize=group["maximize"],
                )
                extra = [c for c in (avgs, bufs) if c is not None]
                if _foreach.usable(group.get("foreach"), *columns, *extra):
                    _foreach.rmsprop(*columns, avgs, bufs, **hyper)
                    continue
                for i, p in enumerate(params):
                    _rmsprop_one(
                        p,
                        grads[i],
                        columns[2][i],
                        None if avgs is None else avgs[i],
                        None if bufs is None else bufs[i],
                        **hyper,
                    )
        return loss


def _rmsprop_one(
    p, grad, square_avg, grad_avg, buf, *, lr, alpha, eps, weight_decay, momentum, maximize
):
    """The reference single-tensor update, one tensorplay op per step."""
    if maximize:
        grad = -grad
    if weight_decay != 0:
        grad = grad.add(p, alpha=weight_decay)
    square_avg.mul_(alpha).add_(grad * grad, alpha=1 - alpha)
    if grad_avg is not None:
        grad_avg.add_(grad - grad_avg, alpha=1 - alpha)  # lerp_(grad, 1 - alpha)
        avg = (square_avg - grad_avg * grad_avg).sqrt_()
    else:
        avg = square_avg.sqrt()
    avg = avg.add_(eps)
    if buf is not None:
        buf.mul_(momentum).add_(grad / avg)
        p.add_(buf, alpha=-lr)
    else:
        p.add_(grad / avg, alpha=-lr)
