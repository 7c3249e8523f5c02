"""Functional forms of the layers and losses (``tensorplay.nn.functional``, torch's ``F``).

Everything here is composed from core ``tensorplay`` ops, so gradients come from core's
autograd. Names, signatures, defaults and numbers follow ``torch.nn.functional``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn._functional_norm import (
    batch_norm,
    bilinear,
    group_norm,
    multi_head_attention_forward,
    pad,
    rms_norm,
    scaled_dot_product_attention,
)

# Convolution and pooling: torch's F.conv2d is torch.conv2d, and here too the op-table rows
# (kernels, shape checks, gradients, torch's signatures) are the functional forms.
conv1d = tp.conv1d
conv2d = tp.conv2d
conv_transpose1d = tp.conv_transpose1d
conv_transpose2d = tp.conv_transpose2d
max_pool2d = tp.max_pool2d
avg_pool2d = tp.avg_pool2d
adaptive_avg_pool2d = tp.adaptive_avg_pool2d

__all__ = [
    "linear",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softmax",
    "log_softmax",
    "leaky_relu",
    "dropout",
    "embedding",
    "layer_norm",
    "one_hot",
    "mse_loss",
    "l1_loss",
    "nll_loss",
    "cross_entropy",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "batch_norm",
    "group_norm",
    "rms_norm",
    "scaled_dot_product_attention",
    "multi_head_attention_forward",
    "pad",
    "bilinear",
    "conv1d",
    "conv2d",
    "conv_transpose1d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
]

_REDUCTIONS = ("none", "mean", "sum")


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _check_reduction(fn: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"{fn}(): {reduction!r} is not a valid value for reduction; "
            "expected one of 'none', 'mean', 'sum'"
        )


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


# --------------------------------------------------------------------------- linear


# ``y = input @ weight.T + bias``: the op-table row (one dispatch and one autograd node; its
# shape rule raises the errors, naming both shapes).
linear = tp.linear


# --------------------------------------------------------------------------- activations


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu_() if inplace else tp.relu(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu(): approximate must be 'none' or 'tanh', got {approximate!r}")
    return tp.gelu(input, approximate=approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.silu_() if inplace else tp.silu(input)


def sigmoid(input: Tensor) -> Tensor:
    return tp.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return tp.tanh(input)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    if inplace:
        return input.leaky_relu_(negative_slope)
    return tp.leaky_relu(input, negative_slope)


def _softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. "
        "Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim)
    return tp.softmax(input, dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim)
    return tp.log_softmax(input, dim, dtype=dtype)


# --------------------------------------------------------------------------- dropout


def dropout(
    input: Tensor,
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    generator=None,
) -> Tensor:
    """Zero each element with probability ``p`` and scale the kept ones by ``1/(1-p)``
    (when ``training``; otherwise return ``input`` unchanged)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        scale = tp.zeros_like(input)
    else:
        keep = (
            tp.rand(*input.shape, generator=generator, dtype=input.dtype, device=input.device) >= p
        )
        scale = keep.to(input.dtype) * (1.0 / (1.0 - p))
    return input.mul_(scale) if inplace else input * scale


