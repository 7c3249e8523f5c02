"""``Identity`` and ``Linear`` (torch's ``nn.Identity`` / ``nn.Linear``)."""

from __future__ import annotations

import math

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn import functional as F, init
from tensorplay.nn.modules.module import Module
from tensorplay.nn.parameter import Parameter

__all__ = ["Identity", "Linear"]


class Identity(Module):
    """Returns its input unchanged; takes and ignores any constructor arguments."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``.

    ``weight``: ``(out_features, in_features)``, initialised ``kaiming_uniform_(a=sqrt(5))``
    (i.e. U(-1/sqrt(in_features), 1/sqrt(in_features))); ``bias``: ``(out_features,)``,
    U(-1/sqrt(in_features), 1/sqrt(in_features)).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(tp.empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(tp.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim == 0 or input.shape[-1] != self.in_features:
            last = input.shape[-1] if input.ndim else "none (a 0-d tensor)"
            raise RuntimeError(
                f"Linear(in_features={self.in_features}): input has last dimension {last} "
                f"(input shape {tuple(input.shape)}, weight shape {tuple(self.weight.shape)})"
            )
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )
