"""``MultiheadAttention`` (torch's ``nn.MultiheadAttention``)."""

from __future__ import annotations

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.nn import _functional_norm as FN, init
from tensorplay.nn.modules.linear import NonDynamicallyQuantizableLinear
from tensorplay.nn.modules.module import Module
from tensorplay.nn.parameter import Parameter

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """Multi-head attention: ``Concat(head_1, ..., head_h) @ out_proj``, each head
    ``softmax(q k^T / sqrt(head_dim)) v`` on its slice of the projected query/key/value.

    Parameters as torch, so its state dicts load: ``in_proj_weight`` ``(3E, E)`` (query,
    key, value rows packed) when ``kdim == vdim == embed_dim``, else ``q_proj_weight``
    ``(E, E)``, ``k_proj_weight`` ``(E, kdim)``, ``v_proj_weight`` ``(E, vdim)``;
    ``in_proj_bias`` ``(3E,)`` and ``out_proj`` (a Linear) biases if ``bias``; ``bias_k`` /
    ``bias_v`` ``(1, 1, E)`` if ``add_bias_kv``. Initialised like torch: xavier_uniform_
    projections, zero biases, xavier_normal_ ``bias_k`` / ``bias_v``.

    Inputs are ``(L, N, E)`` (``(N, L, E)`` if ``batch_first``) or unbatched ``(L, E)``;
    bool masks mark positions to IGNORE (True = masked out), float masks are added.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                f"and num_heads={num_heads} instead"
            )
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError(
                f"embed_dim must be divisible by num_heads, got embed_dim={embed_dim} and "
                f"num_heads={num_heads}"
            )
        kw = {"device": device, "dtype": dtype}
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(tp.empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(tp.empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(tp.empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(tp.empty(3 * embed_dim, embed_dim, **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(tp.empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(tp.empty(1, 1, embed_dim, **kw))
            self.bias_v = Parameter(tp.empty(1, 1, embed_dim, **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def _layer(self) -> str:
        return f"MultiheadAttention(embed_dim={self.embed_dim}, num_heads={self.num_heads})"

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, x, want in (
            ("query", query, self.embed_dim),
            ("key", key, self.kdim),
            ("value", value, self.vdim),
        ):
            if x.ndim not in (2, 3) or x.shape[-1] != want:
                layout = "(N, L, E)" if self.batch_first else "(L, N, E)"
                raise AssertionError(
                    f"{self._layer()}: expected {name} of shape {layout} or unbatched (L, E) "
                    f"with last dimension {want}, got shape {tuple(x.shape)}"
                    + ("" if name == "query" else f" (set {name[0]}dim= for another size)")
                )

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``(attn_output, attn_weights)``: output shaped like ``query``; weights
        ``(N, L, S)`` averaged over heads (``(N, num_heads, L, S)`` if not
        ``average_attn_weights``), or ``None`` unless ``need_weights``.

        ``key_padding_mask`` ``(N, S)``: True (or -inf) for keys to ignore. ``attn_mask``
        ``(L, S)`` or ``(N * num_heads, L, S)``: True (or -inf) where query ``i`` may not
        attend key ``j``. ``is_causal`` is a hint that ``attn_mask`` is the causal mask."""
        self._check_inputs(query, key, value)
        is_batched = query.ndim == 3
        key_padding_mask = FN._canonical_mask(
            key_padding_mask,
            "key_padding_mask",
            None if attn_mask is None else attn_mask.dtype,
            "attn_mask",
            query.dtype,
        )
        attn_mask = FN._canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, False)
        if self.batch_first and is_batched:
            # keep the identities (self-attention: q is k is v) the packed projection relies on
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        separate = not self._qkv_same_embed_dim
        out, weights = FN.multi_head_attention_forward(
            query,
            key,
            value,
            self.embed_dim,
            self.num_heads,
            self.in_proj_weight,
            self.in_proj_bias,
            self.bias_k,
            self.bias_v,
            self.add_zero_attn,
            self.dropout,
            self.out_proj.weight,
            self.out_proj.bias,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            use_separate_proj_weight=separate,
            q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )
        if self.batch_first and is_batched:
            return out.transpose(1, 0), weights
        return out, weights

    def merge_masks(
        self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, query: Tensor
    ) -> tuple[Tensor | None, int | None]:
        """Combine ``attn_mask`` ``(L, L)`` / ``(N*heads, L, L)`` and ``key_padding_mask``
        ``(N, L)`` for the fused path; returns ``(mask, type)``: type 1 for the padding mask
        alone, 2 for the attention mask expanded to ``(N, heads, L, L)`` (plus the padding
        mask if given), as torch."""
        mask_type: int | None = None
        merged: Tensor | None = None
        if key_padding_mask is not None:
            mask_type, merged = 1, key_padding_mask
        if attn_mask is not None:
            batch_size, seq_len, _ = tuple(query.shape)
            mask_type = 2
            if attn_mask.ndim == 3:
                expanded = attn_mask.reshape(batch_size, -1, seq_len, seq_len)
            else:
                expanded = attn_mask.reshape(1, 1, seq_len, seq_len).expand(
                    batch_size, self.num_heads, seq_len, seq_len
                )
            merged = expanded
            if key_padding_mask is not None:
                kpm = key_padding_mask.reshape(batch_size, 1, 1, seq_len).expand(
                    batch_size, self.num_heads, seq_len, seq_len
                )
                merged = expanded + kpm
        return merged, mask_type
