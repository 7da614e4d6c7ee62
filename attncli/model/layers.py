"""Transformer building blocks: positions, feed-forward, encoder and decoder layers.

Residual blocks come in two flavours (``norm``):

* ``pre``  (default): ``x + Dropout(Sublayer(LayerNorm(x)))`` — stable without a long warm-up;
* ``post`` (the paper's): ``LayerNorm(x + Dropout(Sublayer(x)))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attncli.core.config import ModelConfig
from attncli.model.attention import MultiHeadAttention
from attncli.model.dropout import Dropout
from attncli.model.kv_cache import KVCache


class SinusoidalPositions(nn.Module):
    """Fixed sine/cosine position signals (Vaswani et al. 2017, section 3.5).

    PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).
    """

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
        even = torch.arange(0, d_model, 2, dtype=torch.float32)  # 2i
        freq = torch.exp(even * (-math.log(1e4) / d_model))  # 1 / 10000^(2i/d)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(position * freq)
        table[:, 1::2] = torch.cos(position * freq[: d_model // 2])
        self.register_buffer("table", table, persistent=False)  # (max_len, d_model)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Signals for positions offset..offset+length-1: (length, d_model)."""
        if offset + length > self.table.size(0):
            raise ValueError(
                f"sequence of {offset + length} positions exceeds model.max_positions "
                f"({self.table.size(0)})"
            )
        return self.table[offset : offset + length]


class FeedForward(nn.Module):
    """Position-wise ``W2 · dropout(ReLU(W1 x))``: (batch, len, d_model) -> same."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, ff_dim), nn.ReLU(), Dropout(dropout), nn.Linear(ff_dim, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Residual(nn.Module):
    """Wraps one sublayer with layer norm, dropout and the skip connection (pre or post)."""

    def __init__(self, d_model: int, dropout: float, norm: str):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre = norm == "pre"

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def _attention(cfg: ModelConfig, kind: str) -> MultiHeadAttention:
    """One of a layer's attentions, shaped by the model config (`kind`: self or cross)."""
    return MultiHeadAttention(cfg.d_model, cfg.heads, kind, dropout=cfg.attention_dropout,
                              impl=cfg.attention, scoring=cfg.scoring)


class EncoderLayer(nn.Module):
    """Self-attention over the source (padding mask on keys), then feed-forward.

    Both layers are built from the `ModelConfig` itself: its eight settings a layer reads
    (widths, dropouts, norm, attention kind) travel as one object, none by position.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = _attention(cfg, "self")
        self.ff = FeedForward(cfg.d_model, cfg.ff_dim, cfg.dropout)
        self.attn_block = Residual(cfg.d_model, cfg.dropout, cfg.norm)
        self.ff_block = Residual(cfg.d_model, cfg.dropout, cfg.norm)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x: (batch, src_len, d_model), src_mask: (batch, 1, 1, src_len) -> same shape as x."""
        x = self.attn_block(x, lambda h: self.self_attn(h, key_mask=src_mask)[0])
        return self.ff_block(x, self.ff)


@dataclass
class LayerCache:
    """Cached keys/values of one decoder layer: its self-attention and its cross-attention."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder output, then feed-forward."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = _attention(cfg, "self")
        self.cross_attn = _attention(cfg, "cross")
        self.ff = FeedForward(cfg.d_model, cfg.ff_dim, cfg.dropout)
        self.self_block = Residual(cfg.d_model, cfg.dropout, cfg.norm)
        self.cross_block = Residual(cfg.d_model, cfg.dropout, cfg.norm)
        self.ff_block = Residual(cfg.d_model, cfg.dropout, cfg.norm)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        *,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (batch, tgt_len, d_model), memory: (batch, src_len, d_model).

        Returns the new x and, if asked, cross-attention weights (batch, heads, tgt_len, src_len).
        """
        x = self.self_block(
            x,
            lambda h: self.self_attn(
                h, causal=True, cache=cache.self_attn if cache else None
            )[0],
        )
        weights: list[Tensor | None] = [None]

        def cross(h: Tensor) -> Tensor:
            out, weights[0] = self.cross_attn(
                h, memory, key_mask=src_mask, cache=cache.cross_attn if cache else None,
                need_weights=need_weights,
            )
            return out

        x = self.cross_block(x, cross)
        return self.ff_block(x, self.ff), weights[0]
