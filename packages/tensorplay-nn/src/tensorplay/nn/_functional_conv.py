"""Functional convolution and pooling (torch's ``F.conv2d``, ``F.max_pool2d``...): thin
wrappers over core's op-table rows, which hold the kernels, shape checks and gradients.

Signatures and defaults are torch's; ``tensorplay.nn.functional`` re-exports these names.
"""

from __future__ import annotations

import tensorplay as tp
from tensorplay import Tensor

__all__ = [
    "conv1d",
    "conv2d",
    "conv_transpose1d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
]


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """1-D cross-correlation of ``input`` (N, C_in, L) or (C_in, L) with ``weight``
    (C_out, C_in / groups, kL); ``padding`` is an int, a 1-tuple, ``'same'`` or ``'valid'``."""
    return tp.conv1d(input, weight, bias, stride, padding, dilation, groups)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """2-D cross-correlation of ``input`` (N, C_in, H, W) or (C_in, H, W) with ``weight``
    (C_out, C_in / groups, kH, kW); ``padding`` is an int, a pair, ``'same'`` or ``'valid'``."""
    return tp.conv2d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
) -> Tensor:
    """The transposed 1-D convolution (the gradient of ``conv1d`` w.r.t. its input);
    ``weight`` is (C_in, C_out / groups, kL)."""
    return tp.conv_transpose1d(
        input, weight, bias, stride, padding, output_padding, groups, dilation
    )


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
) -> Tensor:
    """The transposed 2-D convolution (the gradient of ``conv2d`` w.r.t. its input);
    ``weight`` is (C_in, C_out / groups, kH, kW)."""
    return tp.conv_transpose2d(
        input, weight, bias, stride, padding, output_padding, groups, dilation
    )


def max_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """The maximum of each window; with ``return_indices``, ``(values, indices)``, indices
    being flat positions in each input H*W plane (what ``max_unpool2d`` takes in torch)."""
    return tp.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """The mean of each window: divided by the window size (padding included unless
    ``count_include_pad=False``), or by ``divisor_override``."""
    return tp.avg_pool2d(
        input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """The mean over windows chosen to give ``output_size`` (an int, or two ints or Nones;
    None keeps that input size)."""
    return tp.adaptive_avg_pool2d(input, output_size)