# --------------------------------------------------------------------------- embedding


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` picked by the integer indices ``input``: result shape is
    ``(*input.shape, embedding_dim)``. The ``padding_idx`` row receives no gradient."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "embedding(): max_norm, scale_grad_by_freq and sparse are not supported"
        )
    if weight.ndim != 2:
        raise RuntimeError(f"embedding(): weight must be 2-D, got shape {_shape(weight)}")
    if input.dtype.is_floating_point or input.dtype.is_complex or input.dtype == tp.bool:
        raise RuntimeError(
            f"embedding(): expected indices of an integer dtype (int64 or int32), got {input.dtype}"
        )
    num = weight.shape[0]
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise ValueError(
                f"embedding(): padding_idx must be within num_embeddings ({num}), got {padding_idx}"
            )
        if padding_idx < 0:
            padding_idx += num
    flat = input.reshape(-1)
    # (not readable on the host: index_select's own check of the whole batch raises)
    if (
        flat.numel()
        and _host_readable(flat)
        and (bool((flat < 0).any()) or bool((flat >= num).any()))
    ):
        raise IndexError(
            f"embedding(): index out of range: indices must be in [0, {num}) for a weight "
            f"of shape {_shape(weight)}"
        )
    rows = tp.index_select(weight, 0, flat)
    if padding_idx is not None:
        keep = (flat != padding_idx).unsqueeze(-1)
        rows = tp.where(keep, rows, rows.detach())
    return rows.reshape(*input.shape, weight.shape[1])


# --------------------------------------------------------------------------- normalization


def layer_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise over the last ``len(normalized_shape)`` dims (biased variance), then
    apply the elementwise affine ``weight``/``bias`` if given."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(int(s) for s in normalized_shape)
    k = len(normalized_shape)
    if k == 0 or input.ndim < k or _shape(input)[input.ndim - k :] != normalized_shape:
        raise RuntimeError(
            f"layer_norm(): input shape {_shape(input)} does not end with "
            f"normalized_shape {list(normalized_shape)}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and _shape(t) != normalized_shape:
            raise RuntimeError(
                f"layer_norm(): {name} has shape {_shape(t)}, expected normalized_shape "
                f"{list(normalized_shape)}"
            )
    dims = tuple(range(-k, 0))
    mean = input.mean(dim=dims, keepdim=True)
    centered = input - mean
    var = (centered * centered).mean(dim=dims, keepdim=True)
    out = centered * tp.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


# --------------------------------------------------------------------------- one_hot


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``(*tensor.shape, num_classes)`` int64 tensor with a 1 at each class index;
    ``num_classes=-1`` infers ``max + 1``."""
    if tensor.dtype != tp.int64:
        raise RuntimeError(
            "one_hot is only applicable to index tensor of type LongTensor (int64), got "
            f"{tensor.dtype}; convert the indices with .long()"
        )
    if num_classes < -1:
        raise RuntimeError(
            f"one_hot(): num_classes should be -1 (infer) or non-negative, got {num_classes}"
        )
    if tensor.numel() == 0:
        if num_classes <= 0:
            raise RuntimeError(
                "one_hot(): Can not infer total number of classes from empty tensor; "
                "pass num_classes"
            )
    elif not _host_readable(tensor):
        if num_classes == -1:  # (each sample would infer its own number of classes)
            raise RuntimeError(
                "When vmap-ing one_hot(), please provide an explicit positive num_classes argument."
            )
    elif num_classes == -1 or tensor.device.type == "cpu":
        if bool((tensor < 0).any()):
            raise RuntimeError("one_hot(): Class values must be non-negative.")
        top = int(tensor.max().item())
        if num_classes == -1:
            num_classes = top + 1
        elif top >= num_classes:
            raise RuntimeError(
                f"one_hot(): Class values must be smaller than num_classes ({num_classes}), "
                f"got {top}."
            )
    out = tp.zeros((*tensor.shape, num_classes), dtype=tp.int64, device=tensor.device)
    # on CUDA with num_classes given, scatter checks the indices on the device (reported at
    # the next synchronisation): a host read here would stall every step; under vmap it
    # checks the whole batch. (Out of place: under vmap the zeros are one tensor shared by
    # the batch, which a batched write cannot land in.)
    return out.scatter(-1, tensor.unsqueeze(-1), tp.ones_like(tensor).unsqueeze(-1))


# --------------------------------------------------------------------------- losses


def _check_same_shape(fn: str, input: Tensor, target: Tensor) -> None:
    if _shape(input) != _shape(target):
        raise ValueError(
            f"{fn}(): target size {_shape(target)} is different from input size "
            f"{_shape(input)}; please ensure they have the same size"
        )


def _broadcast_warn(fn: str, input: Tensor, target: Tensor) -> None:
    if _shape(input) != _shape(target):
        warnings.warn(
            f"{fn}(): using a target size ({_shape(target)}) that is different to the input "
            f"size ({_shape(input)}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.",
            stacklevel=3,
        )


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    _check_reduction("mse_loss", reduction)
    _broadcast_warn("mse_loss", input, target)
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    _check_reduction("l1_loss", reduction)
    _broadcast_warn("l1_loss", input, target)
    return _reduce(tp.abs(input - target), reduction)


def _class_last(fn: str, input: Tensor, target: Tensor):
    """``(input2d (M, C), target1d (M,), target_shape)`` with the class dim moved last."""
    if input.ndim == 0:
        raise ValueError(f"{fn}(): input must have at least 1 dimension, got a scalar")
    if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == tp.bool:
        raise RuntimeError(
            f"{fn}(): expected target of an integer dtype (class indices), got {target.dtype}"
        )
    if input.ndim == 1:
        expected: tuple[int, ...] = ()
    else:
        expected = (input.shape[0], *_shape(input)[2:])
    if _shape(target) != expected:
        raise ValueError(
            f"{fn}(): expected target of shape {expected} for input of shape "
            f"{_shape(input)}, got target shape {_shape(target)}"
        )
    c = input.shape[-1] if input.ndim == 1 else input.shape[1]
    if input.ndim == 1:
        inp = input.unsqueeze(0)
    elif input.ndim == 2:
        inp = input
    else:
        perm = (0, *range(2, input.ndim), 1)
        inp = input.permute(*perm).reshape(-1, c)
    return inp, target.reshape(-1), expected, c


def _host_readable(t: Tensor) -> bool:
    """Can ``t``'s values be read on the host here? Not those of a tensor subclass that
    takes the ops itself (``__tensorplay_dispatch__``): inside ``vmap`` each argument is a
    sample's view of the batch, with no values of its own to read. The bound checks then
    fall to the ops (index_select, gather, scatter), which check the whole batch at once."""
    return getattr(type(t), "__tensorplay_dispatch__", None) is None


def _check_weight(fn: str, weight: Tensor | None, c: int) -> None:
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != c):
        raise RuntimeError(
            f"{fn}(): weight must be a 1-D tensor of {c} elements (one per class), "
            f"got shape {_shape(weight)}"
        )


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """Negative log likelihood of log-probabilities ``input`` (class dim 1, or 0 for 1-D
    input) at class indices ``target``. ``mean`` divides by the summed weight of the
    targets that are not ``ignore_index``."""
    _check_reduction("nll_loss", reduction)
    return _nll_loss("nll_loss", input, target, weight, ignore_index, reduction)


def _nll_loss(fn, input, target, weight, ignore_index, reduction) -> Tensor:
    inp, tgt, tshape, c = _class_last(fn, input, target)
    _check_weight(fn, weight, c)
    # on CUDA the bound is checked on the device by gather (reported at the next sync): a
    # host read here would stall every training step and break CUDA graph capture. On the
    # CPU the values are at hand: one numpy pass instead of four tensor ops per step. Under
    # vmap they are not (a sample's view of the batch): gather checks the whole batch.
    if tgt.device.type == "cpu" and tgt.numel() and _host_readable(tgt):
        values = tgt.numpy()
        lo, hi = values.min(), values.max()
        # the common case in two reductions: every target a class, and ignore_index outside
        # the targets' range, so none is ignored
        in_range = 0 <= lo and hi < c
        everyone = in_range and not lo <= ignore_index <= hi
        if not everyone:
            counted = values != ignore_index
            everyone = bool(counted.all())
            values = values if everyone else values[counted]
            if not in_range:  # (the ignored targets may have been all of those outside)
                low, high = values < 0, values >= c
                if low.any() or high.any():
                    worst = int(values[low].min()) if low.any() else int(values[high].max())
                    raise IndexError(f"{fn}(): Target {worst} is out of bounds (classes: {c}).")
        if everyone and weight is None:
            # every target counts, with weight 1: the loss is the picked log-probabilities'
            # negated mean (sum) itself, three ops where the masked form below takes ten
            picked = tp.gather(inp, 1, tgt.unsqueeze(1))  # (M, 1)
            if reduction == "none":
                return (-picked).reshape(*tshape)
            return -(picked.sum() if reduction == "sum" else picked.mean())
    valid = tgt != ignore_index
    safe = tp.where(valid, tgt, tp.zeros_like(tgt))
    picked = tp.gather(inp, 1, safe.unsqueeze(1)).squeeze(1)
    validf = valid.to(input.dtype)
    w = validf if weight is None else tp.index_select(weight, 0, safe) * validf
    loss = -(picked * w)
    if reduction == "none":
        return loss.reshape(*tshape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """``nll_loss(log_softmax(input, class_dim), target)`` for class-index targets, or
    ``-sum(target * log_softmax(input))`` for probability targets (floating ``target`` of
    the same shape as ``input``); ``label_smoothing`` mixes in the uniform distribution."""
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(
            f"cross_entropy(): label_smoothing must be between 0.0 and 1.0, got {label_smoothing}"
        )
    if input.ndim == 0:
        raise ValueError("cross_entropy(): input must have at least 1 dimension, got a scalar")
    class_dim = 0 if input.ndim == 1 else 1
    c = input.shape[class_dim]
    logp = tp.log_softmax(input, class_dim)
    wshape = [1] * input.ndim
    wshape[class_dim] = c

    if target.dtype.is_floating_point and _shape(target) == _shape(input):
        _check_weight("cross_entropy", weight, c)
        tgt = target
        if label_smoothing > 0.0:
            tgt = tgt * (1.0 - label_smoothing) + label_smoothing / c
        prod = logp * tgt
        if weight is not None:
            prod = prod * weight.reshape(*wshape)
        if reduction == "none":
            return -prod.sum(dim=class_dim)
        if reduction == "sum":
            return -prod.sum()
        n = input.numel() // c if c else 0
        return -prod.sum() / (n if n else math.nan)
    if target.dtype.is_floating_point:
        raise ValueError(
            f"cross_entropy(): probability targets must have the input's shape "
            f"{_shape(input)}, got {_shape(target)}"
        )

    nll = _nll_loss("cross_entropy", logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    ignore = (target == ignore_index).to(input.dtype)
    lw = logp if weight is None else logp * weight.reshape(*wshape)
    smooth = -lw.sum(dim=class_dim) * (1.0 - ignore)
    if reduction == "none":
        ret = smooth
    elif reduction == "sum":
        ret = smooth.sum()
    else:
        if weight is None:
            denom = (1.0 - ignore).sum()
        else:
            safe = tp.where(target == ignore_index, tp.zeros_like(target), target).reshape(-1)
            denom = (tp.index_select(weight, 0, safe) * (1.0 - ignore).reshape(-1)).sum()
        ret = smooth.sum() / denom
    return nll * (1.0 - label_smoothing) + ret * (label_smoothing / c)


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``-(t*log(x) + (1-t)*log(1-x))`` with each log clamped at -100 like torch.

    ``input`` holds probabilities in [0, 1]. (At exactly 0 or 1 the gradient is 0 where
    torch's is ``±1e12``.)"""
    _check_reduction("binary_cross_entropy", reduction)
    _check_same_shape("binary_cross_entropy", input, target)
    if input.numel() and (bool((input < 0).any()) or bool((input > 1).any())):
        raise RuntimeError(
            "binary_cross_entropy(): all elements of input should be between 0 and 1"
        )
    tiny = 1e-45 if input.dtype == tp.float32 else 1e-300
    log_x = tp.clamp(tp.log(tp.clamp(input, min=tiny)), min=-100.0)
    log_1mx = tp.clamp(tp.log(tp.clamp(1.0 - input, min=tiny)), min=-100.0)
    loss = -(target * log_x + (1.0 - target) * log_1mx)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """``binary_cross_entropy(sigmoid(input), target)`` in the numerically stable form
    ``(1-t)*x - l*logsigmoid(x)``, ``l = 1 + (pos_weight-1)*t``."""
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    _check_same_shape("binary_cross_entropy_with_logits", input, target)
    log_sig = -tp.softplus(-input)  # logsigmoid(x), stable for large |x|
    if pos_weight is not None:
        log_weight = (pos_weight - 1.0) * target + 1.0
        loss = (1.0 - target) * input - log_weight * log_sig
    else:
        loss = (1.0 - target) * input - log_sig
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)
