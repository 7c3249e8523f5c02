"""``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d`` (torch's ``nn.*Pool2d``).

Arguments are kept as given (``kernel_size=2`` stays an int; ``stride`` defaults to
``kernel_size``), so ``repr`` reads as torch's.
"""

from __future__ import annotations

from tensorplay import Tensor
from tensorplay.nn import functional as F
from tensorplay.nn.modules.module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"]


class _Pool2d(Module):
    def _layer(self) -> str:
        return f"{self._get_name()}({self.extra_repr()})"

    def _run(self, fn, input: Tensor, *args):
        if input.ndim not in (3, 4):
            raise RuntimeError(
                f"{self._layer()}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                f"input shape {tuple(input.shape)}"
            )
        try:
            return fn(input, *args)
        except RuntimeError as e:  # window larger than the input, pad too large...
            raise type(e)(f"{self._layer()}: {e} (input shape {tuple(input.shape)})") from e


class MaxPool2d(_Pool2d):
    """The maximum over each ``kernel_size`` window (``dilation`` spaces the window's
    elements); ``return_indices=True`` makes ``forward`` return ``(values, indices)``."""

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor):
        return self._run(
            F.max_pool2d,
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            self.ceil_mode,
            self.return_indices,
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class AvgPool2d(_Pool2d):
    """The mean over each ``kernel_size`` window, divided by the window size (padding
    counted unless ``count_include_pad=False``) or by ``divisor_override``."""

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return self._run(
            F.avg_pool2d,
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(_Pool2d):
    """The mean over the windows that give ``output_size`` (an int, or two ints or Nones;
    None keeps that input size) whatever the input size."""

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return self._run(F.adaptive_avg_pool2d, input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
