"""The training peer: torch.nn.Transformer with our sizes, driven by the same train_step."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attncli.core.config import ModelConfig
from attncli.model.layers import SinusoidalPositions
from attncli.model.loss import projected_cross_entropy


class TorchTransformerPeer(nn.Module):
    """``torch.nn.Transformer`` with our sizes and our embedding/output layers: the yardstick.

    Same d_model, heads, layers, feed-forward width, dropout (residual and feed-forward; the
    attention-weight dropout set to ours), norm placement (``norm_first`` for pre-norm), √d-
    scaled tied embeddings plus the same sinusoidal positions, and the same output projection
    with a bias: for pre-norm models the parameter count equals ours (post-norm: torch adds a
    final norm per stack). Masks as ours: key padding on source keys, causal decoder
    self-attention. Same ``forward(src, tgt_in)`` so `train_step` drives both.
    """

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        self.pad_id, self.d_model = pad_id, cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, cfg.d_model, padding_idx=pad_id)
        self.tgt_embed = (self.src_embed if cfg.ties_source
                          else nn.Embedding(tgt_vocab, cfg.d_model, padding_idx=pad_id))
        self.positions = SinusoidalPositions(cfg.d_model, cfg.max_positions)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor ... norm_first was True"
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(
                d_model=cfg.d_model, nhead=cfg.heads, num_encoder_layers=cfg.enc_layers,
                num_decoder_layers=cfg.dec_layers, dim_feedforward=cfg.ff_dim,
                dropout=cfg.dropout, activation="relu", batch_first=True,
                norm_first=cfg.norm == "pre",
            )
        for module in self.transformer.modules():
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = cfg.attention_dropout
        self.output_bias = nn.Parameter(torch.zeros(tgt_vocab))
        self.output = (None if cfg.ties_output
                       else nn.Linear(cfg.d_model, tgt_vocab, bias=False))
        for embedding in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(embedding.weight, mean=0.0, std=cfg.d_model**-0.5)
            with torch.no_grad():
                embedding.weight[pad_id].zero_()

    def _embed(self, embedding: nn.Embedding, tokens: Tensor) -> Tensor:
        x = embedding(tokens) * math.sqrt(self.d_model)
        return self.embed_dropout(x + self.positions(tokens.size(1)).to(x.dtype))

    @property
    def output_weight(self) -> Tensor:
        return self.tgt_embed.weight if self.output is None else self.output.weight

    def _hidden(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        src_pad = src == self.pad_id  # True = ignore (torch's convention, the reverse of ours)
        tgt_len = tgt_in.size(1)
        future = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=src.device).triu(1)
        return self.transformer(
            self._embed(self.src_embed, src), self._embed(self.tgt_embed, tgt_in),
            tgt_mask=future, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src (batch, src_len), tgt_in (batch, tgt_len) -> logits (batch, tgt_len, vocab)."""
        return F.linear(self._hidden(src, tgt_in), self.output_weight, self.output_bias)

    def summed_loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, *,
                    label_smoothing: float, compute_dtype: torch.dtype = torch.float32) -> Tensor:
        """The same fused projection + loss as ours, so the comparison is of the layers."""
        hidden = self._hidden(src, tgt_in)
        return projected_cross_entropy(hidden, self.output_weight, self.output_bias, tgt_out,
                                       ignore_index=self.pad_id, label_smoothing=label_smoothing,
                                       compute_dtype=compute_dtype)
