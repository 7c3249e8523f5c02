"""``BatchNorm1d`` / ``BatchNorm2d`` / ``BatchNorm3d`` (torch's ``nn.BatchNorm*d``)."""

from __future__ import annotations

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn import _functional_norm as FN
from tensorplay.nn.modules.module import Module
from tensorplay.nn.modules.normalization import _affine_parameters, _reset_affine

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]


class _NormBase(Module):
    """Parameters and running statistics shared by the batch norms: ``weight`` (ones) and
    ``bias`` (zeros) if ``affine``; buffers ``running_mean`` (zeros), ``running_var``
    (ones) and ``num_batches_tracked`` (int64 0) if ``track_running_stats``."""

    # 2: num_batches_tracked was added; older state dicts load it as 0
    _version = 2

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        _affine_parameters(self, (num_features,), affine, bias, device, dtype)
        if track_running_stats:
            self.register_buffer("running_mean", tp.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", tp.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", tp.tensor(0, dtype=tp.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with tp.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self)

    def _check_input_dim(self, input: Tensor) -> None:
        raise NotImplementedError

    def _layer(self) -> str:
        return f"{type(self).__name__}(num_features={self.num_features})"

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )

    def _load_from_state_dict(
        self,
        state_dict,
        prefix,
        local_metadata,
        strict,
        missing_keys,
        unexpected_keys,
        error_msgs,
    ) -> None:
        version = local_metadata.get("version", None)
        if (version is None or version < 2) and self.track_running_stats:
            key = prefix + "num_batches_tracked"
            if key not in state_dict:
                state_dict[key] = (
                    self.num_batches_tracked
                    if self.num_batches_tracked is not None
                    else tp.tensor(0, dtype=tp.int64)
                )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


class _BatchNorm(_NormBase):
    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise RuntimeError(
                f"{self._layer()}: expected input with {self.num_features} channels, got "
                f"{input.shape[1]} (input shape {tuple(input.shape)}, channels are dim 1)"
            )
        # batch statistics in training, and in eval when no running statistics are kept
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        # checked before num_batches_tracked counts a batch that is then refused
        if use_batch_stats and _values_per_channel(input) == 1:
            raise ValueError(
                f"{self._layer()}: Expected more than 1 value per channel when training, got "
                f"input size {tuple(input.shape)}; use a batch of more than one sample, or "
                "call .eval() to normalise with the running statistics"
            )
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with tp.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked.item())
        # the buffers are passed only where they are read (eval) or updated (tracked training)
        tracked = not self.training or self.track_running_stats
        return FN.batch_norm(
            input,
            self.running_mean if tracked else None,
            self.running_var if tracked else None,
            self.weight,
            self.bias,
            use_batch_stats,
            factor,
            self.eps,
        )


def _values_per_channel(input: Tensor) -> int:
    n = input.shape[0]
    for s in tuple(input.shape)[2:]:
        n *= s
    return n


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over ``(N, C)`` or ``(N, C, L)`` input: per channel, normalise
    with the batch mean and biased variance in training (updating the running statistics,
    with the unbiased variance, by ``momentum``; ``momentum=None``: cumulative average) and
    with the running statistics in eval; then ``weight`` / ``bias`` if ``affine``."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim not in (2, 3):
            raise ValueError(
                f"{self._layer()}: expected 2D or 3D input (got {input.ndim}D input of shape "
                f"{tuple(input.shape)}); pass (N, C) or (N, C, L)"
            )


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over ``(N, C, H, W)`` input (see ``BatchNorm1d``)."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim != 4:
            raise ValueError(
                f"{self._layer()}: expected 4D input (got {input.ndim}D input of shape "
                f"{tuple(input.shape)}); pass (N, C, H, W), unsqueeze(0) for a single image"
            )


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over ``(N, C, D, H, W)`` input (see ``BatchNorm1d``)."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim != 5:
            raise ValueError(
                f"{self._layer()}: expected 5D input (got {input.ndim}D input of shape "
                f"{tuple(input.shape)}); pass (N, C, D, H, W)"
            )
