"""Attention, spelled out.

Shapes used throughout (the Annotated Transformer's habit: say the shape where it changes):

    batch     sentences in the batch                       B
    heads     attention heads                              H
    tgt_len   query positions (decoder side, or encoder)   T
    src_len   key/value positions                          S
    head_dim  d_model // heads                             D

A *mask* here is always boolean with ``True`` = "may attend", broadcastable to the score
tensor ``(batch, heads, tgt_len, src_len)``. Two kinds are combined:

* padding mask: which keys are real tokens, from valid lengths or a boolean key mask;
* causal mask: query i may look at keys 0..i only (decoder self-attention).

Two paths compute the same thing:

* ``reference_attention``: ``softmax(Q Kᵀ / √d_k + mask) V`` written out, returning the weights
  (for heatmaps, for gradcheck, for teaching);
* ``fused_attention``: ``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-
  efficient kernels), used for speed whenever nobody asks for the weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attncli.model.kv_cache import KVCache

# --------------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------------


def padding_mask(key_mask: Tensor, src_len: int | None = None) -> Tensor:
    """Key padding mask ``(batch, 1, 1, src_len)`` from valid lengths or a boolean key mask.

    ``key_mask`` is either valid lengths ``(batch,)`` (integer) or ``(batch, src_len)`` booleans
    with True on real tokens. ``src_len`` is required for lengths.
    """
    if key_mask.dtype == torch.bool:
        keep = key_mask  # (batch, src_len)
    else:
        if src_len is None:
            raise ValueError("src_len is needed to turn valid lengths into a mask")
        positions = torch.arange(src_len, device=key_mask.device)  # (src_len,)
        keep = positions[None, :] < key_mask[:, None]  # (batch, src_len)
    return keep[:, None, None, :]  # (batch, 1, 1, src_len)


def causal_mask(tgt_len: int, src_len: int | None = None, device=None) -> Tensor:
    """Lower-triangular mask ``(1, 1, tgt_len, src_len)``: query i sees keys up to its position.

    With a key/value cache the queries are the *last* ``tgt_len`` of ``src_len`` positions, so
    the diagonal is shifted by ``src_len - tgt_len``.
    """
    src_len = tgt_len if src_len is None else src_len
    offset = src_len - tgt_len
    keep = torch.ones(tgt_len, src_len, dtype=torch.bool, device=device).tril(diagonal=offset)
    return keep[None, None]  # (1, 1, tgt_len, src_len)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are present (None when none is)."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def masked_softmax(
    scores: Tensor,
    key_mask: Tensor | None = None,
    causal: bool = False,
    mask: Tensor | None = None,
) -> Tensor:
    """Softmax over the last axis where masked keys get weight exactly 0.

    scores:   (batch, heads, tgt_len, src_len)
    key_mask: valid lengths (batch,) or boolean (batch, src_len), True = real token
    causal:   also hide future keys (query i sees keys <= i, aligned to the last position)
    mask:     any extra boolean mask broadcastable to scores, True = keep
    returns:  (batch, heads, tgt_len, src_len); a row whose keys are all masked is all zeros.
    """
    tgt_len, src_len = scores.shape[-2:]
    keep = combine_masks(
        padding_mask(key_mask, src_len) if key_mask is not None else None,
        causal_mask(tgt_len, src_len, scores.device) if causal else None,
        mask,
    )
    if keep is None:
        return torch.softmax(scores, dim=-1)
    # A large finite negative instead of -inf: a fully masked row then gives a uniform softmax
    # (not NaN), which the final `where` turns into zeros; gradients stay finite too.
    very_negative = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(~keep, very_negative), dim=-1)
    return torch.where(keep, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))


# --------------------------------------------------------------------------------------------
# Scaled dot-product attention: reference and fused
# --------------------------------------------------------------------------------------------


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """``softmax(Q Kᵀ / √d_k + mask) V`` written out; returns (output, weights).

    q: (batch, heads, tgt_len, head_dim)   k, v: (batch, heads, src_len, head_dim)
    mask: boolean, broadcastable to (batch, heads, tgt_len, src_len), True = keep
    returns output (batch, heads, tgt_len, head_dim), weights (batch, heads, tgt_len, src_len)
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, tgt_len, src_len)
    weights = masked_softmax(scores, mask=mask)
    dropped = F.dropout(weights, p=dropout_p, training=training) if dropout_p > 0 else weights
    return dropped @ v, weights  # (batch, heads, tgt_len, head_dim)


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """The same computation through ``scaled_dot_product_attention`` (no weights returned).

    ``causal=True`` with ``mask=None`` lets the kernel skip the mask tensor entirely (fastest);
    otherwise pass the combined boolean mask. Shapes as in ``reference_attention``.

    On CPU in bf16/fp16 the computation is written out instead: torch's CPU flash kernels in
    half precision were slower at translation lengths (benchmarks/MEASUREMENTS.md).
    """
    if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
        if causal:
            mask = combine_masks(mask, causal_mask(q.size(-2), k.size(-2), q.device))
        return reference_attention(q, k, v, mask, dropout_p=dropout_p, training=training)[0]
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        dropout_p=dropout_p if training else 0.0,
        is_causal=causal and mask is None,
    )


