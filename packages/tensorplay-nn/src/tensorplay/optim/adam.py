"""``Adam``: adaptive moment estimation (torch's ``torch.optim.Adam``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.optim.optimizer import Optimizer, _check_nonneg, _params_with_grad, _to_scalar

__all__ = ["Adam"]


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (single-tensor path).

    For each parameter with a gradient ``g`` (negated when ``maximize``), at step ``t``::

        p = p * (1 - lr * weight_decay)          (decoupled_weight_decay, i.e. AdamW)
        g = g + weight_decay * p                 (otherwise, when weight_decay != 0)
        m = beta1 * m + (1 - beta1) * g          (exp_avg)
        v = beta2 * v + (1 - beta2) * g * g      (exp_avg_sq)
        v_max = max(v_max, v)                    (amsgrad: used instead of v below)
        denom = sqrt(v) / sqrt(1 - beta2**t) + eps
        p = p - lr / (1 - beta1**t) * m / denom

    ``state[p]`` holds ``step`` (a float32 scalar tensor), ``exp_avg``, ``exp_avg_sq`` and,
    with ``amsgrad``, ``max_exp_avg_sq``.
    """

    _name = "Adam"

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        decoupled_weight_decay: bool = False,
    ) -> None:
        _check_nonneg("lr", lr, "learning rate")
        _check_nonneg("eps", eps, "epsilon value")
        betas = tuple(_to_scalar(b) for b in betas)
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        _check_nonneg("weight_decay", weight_decay)
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "foreach": foreach,
            "decoupled_weight_decay": decoupled_weight_decay,
        }
        super().__init__(params, defaults)

    def _init_state(self, p: Tensor, amsgrad: bool) -> dict[str, Any]:
        state = self.state[p]
        if len(state) == 0:
            state["step"] = tp.tensor(0.0, dtype=tp.float32)
            state["exp_avg"] = tp.zeros_like(p)
            state["exp_avg_sq"] = tp.zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = tp.zeros_like(p)
        elif amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = tp.zeros_like(p)
        return state

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; returns ``closure()``'s loss when given."""
        loss = self._eval_closure(closure)
        with tp.no_grad():
            for group in self.param_groups:
                lr = _to_scalar(group["lr"])
                beta1, beta2 = (_to_scalar(b) for b in group["betas"])
                eps = group["eps"]
                weight_decay = group["weight_decay"]
                amsgrad = group["amsgrad"]
                maximize = group["maximize"]
                decoupled = group.get("decoupled_weight_decay", False)
                for p in _params_with_grad(group, self._name, real_only=True):
                    grad = p.grad if not maximize else -p.grad
                    state = self._init_state(p, amsgrad)
                    exp_avg = state["exp_avg"]
                    exp_avg_sq = state["exp_avg_sq"]
                    step_t = state["step"]
                    step_t.add_(1)

                    if weight_decay != 0:
                        if decoupled:
                            p.mul_(1 - lr * weight_decay)
                        else:
                            grad = grad.add(p, alpha=weight_decay)

                    # torch: exp_avg.lerp_(grad, 1 - beta1)
                    #        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    exp_avg.add_(grad - exp_avg, alpha=1 - beta1)
                    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)

                    step = step_t.item()
                    bias_correction1 = 1 - beta1**step
                    bias_correction2 = 1 - beta2**step
                    step_size = lr / bias_correction1
                    bias_correction2_sqrt = bias_correction2**0.5

                    if amsgrad:
                        max_exp_avg_sq = state["max_exp_avg_sq"]
                        max_exp_avg_sq.copy_(tp.maximum(max_exp_avg_sq, exp_avg_sq))
                        denom = (max_exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
                    else:
                        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
                    # param.addcdiv_(exp_avg, denom, value=-step_size)
                    p.add_(exp_avg / denom, alpha=-step_size)
        return loss
