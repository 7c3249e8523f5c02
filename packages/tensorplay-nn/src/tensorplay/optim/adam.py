"""``Adam``: adaptive moment estimation (torch's ``torch.optim.Adam``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay._extension import cuda_capturing
from tensorplay.optim import _foreach
from tensorplay.optim.optimizer import (
    Optimizer,
    _advance,
    _check_nonneg,
    _params_with_grad,
    _split_by,
    _to_scalar,
)

__all__ = ["Adam"]

_CPU = tp.device("cpu")


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam``.

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

    ``capturable=True`` keeps each step count on its parameter's device and computes the
    bias corrections there, so that a step can be captured in a CUDA graph and replayed;
    it runs the one-op-per-step loop.

    ``foreach=None`` (the default) or ``True`` updates all parameters of a group at once
    where they are plain contiguous float32/float64 tensors on one device: numpy in place on
    the CPU, one kernel launch for the group on CUDA. ``foreach=False``, and any other case,
    runs one tensorplay op per arithmetic step and parameter. Both compute the same
    arithmetic in the same order.
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
        capturable: bool = False,
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
            "capturable": capturable,
            "decoupled_weight_decay": decoupled_weight_decay,
        }
        super().__init__(params, defaults)

    def _init_state(self, p: Tensor, amsgrad: bool, capturable: bool = False) -> dict[str, Any]:
        state = self.state[p]
        # the step count lives on the host, unless the update must run without it
        # (capturable: on the parameter's device, the bias corrections computed there)
        where = p.device if capturable else _CPU
        step = state.get("step")
        if step is None:
            state["step"] = tp.zeros((), dtype=tp.float32, device=where)
            state["exp_avg"] = tp.zeros_like(p)
            state["exp_avg_sq"] = tp.zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = tp.zeros_like(p)
        elif step.device is not where and step.device != where:
            state["step"] = step.to(where)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = tp.zeros_like(p)
        return state

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimisation step; returns ``closure()``'s loss when given."""
        if cuda_capturing() and not all(g.get("capturable", False) for g in self.param_groups):
            raise _capture_refused(self._name)
        loss = self._eval_closure(closure)
        with tp.no_grad():
            for group in self.param_groups:
                amsgrad = group["amsgrad"]
                capturable = group.get("capturable", False)
                params = _params_with_grad(group, self._name, real_only=True)
                if not params:
                    continue
                grads = [p.grad for p in params]
                states = [self._init_state(p, amsgrad, capturable) for p in params]
                hyper = dict(
                    lr=_to_scalar(group["lr"]),
                    betas=tuple(_to_scalar(b) for b in group["betas"]),
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    maximize=group["maximize"],
                    decoupled=group.get("decoupled_weight_decay", False),
                )
                columns = [params, grads, [s["exp_avg"] for s in states]]
                columns.append([s["exp_avg_sq"] for s in states])
                if amsgrad:
                    columns.append([s["max_exp_avg_sq"] for s in states])
                if capturable:  # the step stays a device tensor: no host value anywhere
                    for s in states:
                        s["step"].add_(1)
                    steps = [s["step"] for s in states]
                else:
                    steps = [_advance(s["step"]) for s in states]
                if not capturable and _foreach.usable(group.get("foreach"), *columns):
                    _adam_multi(columns, steps, amsgrad, **hyper)
                else:
                    for i, step in enumerate(steps):
                        _adam_one(*(c[i] for c in columns), step=step, **hyper)
        return loss


def _capture_refused(name: str) -> RuntimeError:
    """Without ``capturable`` the bias corrections are computed on the host from the step
    count: a CUDA graph would replay the captured step's values forever, so a capture is
    refused (as torch refuses it)."""
    return RuntimeError(
        f"{name}.step() cannot be captured in a CUDA graph: its bias corrections are "
        "computed on the host from the step count and a replay would reuse the captured "
        "step's values; construct it with capturable=True (the step count and the "
        "corrections then stay on the device), or step it outside the graph"
    )


def _bias(beta1, beta2, lr, step):
    """(lr / (1 - beta1**step), sqrt(1 - beta2**step)): numbers from a host step count,
    0-d tensors on the step's device from a device one (capturable)."""
    step_size = lr / (1 - beta1**step)
    return step_size, (1 - beta2**step) ** 0.5


def _adam_multi(columns, steps, amsgrad, *, lr, betas, eps, weight_decay, maximize, decoupled):
    """The multi-tensor update, once per distinct step count (normally one)."""
    beta1, beta2 = betas
    for step, cols in _split_by(steps, columns):
        step_size, bc2_sqrt = _bias(beta1, beta2, lr, step)
        _foreach.adam(
            *cols[:4],
            cols[4] if amsgrad else None,
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            weight_decay=weight_decay,
            decoupled=decoupled,
            maximize=maximize,
            step_size=step_size,
            bias_correction2_sqrt=bc2_sqrt,
        )


def _adam_one(
    p,
    grad,
    exp_avg,
    exp_avg_sq,
    max_exp_avg_sq=None,
    *,
    step,
    lr,
    betas,
    eps,
    weight_decay,
    maximize,
    decoupled,
):
    """The reference single-tensor update, one tensorplay op per step."""
    beta1, beta2 = betas
    if maximize:
        grad = -grad
    if weight_decay != 0:
        if decoupled:
            p.mul_(1 - lr * weight_decay)
        else:
            grad = grad.add(p, alpha=weight_decay)
    # torch: exp_avg.lerp_(grad, 1 - beta1)
    #        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    exp_avg.add_(grad - exp_avg, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    step_size, bias_correction2_sqrt = _bias(beta1, beta2, lr, step)
    if max_exp_avg_sq is not None:
        max_exp_avg_sq.copy_(tp.maximum(max_exp_avg_sq, exp_avg_sq))
        exp_avg_sq = max_exp_avg_sq
    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    # param.addcdiv_(exp_avg, denom, value=-step_size)
    if isinstance(step_size, Tensor):  # capturable: a device scalar, not an alpha
        p.sub_(exp_avg / denom * step_size)
    else:
        p.add_(exp_avg / denom, alpha=-step_size)