class AdditiveScore(nn.Module):
    """Bahdanau scoring ``wᵀ tanh(W_q q + W_k k)`` per head.

    q: (batch, heads, tgt_len, head_dim), k: (batch, heads, src_len, head_dim)
    returns scores (batch, heads, tgt_len, src_len). Memory grows as T·S·head_dim: it is for
    study and small models, not speed.
    """

    def __init__(self, head_dim: int):
        super().__init__()
        self.w_q = nn.Linear(head_dim, head_dim, bias=False)
        self.w_k = nn.Linear(head_dim, head_dim, bias=True)
        self.w = nn.Linear(head_dim, 1, bias=False)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        hidden = torch.tanh(
            self.w_q(q)[:, :, :, None, :] + self.w_k(k)[:, :, None, :, :]
        )  # (batch, heads, tgt_len, src_len, head_dim)
        return self.w(hidden).squeeze(-1)  # (batch, heads, tgt_len, src_len)


def additive_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score: AdditiveScore,
    *,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """Additive attention: Bahdanau scores, then the same masked softmax and weighted sum."""
    weights = masked_softmax(score(q, k), mask=mask)  # (batch, heads, tgt_len, src_len)
    dropped = F.dropout(weights, p=dropout_p, training=training) if dropout_p > 0 else weights
    return dropped @ v, weights


# --------------------------------------------------------------------------------------------
# Multi-head attention with a key/value cache
# --------------------------------------------------------------------------------------------


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(batch, len, d_model) -> (batch, heads, len, head_dim)."""
    batch, length, d_model = x.shape
    return x.view(batch, length, heads, d_model // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(batch, heads, len, head_dim) -> (batch, len, d_model); inverse of ``split_heads``."""
    batch, heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * head_dim)


def group_queries(q: Tensor, kv_rows: int) -> Tensor:
    """(kv_rows * g, heads, T, head_dim) -> (kv_rows, heads, g * T, head_dim): the queries of
    the ``g`` consecutive rows that share one row of keys/values become one row of queries.

    Beam search keeps one row of encoder keys/values per sentence and ``beam`` decoder rows for
    it, so cross-attention reads each sentence's keys/values once, not once per beam.
    """
    rows, heads, length, head_dim = q.shape
    group = rows // kv_rows
    return q.view(kv_rows, group, heads, length, head_dim).transpose(1, 2).reshape(
        kv_rows, heads, group * length, head_dim)


def ungroup_rows(x: Tensor, group: int) -> Tensor:
    """Inverse of ``group_queries`` for its result's rows: (n, heads, g * T, X) -> (n * g,
    heads, T, X), X being head_dim (the output) or src_len (the weights)."""
    n, heads, grouped, last = x.shape
    length = grouped // group
    return x.view(n, heads, group, length, last).transpose(1, 2).reshape(
        n * group, heads, length, last)


