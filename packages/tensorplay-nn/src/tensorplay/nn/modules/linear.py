"""``Identity``, ``Linear`` and ``Bilinear`` (torch's ``nn.Identity`` / ``nn.Linear`` /
``nn.Bilinear``)."""

from __future__ import annotations

import math

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn import _functional_norm as FN, functional as F, init
from tensorplay.nn.modules.module import Module
from tensorplay.nn.parameter import Parameter

__all__ = ["Identity", "Linear", "NonDynamicallyQuantizableLinear", "Bilinear"]


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
        init._fan_in_uniform_(self.weight, self.bias)

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


class NonDynamicallyQuantizableLinear(Linear):
    """A ``Linear`` under torch's name for ``MultiheadAttention.out_proj`` (so the module
    prints as torch's does)."""


class Bilinear(Module):
    """``y = x1^T A x2 + b``: ``y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j]``.

    ``weight``: ``(out_features, in1_features, in2_features)``; ``weight`` and ``bias``
    ``(out_features,)`` are initialised U(-1/sqrt(in1_features), 1/sqrt(in1_features)).
    """

    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(
            tp.empty(out_features, in1_features, in2_features, device=device, dtype=dtype)
        )
        if bias:
            self.bias = Parameter(tp.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.in1_features <= 0:
            raise ValueError(
                f"in1_features must be > 0, but got (in1_features={self.in1_features})"
            )
        bound = 1 / math.sqrt(self.weight.size(1))
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        for name, x, want in (
            ("input1", input1, self.in1_features),
            ("input2", input2, self.in2_features),
        ):
            if x.ndim == 0 or x.shape[-1] != want:
                last = x.shape[-1] if x.ndim else "none (a 0-d tensor)"
                raise RuntimeError(
                    f"Bilinear(in1_features={self.in1_features}, in2_features="
                    f"{self.in2_features}): {name} must have last dimension {want}, got {last} "
                    f"(input shape {tuple(x.shape)})"
                )
        return FN.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )
