"""``SGD``: stochastic gradient descent, with optional momentum (torch's ``torch.optim.SGD``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.optim import _foreach
from tensorplay.optim.optimizer import Optimizer, _check_nonneg, _params_with_grad, _to_scalar

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent (optionally with momentum), as ``torch.optim.SGD``.

    For each parameter with a gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p
        buf = g (first step) or momentum * buf + (1 - dampening) * g
        g = g + momentum * buf (nesterov) or buf
        p = p - lr * g

    ``state[p]["momentum_buffer"]`` holds ``buf`` when ``momentum != 0``. With momentum,
    ``foreach`` works as in ``Adam`` from the second step on (the first creates the buffers).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
    ) -> None:
        _check_nonneg("lr", lr, "learning rate")
        _check_nonneg("momentum", momentum)
        _check_nonneg("weight_decay", weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
            "foreach": foreach,
        }
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; returns ``closure()``'s loss when given."""
        loss = self._eval_closure(closure)
        with tp.no_grad():
            for group in self.param_groups:
                params = _params_with_grad(group, "SGD")
                if not params:
                    continue
                hyper = dict(
                    lr=_to_scalar(group["lr"]),
                    momentum=group["momentum"],
                    dampening=group["dampening"],
                    weight_decay=group["weight_decay"],
                    nesterov=group["nesterov"],
                    maximize=group["maximize"],
                )
                grads = [p.grad for p in params]
                if hyper["momentum"] != 0:
                    bufs = [self.state[p].get("momentum_buffer") for p in params]
                    if None not in bufs and _foreach.usable(
                        group.get("foreach"), params, grads, bufs
                    ):
                        _foreach.sgd_momentum(params, grads, bufs, **hyper)
                        continue
                for p, grad in zip(params, grads):
                    _sgd_one(p, grad, self.state[p], **hyper)
        return loss


def _sgd_one(p, grad, state, *, lr, momentum, dampening, weight_decay, nesterov, maximize):
    """The reference single-tensor update (and every first step with momentum, which
    creates the buffer)."""
    if maximize:
        grad = -grad
    if weight_decay != 0:
        grad = grad.add(p, alpha=weight_decay)
    if momentum != 0:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = grad.detach().clone()
            state["momentum_buffer"] = buf
        else:
            buf.mul_(momentum).add_(grad, alpha=1 - dampening)
        grad = grad.add(buf, alpha=momentum) if nesterov else buf
    p.add_(grad, alpha=-lr)
