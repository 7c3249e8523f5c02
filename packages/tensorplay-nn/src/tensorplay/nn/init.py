"""Parameter initialisation (``tensorplay.nn.init``), following ``torch.nn.init``.

Every function fills its tensor in place under ``tp.no_grad()`` and returns it.
"""

from __future__ import annotations

import math
import warnings

import tensorplay as tp
from tensorplay import Tensor

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "zeros_",
    "ones_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
]


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for ``nonlinearity`` (torch's table):

    linear / conv / sigmoid: 1; tanh: 5/3; relu: sqrt(2);
    leaky_relu: sqrt(2 / (1 + negative_slope**2)) (``param``, default 0.01); selu: 3/4.
    """
    linear_fns = [
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
    ]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, int) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _no_op(tensor: Tensor) -> bool:
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with values drawn from U(a, b)."""
    with tp.no_grad():
        tensor.uniform_(a, b, generator=generator)
    return tensor


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with values drawn from N(mean, std**2)."""
    with tp.no_grad():
        tensor.normal_(mean, std, generator=generator)
    return tensor


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator=None,
) -> Tensor:
    """Fill with N(mean, std**2) truncated to [a, b] (by redrawing values outside it)."""
    if a >= b:
        raise ValueError(f"trunc_normal_(): need a < b, got a={a}, b={b}")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
            "The distribution of values may be incorrect.",
            stacklevel=2,
        )
    with tp.no_grad():
        vals = tp.empty_like(tensor).normal_(mean, std, generator=generator)
        for _ in range(1000):
            bad = (vals < a) | (vals > b)
            if not bool(bad.any()):
                break
            fresh = tp.empty_like(tensor).normal_(mean, std, generator=generator)
            vals = tp.where(bad, fresh, vals)
        tensor.copy_(tp.clamp(vals, min=a, max=b))
    return tensor


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    with tp.no_grad():
        tensor.fill_(val)
    return tensor


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0."""
    with tp.no_grad():
        tensor.zero_()
    return tensor


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1."""
    with tp.no_grad():
        tensor.fill_(1.0)
    return tensor


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """``(fan_in, fan_out)``: ``size(1)`` and ``size(0)`` times the receptive field
    (the product of the dims after the first two)."""
    dimensions = tensor.dim()
    if dimensions < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    num_input_fmaps = tensor.size(1)
    num_output_fmaps = tensor.size(0)
    receptive_field_size = 1
    for s in tuple(tensor.shape)[2:]:
        receptive_field_size *= s
    return num_input_fmaps * receptive_field_size, num_output_fmaps * receptive_field_size


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator=None,
) -> Tensor:
    """U(-bound, bound) with ``bound = gain * sqrt(3 / fan)`` (He et al., 2015)."""
    if _no_op(tensor):
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator=None,
) -> Tensor:
    """N(0, std**2) with ``std = gain / sqrt(fan)`` (He et al., 2015)."""
    if _no_op(tensor):
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    """``gain / sqrt(fan)``: the standard deviation both Kaiming initialisations draw with."""
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def _fan_in_uniform_(weight: Tensor, bias: Tensor | None) -> None:
    """torch's default initialisation of Linear and convolution layers:
    ``kaiming_uniform_(a=sqrt(5))`` on the weight, which is U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), and the same bound for the bias."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = _calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)
