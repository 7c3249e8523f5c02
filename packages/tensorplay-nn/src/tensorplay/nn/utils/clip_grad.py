"""Gradient clipping (torch's ``torch.nn.utils.clip_grad``)."""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterable

import tensorplay as tp
from tensorplay import Tensor

__all__ = [
    "clip_grad_norm_",
    "clip_grad_norm",
    "clip_grad_value_",
    "get_total_norm",
    "clip_grads_with_norm_",
]


def _as_list(tensors: Tensor | Iterable[Tensor]) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        return [tensors]
    return list(tensors)


def get_total_norm(
    tensors: Tensor | Iterable[Tensor],
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """The ``norm_type``-norm of the norms of ``tensors`` (as if all were concatenated into one
    vector); ``tensor(0.)`` for none. ``inf`` gives the largest absolute value."""
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if len(tensors) == 0:
        return tp.tensor(0.0)
    with tp.no_grad():
        first_device = tensors[0].device
        norms = [t.norm(norm_type) for t in tensors]
        norms = [n if str(n.device) == str(first_device) else n.to(first_device) for n in norms]
        total_norm = tp.stack(norms).norm(norm_type)
    if error_if_nonfinite and bool(total_norm.isnan() | total_norm.isinf()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from "
            "`parameters` is non-finite, so it cannot be clipped. To disable "
            "this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`"
        )
    return total_norm


def clip_grads_with_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    total_norm: Tensor,
    foreach: bool | None = None,
) -> None:
    """Scale the gradients of ``parameters`` in place by ``min(1, max_norm / (total_norm +
    1e-6))`` (``total_norm`` as from :func:`get_total_norm`)."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    max_norm = float(max_norm)
    if len(grads) == 0:
        return
    with tp.no_grad():
        clip_coef = max_norm / (total_norm + 1e-6)
        clip_coef_clamped = tp.clamp(clip_coef, max=1.0)
        for g in grads:
            coef = clip_coef_clamped
            if str(coef.device) != str(g.device):
                coef = coef.to(g.device)
            g.mul_(coef)


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Clip the gradients of ``parameters`` in place so that their total norm (over all of them
    together, as if concatenated) is at most ``max_norm``; returns the total norm before
    clipping, as a tensor.

    Args:
        parameters: a tensor or an iterable of tensors whose ``.grad`` is clipped.
        max_norm: the largest allowed total norm.
        norm_type: the order of the norm (``float('inf')`` for the largest absolute value).
        error_if_nonfinite: raise if the total norm is NaN or infinite (otherwise the
            gradients are scaled by it anyway, like torch).
        foreach: accepted for torch compatibility; the per-tensor loop is used.
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and len(parameters) == 0:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=2,
            )
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def clip_grad_norm(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Deprecated alias of :func:`clip_grad_norm_`."""
    warnings.warn(
        "`tensorplay.nn.utils.clip_grad_norm` is now deprecated in favor of "
        "`tensorplay.nn.utils.clip_grad_norm_`.",
        FutureWarning,
        stacklevel=2,
    )
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(
    parameters: Tensor | Iterable[Tensor],
    clip_value: float,
    foreach: bool | None = None,
) -> None:
    """Clamp the gradients of ``parameters`` in place to ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    with tp.no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
