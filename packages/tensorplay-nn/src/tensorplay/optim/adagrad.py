"""``Adagrad`` (torch's ``torch.optim.Adagrad``)."""

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
    _split_by,
    _to_scalar,
)

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """Adagrad, as ``torch.optim.Adagrad`` (single-tensor path).

    For each parameter with a gradient ``g`` (negated when ``maximize``), at step ``t``::

        g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g                        (sum, starts at initial_accumulator_value)
        p = p - clr * g / (sqrt(s) + eps)

    The state (``step``, ``sum``) is created for every parameter at construction, like torch.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
    ) -> None:
        _check_nonneg("lr", lr, "learning rate")
        _check_nonneg("lr_decay", lr_decay)
        _check_nonneg("weight_decay", weight_decay)
        _check_nonneg("initial_accumulator_value", initial_accumulator_value)
        _check_nonneg("eps", eps, "epsilon value")
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "foreach": foreach,
            "maximize": maximize,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group)

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state[p]
        if len(state) == 0:
            state["step"] = tp.tensor(0.0, dtype=tp.float32)
            state["sum"] = tp.full_like(p, group["initial_accumulator_value"])
        return state

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; returns ``closure()``'s loss when given."""
        loss = self._eval_closure(closure)
        with tp.no_grad():
            for group in self.param_groups:
                params = _params_with_grad(group, "Adagrad", real_only=True)
                if not params:
                    continue
                lr, lr_decay = _to_scalar(group["lr"]), group["lr_decay"]
                # groups added later (add_param_group) get their state on first use
                states = [self._init_state(p, group) for p in params]
                steps = [_advance(s["step"]) for s in states]
                grads = [p.grad for p in params]
                sums = [s["sum"] for s in states]
                hyper = dict(
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    maximize=group["maximize"],
                )
                if _foreach.usable(group.get("foreach"), params, grads, sums):
                    rates = [lr / (1 + (step - 1) * lr_decay) for step in steps]
                    for clr, cols in _split_by(rates, [params, grads, sums]):
                        _foreach.adagrad(*cols, clr=clr, **hyper)
                    continue
                for p, grad, state_sum, step in zip(params, grads, sums, steps):
                    _adagrad_one(p, grad, state_sum, clr=lr / (1 + (step - 1) * lr_decay), **hyper)
        return loss


def _adagrad_one(p, grad, state_sum, *, clr, eps, weight_decay, maximize):
    """The reference single-tensor update, one tensorplay op per step."""
    if maximize:
        grad = -grad
    if weight_decay != 0:
        grad = grad.add(p, alpha=weight_decay)
    state_sum.add_(grad * grad)
    std = state_sum.sqrt().add_(eps)
    p.add_(grad / std, alpha=-clr)
