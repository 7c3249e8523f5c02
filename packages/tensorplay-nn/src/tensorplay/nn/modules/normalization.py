"""``LayerNorm``, ``GroupNorm`` and ``RMSNorm`` (torch's ``nn.LayerNorm`` / ``nn.GroupNorm`` /
``nn.RMSNorm``)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn import _functional_norm as FN, functional as F, init
from tensorplay.nn.modules.module import Module
from tensorplay.nn.parameter import Parameter

__all__ = ["LayerNorm", "GroupNorm", "RMSNorm"]


def _affine_parameters(module: Module, shape, affine: bool, bias: bool, device, dtype) -> None:
    """The norm layers' scale and shift: ``weight`` and (unless ``bias`` is False) ``bias``
    of ``shape`` when ``affine``, registered as None otherwise; ``_reset_affine`` fills
    them."""

    def new():
        return Parameter(tp.empty(*shape, device=device, dtype=dtype))

    module.register_parameter("weight", new() if affine else None)
    module.register_parameter("bias", new() if affine and bias else None)


def _reset_affine(module: Module) -> None:
    """``weight`` to ones and ``bias`` to zeros, where they exist (torch's defaults)."""
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


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
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

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


class GroupNorm(Module):
    """Split the ``num_channels`` channels (dim 1) into ``num_groups`` groups and normalise
    each group of each sample (biased variance, ``eps``); then the per-channel ``weight``
    (ones) and ``bias`` (zeros) if ``affine`` (``bias=False`` drops the shift)."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups != 0:
            raise ValueError(
                f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"
            )
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _affine_parameters(self, (num_channels,), affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim < 2 or input.shape[1] != self.num_channels:
            got = input.shape[1] if input.ndim >= 2 else f"a {input.ndim}-D input"
            raise RuntimeError(
                f"GroupNorm(num_groups={self.num_groups}, num_channels={self.num_channels}): "
                f"expected input of shape (N, {self.num_channels}, *) with "
                f"{self.num_channels} channels in dim 1, got {got} (input shape "
                f"{tuple(input.shape)})"
            )
        return FN.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.bias is not None}"
        )


class RMSNorm(Module):
    """``x / sqrt(mean(x**2) + eps)`` over the trailing ``normalized_shape`` dims, times
    ``weight`` (ones) if ``elementwise_affine``. ``eps=None``: the machine epsilon of the
    compute type (float32 for half inputs), as torch."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
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
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if x.ndim < k or tuple(x.shape)[x.ndim - k :] != self.normalized_shape:
            raise RuntimeError(
                f"RMSNorm({self.normalized_shape}): input shape {tuple(x.shape)} does "
                f"not end with normalized_shape {self.normalized_shape}"
            )
        return FN.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
