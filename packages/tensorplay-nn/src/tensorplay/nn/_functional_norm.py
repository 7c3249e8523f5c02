"""Functional normalisation, attention, padding, ``one_hot`` and ``bilinear``
(re-exported by ``tensorplay.nn.functional``; names, signatures and numbers follow
``torch.nn.functional``).

Everything is composed from core ``tensorplay`` ops, so gradients come from core's autograd.
This file imports only core: ``functional.py`` re-exports it, so importing ``functional``
from here would be circular.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import tensorplay as tp
from tensorplay import Tensor

__all__ = [
    "batch_norm",
    "group_norm",
    "rms_norm",
    "scaled_dot_product_attention",
    "multi_head_attention_forward",
    "pad",
    "bilinear",
]

_NEG_INF = float("-inf")
_HALF = (tp.float16, tp.bfloat16)
# machine epsilon of the type the statistics are computed in (torch's "opmath" type:
# float32 for the half types), as torch's rms_norm uses when eps is None
_OPMATH_EPS = {tp.float32: 2.0**-23, tp.float64: 2.0**-52}


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _prod(sizes) -> int:
    n = 1
    for s in sizes:
        n *= int(s)
    return n


def _opmath(t: Tensor) -> Tensor:
    """``t`` in float32 if it is a half type, so sums of squares do not overflow or round."""
    return t.float() if t.dtype in _HALF else t


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    out = tp.matmul(x, w.t())
    return out if b is None else out + b


def _dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout (keep where ``rand >= p``, scale ``1/(1-p)``), as
    ``functional.dropout`` draws it."""
    if p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = tp.rand(*x.shape, dtype=x.dtype, device=x.device) >= p
    return x * (keep.to(x.dtype) * (1.0 / (1.0 - p)))


