"""``LayerNorm`` (torch's ``nn.LayerNorm``)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn import functional as F, init
from tensorplay.nn.modules.module import Module
from tensorplay.nn.parameter import Parameter

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dims (biased variance, ``eps``),
    then scale by ``weight`` (ones) and shift by ``bias`` (zeros) if
    ``elementwise_affine`` (``bias=False`` drops the shift)."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(tp.empty(*self.normalized_shape, device=device, dtype=dtype))
            if bias:
                self.bias = Parameter(tp.empty(*self.normalized_shape, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if input.ndim < k or tuple(input.shape)[input.ndim - k :] != self.normalized_shape:
            raise RuntimeError(
                f"LayerNorm({self.normalized_shape}): input shape {tuple(input.shape)} does "
                f"not end with normalized_shape {self.normalized_shape}"
            )
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )
