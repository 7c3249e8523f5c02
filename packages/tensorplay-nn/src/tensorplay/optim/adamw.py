"""``AdamW``: Adam with decoupled weight decay (torch's ``torch.optim.AdamW``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tensorplay import Tensor
from tensorplay.optim.adam import Adam

__all__ = ["AdamW"]


class AdamW(Adam):
    """AdamW, as ``torch.optim.AdamW``: ``Adam`` whose weight decay shrinks the parameter
    directly (``p *= 1 - lr * weight_decay``) instead of adding to the gradient; the default
    ``weight_decay`` is ``1e-2``."""

    _name = "AdamW"

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float | Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
    ) -> None:
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            decoupled_weight_decay=True,
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # AdamW always decouples, whatever was loaded
            group["decoupled_weight_decay"] = True