# --------------------------------------------------------------------------- batch_norm


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel (dim 1) of ``input`` ``(N, C, *)``.

    Training: with the batch statistics (biased variance); ``running_mean`` / ``running_var``
    (if given) are updated in place, ``r = (1 - momentum) * r + momentum * stat``, with the
    unbiased variance. Evaluation: with ``running_mean`` / ``running_var``. Then the
    per-channel affine ``weight`` / ``bias`` if given."""
    if (running_mean is None) != (running_var is None):
        raise ValueError(
            "batch_norm(): running_mean and running_var must either both be None or neither be None"
        )
    if input.ndim < 2:
        raise ValueError(
            f"batch_norm(): expected input of shape (N, C, *) with at least 2 dimensions, "
            f"got shape {_shape(input)}"
        )
    shape = _shape(input)
    c = shape[1]
    for name, t in (
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ):
        if t is not None and t.numel() != c:
            raise RuntimeError(
                f"batch_norm(): {name} should contain {c} elements not {t.numel()} "
                f"(one per channel of input shape {shape})"
            )
    per_channel = _prod(shape) // c if c else 0
    if training:
        if per_channel == 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {shape}"
            )
        if eps <= 0.0:
            raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    elif eps < 0.0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")
    if not training and running_mean is None:
        raise RuntimeError(
            "batch_norm(): running_mean must be defined in evaluation mode; pass the running "
            "statistics or training=True"
        )

    bshape = (1, c) + (1,) * (input.ndim - 2)
    if training:
        dims = (0, *range(2, input.ndim))
        x = _opmath(input)
        mean = x.mean(dim=dims, keepdim=True)
        var = tp.var(x, dim=dims, correction=0, keepdim=True)
        if running_mean is not None and per_channel > 0:
            with tp.no_grad():
                unbiased = var.detach().reshape(c) * (per_channel / (per_channel - 1))
                running_mean.mul_(1.0 - momentum).add_(
                    (mean.detach().reshape(c) * momentum).to(running_mean.dtype)
                )
                running_var.mul_(1.0 - momentum).add_((unbiased * momentum).to(running_var.dtype))
    else:
        x = input
        mean = running_mean.reshape(bshape)
        var = running_var.reshape(bshape)
    # out = x * scale + shift: two passes over the input instead of four
    scale = tp.rsqrt(var + eps)
    if weight is not None:
        scale = scale * weight.reshape(bshape)
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias.reshape(bshape)
    out = x * scale + shift
    return out.to(input.dtype) if out.dtype != input.dtype else out


# --------------------------------------------------------------------------- group_norm


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Split the channels (dim 1) of ``input`` ``(N, C, *)`` into ``num_groups`` groups and
    normalise each group of each sample (biased variance); then the per-channel affine."""
    if input.ndim < 2:
        raise RuntimeError(
            f"Expected at least 2 dimensions for input tensor but received {input.ndim}"
        )
    shape = _shape(input)
    n, c = shape[0], shape[1]
    if not isinstance(num_groups, int) or num_groups <= 0:
        raise ValueError(f"group_norm(): num_groups must be a positive int, got {num_groups!r}")
    if c % num_groups:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got "
            f"input of shape {list(shape)} and num_groups={num_groups}"
        )
    spatial = _prod(shape[2:])
    if (n * c // num_groups) * spatial == 1:
        raise ValueError(
            "Expected more than 1 value per channel when training, got input size "
            f"{[n * c // num_groups, num_groups, *shape[2:]]}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != c):
            raise RuntimeError(
                f"Expected {name} to be a vector of size equal to the number of channels in "
                f"input, but got {name} of shape {list(_shape(t))} and input of shape "
                f"{list(shape)}"
            )
    x = _opmath(input).reshape(n, num_groups, (c // num_groups) * spatial)
    mean = x.mean(dim=-1, keepdim=True)
    var = tp.var(x, dim=-1, correction=0, keepdim=True)
    out = ((x - mean) * tp.rsqrt(var + eps)).reshape(*shape)
    if out.dtype != input.dtype:
        out = out.to(input.dtype)
    bshape = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(bshape)
    if bias is not None:
        out = out + bias.reshape(bshape)
    return out


# --------------------------------------------------------------------------- rms_norm


def rms_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """``input / sqrt(mean(input**2) + eps) * weight`` over the trailing
    ``normalized_shape`` dims; ``eps=None`` is the machine epsilon of the compute type
    (float32 for half inputs), as torch."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(int(s) for s in normalized_shape)
    k = len(normalized_shape)
    shape = _shape(input)
    if k == 0 or input.ndim < k or shape[input.ndim - k :] != normalized_shape:
        raise RuntimeError(
            f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
            f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(shape)}"
        )
    if weight is not None and _shape(weight) != normalized_shape:
        raise RuntimeError(
            "Expected weight to be of same shape as normalized_shape, but got weight of shape "
            f"{list(_shape(weight))} and normalized_shape = {list(normalized_shape)}"
        )
    x = _opmath(input)
    if eps is None:
        eps = _OPMATH_EPS.get(x.dtype, 2.0**-23)
    dims = tuple(range(-k, 0))
    out = x * tp.rsqrt((x * x).mean(dim=dims, keepdim=True) + eps)
    if out.dtype != input.dtype:
        out = out.to(input.dtype)
    if weight is not None:
        out = out * weight
    return out


# --------------------------------------------------------------------------- attention


def _repeat_heads(t: Tensor, repeats: int) -> Tensor:
    """``t.repeat_interleave(repeats, dim=-3)`` (head ``h`` -> heads ``h*r .. h*r+r-1``)."""
    if repeats == 1:
        return t
    shape = _shape(t)
    lead, h, rest = shape[:-3], shape[-3], shape[-2:]
    expanded = t.unsqueeze(-3).expand(*lead, h, repeats, *rest)
    return expanded.reshape(*lead, h * repeats, *rest)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(query @ key.mT * scale + mask) @ value`` over ``(..., L, E)`` queries and
    ``(..., S, E)`` / ``(..., S, Ev)`` keys / values.

    ``attn_mask``: bool (True = may attend) or an additive float mask of the query's dtype,
    broadcastable to ``(..., L, S)``; ``is_causal``: query ``i`` attends keys ``j <= i``
    (top-left aligned, as torch). A row that may attend nothing gives zeros (torch's safe
    softmax). ``scale`` defaults to ``1/sqrt(E)``; ``dropout_p`` drops attention weights
    (always, as torch: pass 0.0 in eval). ``enable_gqa``: key/value may have fewer heads
    (dim -3), each shared by ``Hq / Hkv`` query heads."""
    if not (query.dtype == key.dtype == value.dtype):
        raise RuntimeError(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead."
        )
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError(
            "Expected query, key, and value to all be at least 2 dimensional, but got "
            f"query.dim: {query.ndim} key.dim: {key.ndim} and value.dim: {value.ndim} instead."
        )
    if attn_mask is not None and attn_mask.dtype not in (tp.bool, query.dtype):
        raise RuntimeError(
            "Expected attn_mask dtype to be bool or to match query dtype, but got "
            f"attn_mask.dtype: {attn_mask.dtype} and query.dtype: {query.dtype} instead."
        )
    if not 0.0 <= dropout_p <= 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise RuntimeError(
            "scaled_dot_product_attention(): Explicit attn_mask should not be set when "
            "is_causal=True; fold the causal mask into attn_mask or drop attn_mask"
        )
    e, length, src = query.shape[-1], query.shape[-2], key.shape[-2]
    if key.shape[-1] != e:
        raise RuntimeError(
            f"scaled_dot_product_attention(): key's last dimension ({key.shape[-1]}) must "
            f"equal query's ({e}); got query {_shape(query)}, key {_shape(key)}"
        )
    if value.shape[-2] != src:
        raise RuntimeError(
            f"scaled_dot_product_attention(): key and value must have the same sequence "
            f"length (dim -2); got key {_shape(key)}, value {_shape(value)}"
        )
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and value.ndim >= 3:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hq % hk or hq % hv:
            raise RuntimeError(
                "Number of heads in key and value must divide the number of heads in query; "
                f"got query heads {hq}, key heads {hk}, value heads {hv} (dim -3)"
            )
        key = _repeat_heads(key, hq // hk)
        value = _repeat_heads(value, hq // hv)

    scale_factor = 1.0 / math.sqrt(e) if scale is None else scale
    scores = tp.matmul(query * scale_factor, key.transpose(-2, -1))
    if is_causal:
        allowed = tp.tril(tp.ones(length, src, dtype=tp.bool, device=query.device))
        scores = tp.where(allowed, scores, _NEG_INF)
    elif attn_mask is not None:
        if attn_mask.dtype == tp.bool:
            scores = tp.where(attn_mask, scores, _NEG_INF)
        else:
            scores = scores + attn_mask
    if attn_mask is not None:
        # a row with nothing to attend to gives zeros (torch's _safe_softmax), not NaN; the
        # row is neutralised before softmax as well, or its NaN would reach the backward
        dead = scores.detach().amax(dim=-1, keepdim=True) == _NEG_INF
        attn = tp.where(dead, 0.0, tp.softmax(tp.where(dead, 0.0, scores), -1))
    else:
        attn = tp.softmax(scores, -1)
    if dropout_p > 0.0:
        attn = _dropout(attn, dropout_p)
    return tp.matmul(attn, value)


def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """Whether the MHA inputs are batched (3-D query); torch's shape errors otherwise."""
    if query.ndim == 3:
        if key.ndim != 3 or value.ndim != 3:
            raise AssertionError(
                "For batched (3-D) `query`, expected `key` and `value` to be 3-D"
                f" but found {key.ndim}-D and {value.ndim}-D tensors respectively"
            )
        if key_padding_mask is not None and key_padding_mask.ndim != 2:
            raise AssertionError(
                "For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D"
                f" but found {key_padding_mask.ndim}-D tensor instead"
            )
        if attn_mask is not None and attn_mask.ndim not in (2, 3):
            raise AssertionError(
                "For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D"
                f" but found {attn_mask.ndim}-D tensor instead"
            )
        return True
    if query.ndim == 2:
        if key.ndim != 2 or value.ndim != 2:
            raise AssertionError(
                "For unbatched (2-D) `query`, expected `key` and `value` to be 2-D"
                f" but found {key.ndim}-D and {value.ndim}-D tensors respectively"
            )
        if key_padding_mask is not None and key_padding_mask.ndim != 1:
            raise AssertionError(
                "For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D"
                f" but found {key_padding_mask.ndim}-D tensor instead"
            )
        if attn_mask is not None:
            if attn_mask.ndim not in (2, 3):
                raise AssertionError(
                    "For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D"
                    f" but found {attn_mask.ndim}-D tensor instead"
                )
            if attn_mask.ndim == 3:
                expected = (num_heads, query.shape[0], key.shape[0])
                if _shape(attn_mask) != expected:
                    raise AssertionError(
                        f"Expected `attn_mask` shape to be {expected} but got {_shape(attn_mask)}"
                    )
        return False
    raise AssertionError(
        "query should be unbatched 2D or batched 3D tensor but received "
        f"{query.ndim}-D query tensor"
    )


def _canonical_mask(
    mask: Tensor | None,
    mask_name: str,
    other_type,
    other_name: str,
    target_type,
    check_other: bool = True,
) -> Tensor | None:
    """A bool MHA mask (True = masked out) as an additive float mask (-inf where True)."""
    if mask is None:
        return None
    is_float = mask.dtype.is_floating_point
    if mask.dtype != tp.bool and not is_float:
        raise AssertionError(
            f"only bool and floating types of {mask_name} are supported, got {mask.dtype}"
        )
    if check_other and other_type is not None and mask.dtype != other_type:
        warnings.warn(
            f"Support for mismatched {mask_name} and {other_name} is deprecated. "
            "Use same type for both instead.",
            stacklevel=3,
        )
    if not is_float:
        mask = tp.zeros(*mask.shape, dtype=target_type, device=mask.device).masked_fill(
            mask, _NEG_INF
        )
    return mask


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Tensor | None,
    in_proj_bias: Tensor | None,
    bias_k: Tensor | None,
    bias_v: Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    training: bool = True,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None,
    k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
    static_k: Tensor | None = None,
    static_v: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """torch's ``F.multi_head_attention_forward`` (sequence-first ``(L, N, E)`` or
    unbatched ``(L, E)`` inputs). Masks: bool True = masked out (the opposite of
    ``scaled_dot_product_attention``), or additive float. Returns ``(output, weights)``;
    weights are ``None`` unless ``need_weights``, averaged over heads if
    ``average_attn_weights``."""
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)

    tgt_len, bsz, embed_dim = _shape(query)
    src_len = key.shape[0]
    key_padding_mask = _canonical_mask(
        key_padding_mask,
        "key_padding_mask",
        None if attn_mask is None else attn_mask.dtype,
        "attn_mask",
        query.dtype,
    )
    if is_causal and attn_mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
            "module method `generate_square_subsequent_mask` to create this mask."
        )
    if is_causal and key_padding_mask is None and not need_weights:
        # the hint alone drives SDPA's causal path
        attn_mask = None
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, False)
        if key_padding_mask is not None:
            # merged with the padding mask, the mask is no longer purely causal
            is_causal = False

    if embed_dim != embed_dim_to_check:
        raise AssertionError(
            f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}"
        )
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if _shape(key)[:2] != _shape(value)[:2]:
            raise AssertionError(
                f"key's sequence and batch dims {_shape(key)[:2]} do not match value's "
                f"{_shape(value)[:2]}"
            )
    elif _shape(key) != _shape(value):
        raise AssertionError(f"key shape {_shape(key)} does not match value shape {_shape(value)}")

    # ---- in-projection
    if not use_separate_proj_weight:
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    else:
        for name, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                raise AssertionError(
                    f"use_separate_proj_weight is True but {name}_proj_weight is None"
                )
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = in_proj_bias.chunk(3)
        eq, ek, ev = query.shape[-1], key.shape[-1], value.shape[-1]
        for what, w, want in (
            ("query", q_proj_weight, (eq, eq)),
            ("key", k_proj_weight, (eq, ek)),
            ("value", v_proj_weight, (eq, ev)),
        ):
            if _shape(w) != want:
                raise AssertionError(
                    f"expecting {what} weights shape of {want}, but got {_shape(w)}"
                )
        q = _linear(query, q_proj_weight, b_q)
        k = _linear(key, k_proj_weight, b_k)
        v = _linear(value, v_proj_weight, b_v)

    # ---- attention mask to 3-D
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if _shape(attn_mask) != (tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 2D attn_mask is {_shape(attn_mask)}, but should be "
                    f"{(tgt_len, src_len)}."
                )
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.ndim == 3:
            if _shape(attn_mask) != (bsz * num_heads, tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 3D attn_mask is {_shape(attn_mask)}, but should be "
                    f"{(bsz * num_heads, tgt_len, src_len)}."
                )
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")

    # ---- learned key/value bias appended to the sequence
    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = tp.cat([k, bias_k.expand(1, bsz, embed_dim)])
        v = tp.cat([v, bias_v.expand(1, bsz, embed_dim)])
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))
    elif bias_k is not None:
        raise AssertionError("bias_k is set but bias_v is None")
    elif bias_v is not None:
        raise AssertionError("bias_v is set but bias_k is None")

    # ---- heads into the batch: (N * num_heads, seq, head_dim)
    q = q.reshape(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    if static_k is None:
        k = k.reshape(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    else:
        _check_static("static_k", static_k, bsz * num_heads, head_dim)
        k = static_k
    if static_v is None:
        v = v.reshape(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    else:
        _check_static("static_v", static_v, bsz * num_heads, head_dim)
        v = static_v

    if add_zero_attn:
        zeros = (bsz * num_heads, 1, head_dim)
        k = tp.cat([k, tp.zeros(*zeros, dtype=k.dtype, device=k.device)], dim=1)
        v = tp.cat([v, tp.zeros(*zeros, dtype=v.dtype, device=v.device)], dim=1)
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))

    src_len = k.shape[1]
    if key_padding_mask is not None:
        if _shape(key_padding_mask) != (bsz, src_len):
            raise AssertionError(
                f"Expected key_padding_mask of shape {(bsz, src_len)} (batch, source length), "
                f"got {_shape(key_padding_mask)}"
            )
        key_padding_mask = (
            key_padding_mask.reshape(bsz, 1, 1, src_len)
            .expand(bsz, num_heads, 1, src_len)
            .reshape(bsz * num_heads, 1, src_len)
        )
        attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask

    if not training:
        dropout_p = 0.0

    if need_weights:
        q_scaled = q * math.sqrt(1.0 / float(head_dim))
        if is_causal and attn_mask is None:
            raise AssertionError("FIXME: is_causal not implemented for need_weights")
        weights = tp.bmm(q_scaled, k.transpose(-2, -1))
        if attn_mask is not None:
            weights = weights + attn_mask
        # unlike SDPA, a fully masked row gives NaN here, as in torch
        weights = tp.softmax(weights, -1)
        if dropout_p > 0.0:
            weights = _dropout(weights, dropout_p)
        out = tp.bmm(weights, v)
        out = out.transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = _linear(out, out_proj_weight, out_proj_bias)
        out = out.reshape(tgt_len, bsz, out.shape[1])
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(dim=1)
        if not is_batched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        return out, weights

    if attn_mask is not None:
        if attn_mask.shape[0] == 1 and attn_mask.ndim == 3:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.reshape(bsz, num_heads, -1, src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = _linear(out, out_proj_weight, out_proj_bias)
    out = out.reshape(tgt_len, bsz, out.shape[1])
    if not is_batched:
        out = out.squeeze(1)
    return out, None


def _check_static(name: str, t: Tensor, batch_heads: int, head_dim: int) -> None:
    if t.shape[0] != batch_heads:
        raise AssertionError(f"expecting {name}.size(0) of {batch_heads}, but got {t.shape[0]}")
    if t.shape[2] != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {t.shape[2]}")


def _in_projection_packed(
    q: Tensor, k: Tensor, v: Tensor, w: Tensor, b: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Project q, k, v with the packed ``(3E, E)`` weight; one matmul when they are the same
    tensor (self-attention), two when only k is v."""
    e = q.shape[-1]
    if k is v:
        if q is k:
            proj = _linear(q, w, b)
            return proj[..., :e], proj[..., e : 2 * e], proj[..., 2 * e :]
        w_q, w_kv = w[:e], w[e:]
        b_q, b_kv = (None, None) if b is None else (b[:e], b[e:])
        kv = _linear(k, w_kv, b_kv)
        return _linear(q, w_q, b_q), kv[..., :e], kv[..., e:]
    w_q, w_k, w_v = w.chunk(3)
    b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
    return _linear(q, w_q, b_q), _linear(k, w_k, b_k), _linear(v, w_v, b_v)


# --------------------------------------------------------------------------- pad

_INDEX_MODES = ("reflect", "replicate", "circular")


def pad(
    input: Tensor,
    pad: Sequence[int],
    mode: str = "constant",
    value: float | None = None,
) -> Tensor:
    """Pad the trailing dims: ``pad = (left_last, right_last, left_2nd_last, ...)``.

    ``constant`` (fill ``value``, default 0) works on any number of dims; negative pads crop.
    ``reflect`` (mirror, edge not repeated), ``replicate`` (repeat the edge) and ``circular``
    (wrap around) pad the last 1, 2 or 3 dims of a (batched) 2-4-D / 3-5-D input, as torch."""
    try:
        pads = [int(p) for p in pad]
        bad = any(isinstance(p, bool) or int(p) != p for p in pad)
    except (TypeError, ValueError):
        bad = True
    if bad:
        raise TypeError(f"pad(): argument 'pad' must be a sequence of ints, got {pad!r}")
    if len(pads) % 2:
        raise RuntimeError(f"Padding length must be divisible by 2, got pad={tuple(pads)}")
    k = len(pads) // 2
    if k > input.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension "
            f"but got padding length {len(pads)} and input of dimension {input.ndim}"
        )
    if mode == "constant":
        return _pad_constant(input, pads, 0.0 if value is None else value)
    if mode not in _INDEX_MODES:
        raise NotImplementedError(
            f"Unrecognised padding mode {mode}; supported modes are 'constant', 'reflect', "
            "'replicate' and 'circular'"
        )
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    if k not in (1, 2, 3) or input.ndim not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pads)} is not supported for {input.ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
        )
    out = input
    for i in range(k):
        dim = input.ndim - 1 - i
        out = _pad_index(out, dim, pads[2 * i], pads[2 * i + 1], mode)
    return out


def _pad_constant(input: Tensor, pads: list[int], value: float) -> Tensor:
    shape = _shape(input)
    out_shape = list(shape)
    src, dst = [slice(None)] * input.ndim, [slice(None)] * input.ndim
    for i in range(len(pads) // 2):
        dim = input.ndim - 1 - i
        left, right = pads[2 * i], pads[2 * i + 1]
        n = shape[dim]
        crop_l, crop_r = max(-left, 0), max(-right, 0)
        if crop_l + crop_r > n:
            raise RuntimeError(
                f"pad(): padding ({left}, {right}) of dimension {dim} crops "
                f"{crop_l + crop_r} elements from an input of size {n} (input shape {shape}); "
                "negative pads can remove at most the whole dimension"
            )
        out_shape[dim] = n + left + right
        src[dim] = slice(crop_l, n - crop_r)
        dst[dim] = slice(max(left, 0), max(left, 0) + n - crop_l - crop_r)
    if not any(pads):
        return input.clone()
    out = tp.full(tuple(out_shape), value, dtype=input.dtype, device=input.device)
    if out.numel():
        out[tuple(dst)] = input[tuple(src)]
    return out


def _pad_index(x: Tensor, dim: int, left: int, right: int, mode: str) -> Tensor:
    """Pad one dim by gathering source positions: output ``j`` reads input ``map(j - left)``."""
    n = x.shape[dim]
    if n == 0:
        raise RuntimeError(
            f"pad(mode={mode!r}): dimension {dim} of the input {_shape(x)} is empty; "
            f"{mode} padding needs values to copy from"
        )
    if left == 0 and right == 0:
        return x
    if mode == "reflect" and (left >= n or right >= n):
        raise RuntimeError(
            "Argument #4: Padding size should be less than the corresponding input dimension, "
            f"but got: padding ({left}, {right}) at dimension {dim} of input {list(_shape(x))}"
        )
    if n + left + right < 0:
        raise RuntimeError(
            f"pad(): padding ({left}, {right}) of dimension {dim} leaves a negative size "
            f"(input shape {_shape(x)})"
        )
    if mode == "circular":
        # wraps within the cropped region, as torch copies from the already-cropped output
        lo, hi = max(-left, 0), n - max(-right, 0)
        m = hi - lo
        if max(left, 0) > m or max(right, 0) > m or m <= 0:
            raise RuntimeError(
                "Padding value causes wrapping around more than once: padding "
                f"({left}, {right}) at dimension {dim} of input {list(_shape(x))}"
            )
        pos = tp.arange(-max(left, 0), m + max(right, 0), device=x.device)
        idx = tp.remainder(pos, m) + lo
    else:
        pos = tp.arange(-left, n + right, device=x.device)
        if mode == "reflect":
            idx = (n - 1) - tp.abs((n - 1) - tp.abs(pos))
        else:
            idx = tp.clamp(pos, 0, n - 1)
    return tp.index_select(x, dim, idx)


# --------------------------------------------------------------------------- one_hot


# --------------------------------------------------------------------------- bilinear


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]``;
    ``weight`` is ``(out_features, in1_features, in2_features)``."""
    if input1.ndim != input2.ndim:
        raise RuntimeError(
            f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}"
        )
    s1, s2 = _shape(input1), _shape(input2)
    for i in range(input1.ndim - 1):
        if s1[i] != s2[i]:
            raise RuntimeError(
                f"bilinear(): input batch dimensions do not match at dim {i}: got {s1[i]} "
                f"and {s2[i]}"
            )
    if weight.ndim != 3:
        raise RuntimeError(
            "bilinear(): weight must be 3-D (out_features, in1_features, in2_features), got "
            f"shape {_shape(weight)}"
        )
    out_f, in1, in2 = _shape(weight)
    if input1.ndim == 0 or s1[-1] != in1:
        got = s1[-1] if input1.ndim else "a 0-d tensor"
        raise RuntimeError(
            f"bilinear(): input1 size does not match weight size: got {got} but expected {in1}"
        )
    if s2[-1] != in2:
        raise RuntimeError(
            f"bilinear(): input2 size does not match weight size: got {s2[-1]} but expected {in2}"
        )
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_f):
        got = bias.shape[-1] if bias.ndim else "a 0-d tensor"
        raise RuntimeError(
            f"bilinear(): bias size does not match weight size: got {got} but expected {out_f}"
        )
    batch = s1[:-1]
    b = _prod(batch)
    x1 = input1.reshape(b, in1)
    x2 = input2.reshape(b, in2)
    # (B, in1) @ (in1, out*in2): contract i in one matmul, then j elementwise
    t = tp.matmul(x1, weight.permute(1, 0, 2).reshape(in1, out_f * in2))
    out = (t.reshape(b, out_f, in2) * x2.unsqueeze(1)).sum(dim=-1)
    if bias is not None:
        out = out + bias
    return out.reshape(*batch, out_f)
