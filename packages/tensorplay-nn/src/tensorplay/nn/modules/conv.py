"""``Conv1d``, ``Conv2d``, ``ConvTranspose1d``, ``ConvTranspose2d`` (torch's ``nn.Conv*``).

Arguments, attributes (tuples: ``kernel_size=(3, 3)``), parameter shapes, default
initialisation and ``repr`` follow torch. Only ``padding_mode='zeros'`` is implemented;
torch's other modes raise ``NotImplementedError``.
"""

from __future__ import annotations

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn import functional as F, init
from tensorplay.nn.modules.module import Module
from tensorplay.nn.parameter import Parameter

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_PADDING_STRINGS = ("same", "valid")


def _ntuple(value, n: int, name: str, layer: str) -> tuple:
    """torch's ``_single``/``_pair``: an int repeated ``n`` times, or a sequence as is."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(
                f"{layer}: {name} must be an int or a tuple of {n} ints, got {value!r}"
            )
        return tuple(value)
    return (value,) * n


class _ConvNd(Module):
    """What the convolution layers share: arguments, parameters, init, repr and the input
    checks that name the layer."""

    _nd = 0
    _transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride,
        padding,
        dilation,
        output_padding,
        groups: int,
        bias: bool,
        padding_mode: str,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        name, nd = type(self).__name__, self._nd
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        kernel_size = _ntuple(kernel_size, nd, "kernel_size", name)
        stride = _ntuple(stride, nd, "stride", name)
        dilation = _ntuple(dilation, nd, "dilation", name)
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(
                    f"Invalid padding string {padding!r}, should be one of {set(_PADDING_STRINGS)}"
                )
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = _ntuple(padding, nd, "padding", name)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"padding_mode must be one of {set(_PADDING_MODES)}, but got "
                f"padding_mode='{padding_mode}'"
            )
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {name}')
        if padding_mode != "zeros":
            raise NotImplementedError(
                f"{name}: padding_mode={padding_mode!r} is not implemented; the supported "
                "value is padding_mode='zeros' (to pad another way, pad the input first and "
                "use padding=0)"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = self._transposed
        self.output_padding = _ntuple(output_padding, nd, "output_padding", name)
        self.groups = groups
        self.padding_mode = padding_mode
        if self._transposed:
            shape = (in_channels, out_channels // groups, *kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *kernel_size)
        self.weight = Parameter(tp.empty(*shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(tp.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torch's defaults: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both, fan_in read from
        # the weight's second dim (out_channels/groups for a transposed layer, as in torch)
        init._fan_in_uniform_(self.weight, self.bias)

    def extra_repr(self) -> str:
        nd = self._nd
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def _shapes(self, input: Tensor) -> str:
        return f"(input shape {tuple(input.shape)}, weight shape {tuple(self.weight.shape)})"

    def _layer(self) -> str:
        return f"{self._get_name()}({self.extra_repr()})"

    def _check_input(self, input: Tensor) -> None:
        nd = self._nd
        if input.ndim not in (nd + 1, nd + 2):
            raise RuntimeError(
                f"{self._layer()}: expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) "
                f"input {self._shapes(input)}"
            )
        dim = input.ndim - nd - 1
        if input.shape[dim] != self.in_channels:
            raise RuntimeError(
                f"{self._layer()}: input has {input.shape[dim]} channels at dimension {dim}, "
                f"expected in_channels={self.in_channels} {self._shapes(input)}"
            )

    def _run(self, fn, input: Tensor, *args) -> Tensor:
        self._check_input(input)
        try:
            return fn(input, self.weight, self.bias, *args)
        except RuntimeError as e:  # kernel larger than the input, output too small...
            raise type(e)(f"{self._layer()}: {e} {self._shapes(input)}") from e


class _Conv(_ConvNd):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            0,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
        )


class Conv1d(_Conv):
    """1-D convolution over (N, C_in, L) or (C_in, L) input: ``weight`` is
    ``(out_channels, in_channels / groups, kernel_size)``, ``bias`` ``(out_channels,)``;
    both initialised U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels / groups *
    kernel_size (torch's kaiming_uniform(a=sqrt(5)))."""

    _nd = 1

    def forward(self, input: Tensor) -> Tensor:
        return self._run(F.conv1d, input, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_Conv):
    """2-D convolution over (N, C_in, H, W) or (C_in, H, W) input: ``weight`` is
    ``(out_channels, in_channels / groups, kH, kW)``, ``bias`` ``(out_channels,)``; both
    initialised U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels / groups * kH * kW
    (torch's kaiming_uniform(a=sqrt(5)))."""

    _nd = 2

    def forward(self, input: Tensor) -> Tensor:
        return self._run(F.conv2d, input, self.stride, self.padding, self.dilation, self.groups)


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        if isinstance(padding, str):
            raise ValueError(
                f"{type(self).__name__}: padding must be an int or a tuple of ints, got "
                f"{padding!r} (transposed convolutions take no padding strings)"
            )
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            output_padding,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
        )

    def _output_padding(self, input: Tensor, output_size) -> tuple:
        """``output_padding``, or what gives ``output_size`` (torch's rule: the sizes that
        ``stride`` positions of slack allow)."""
        if output_size is None:
            return self.output_padding
        nd = self._nd
        lead = input.ndim - nd
        output_size = tuple(output_size)
        if len(output_size) == lead + nd:
            output_size = output_size[lead:]
        if len(output_size) != nd:
            raise ValueError(
                f"ConvTranspose{nd}D: for {input.ndim}D input, output_size must have {nd} or "
                f"{lead + nd} elements (got {len(output_size)})"
            )
        low = [
            (input.shape[lead + d] - 1) * self.stride[d]
            - 2 * self.padding[d]
            + self.dilation[d] * (self.kernel_size[d] - 1)
            + 1
            for d in range(nd)
        ]
        high = [m + s - 1 for m, s in zip(low, self.stride)]
        for size, lo, hi in zip(output_size, low, high):
            if size < lo or size > hi:
                raise ValueError(
                    f"requested an output size of {list(output_size)}, but valid sizes range "
                    f"from {low} to {high} (for an input of {list(input.shape[lead:])})"
                )
        return tuple(size - lo for size, lo in zip(output_size, low))


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-D convolution (the gradient of ``Conv1d`` w.r.t. its input): ``weight``
    is ``(in_channels, out_channels / groups, kernel_size)``; ``forward(input,
    output_size=None)`` picks the output padding that gives ``output_size``."""

    _nd = 1

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        self._check_input(input)
        op = self._output_padding(input, output_size)
        return self._run(
            F.conv_transpose1d, input, self.stride, self.padding, op, self.groups, self.dilation
        )


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-D convolution (the gradient of ``Conv2d`` w.r.t. its input): ``weight``
    is ``(in_channels, out_channels / groups, kH, kW)``; ``forward(input, output_size=None)``
    picks the output padding that gives ``output_size``."""

    _nd = 2

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        self._check_input(input)
        op = self._output_padding(input, output_size)
        return self._run(
            F.conv_transpose2d, input, self.stride, self.padding, op, self.groups, self.dilation
        )