class MultiHeadAttention(nn.Module):
    """Multi-head attention for the three places a Transformer uses it.

    * encoder self-attention: ``kind="self"``, padding mask on keys;
    * decoder self-attention: ``kind="self"``, ``causal=True``;
    * encoder-decoder cross-attention: ``kind="cross"``, keys/values from the encoder output.

    Self-attention projects Q, K, V with one matrix (one GEMM); cross-attention projects Q from
    the decoder and K, V from the encoder (computed once per source when a cache is given).
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        kind: str = "self",
        *,
        dropout: float = 0.0,
        impl: str = "fused",
        scoring: str = "dot",
    ):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"heads ({heads}) must divide d_model ({d_model})")
        if kind not in ("self", "cross"):
            raise ValueError(f"kind must be 'self' or 'cross', not {kind!r}")
        self.heads, self.kind, self.dropout, self.impl = heads, kind, dropout, impl
        if kind == "self":
            self.qkv = nn.Linear(d_model, 3 * d_model)
        else:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.additive = AdditiveScore(d_model // heads) if scoring == "additive" else None

    def _project(
        self, x: Tensor, memory: Tensor | None, cache: KVCache | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (batch, heads, tgt_len, head_dim) and keys/values (..., src_len, head_dim)."""
        if self.kind == "self":
            q, k, v = self.qkv(x).chunk(3, dim=-1)  # 3 x (batch, tgt_len, d_model)
            q, k, v = (split_heads(t, self.heads) for t in (q, k, v))
            if cache is not None:  # written after the earlier keys/values, in place
                k, v = cache.append(k, v)  # (batch, heads, past + tgt_len, head_dim) views
            return q, k, v
        q = split_heads(self.q(x), self.heads)
        if cache is not None and cache.k is not None:  # encoder keys/values already projected
            return q, cache.k, cache.v
        k, v = (split_heads(t, self.heads) for t in self.kv(memory).chunk(2, dim=-1))
        if cache is not None:
            cache.set(k, v)
        return q, k, v

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        key_mask: Tensor | None = None,
        *,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` to itself (self) or to ``memory`` (cross).

        x:        (batch, tgt_len, d_model)
        memory:   (batch / g, src_len, d_model), cross-attention only: each of its rows serves
                  g consecutive rows of ``x`` (g = 1 but in beam search, where g = beam)
        key_mask: (batch / g, 1, 1, src_len) boolean, True = real key (see ``padding_mask``)
        returns   (batch, tgt_len, d_model) and, if asked or on the reference path, the weights
                  (batch, heads, tgt_len, src_len)
        """
        q, k, v = self._project(x, memory, cache)
        if q.size(0) % k.size(0):
            raise ValueError(f"{q.size(0)} query rows cannot share {k.size(0)} key rows")
        group = q.size(0) // k.size(0)  # > 1: beams sharing their sentence's keys/values
        if group > 1:
            q = group_queries(q, k.size(0))
        tgt_len, src_len = q.size(2), k.size(2)
        dropout_p = self.dropout if self.training else 0.0
        # A single query at the end of the cache may see every cached key: no causal mask needed.
        causal = causal and tgt_len > 1
        if self.additive is None and self.impl == "fused" and not need_weights:
            mask = key_mask
            if causal and (mask is not None or tgt_len != src_len):
                mask = combine_masks(mask, causal_mask(tgt_len, src_len, x.device))
            out = fused_attention(q, k, v, mask, causal=causal, dropout_p=dropout_p,
                                  training=self.training)
            weights = None
        else:
            mask = combine_masks(
                key_mask, causal_mask(tgt_len, src_len, x.device) if causal else None
            )
            if self.additive is not None:
                out, weights = additive_attention(
                    q, k, v, self.additive, mask=mask, dropout_p=dropout_p, training=self.training
                )
            else:
                out, weights = reference_attention(q, k, v, mask, dropout_p=dropout_p,
                                                   training=self.training)
        if group > 1:
            out = ungroup_rows(out, group)
            weights = None if weights is None else ungroup_rows(weights, group)
        return self.out(merge_heads(out)), weights  # (batch, tgt_len, d_model)
