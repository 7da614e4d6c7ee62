"""The encoder-decoder Transformer, built from a `ModelConfig`.

    src tokens (batch, src_len) ─► embed·√d + positions ─► N × EncoderLayer ─► memory
    tgt tokens (batch, tgt_len) ─► embed·√d + positions ─► M × DecoderLayer(memory) ─► logits

``decode`` takes a ``DecoderCache`` for incremental decoding: each call then feeds only the new
target positions, and cross-attention keys/values are computed once per source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attncli.core.config import ModelConfig
from attncli.model.attention import padding_mask
from attncli.model.dropout import Dropout
from attncli.model.kv_cache import KVCache
from attncli.model.layers import DecoderLayer, EncoderLayer, LayerCache, SinusoidalPositions
from attncli.model.loss import projected_cross_entropy


@dataclass
class DecoderCache:
    """Per-layer key/value caches plus how many target positions were decoded so far."""

    layers: list[LayerCache]
    length: int = 0

    @classmethod
    def empty(cls, num_layers: int, rows: int = 0, positions: int = 0) -> DecoderCache:
        """Caches whose self-attention buffers are allocated (at the first step) for ``rows``
        rows and ``positions`` target positions: enough for a whole search, never grown."""
        return cls([LayerCache(KVCache(rows, positions), KVCache()) for _ in range(num_layers)])


@dataclass
class DecoderOutput:
    """Logits (batch, tgt_len, vocab) and, when asked, cross-attention weights per layer."""

    logits: Tensor
    cross_attention: list[Tensor] = field(default_factory=list)  # (batch, heads, tgt, src) each


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer (Vaswani et al. 2017) with pre- or post-norm blocks."""

    # The part of the model (what `train.freeze` names) each attribute's parameters belong to.
    # A tied output projection is the target embedding, and so one of the embeddings.
    PARTS = {"src_embed": "embeddings", "tgt_embed": "embeddings",
             "encoder_layers": "encoder", "encoder_norm": "encoder",
             "decoder_layers": "decoder", "decoder_norm": "decoder",
             "output_bias": "decoder", "output": "decoder"}

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        if cfg.ties_source and src_vocab != tgt_vocab:
            raise ValueError("tied embeddings need one joint vocabulary")
        self.cfg, self.pad_id, self.d_model = cfg, pad_id, cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, cfg.d_model, padding_idx=pad_id)
        self.tgt_embed = (
            self.src_embed
            if cfg.ties_source
            else nn.Embedding(tgt_vocab, cfg.d_model, padding_idx=pad_id)
        )
        self.positions = SinusoidalPositions(cfg.d_model, cfg.max_positions)
        self.embed_dropout = Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        # Pre-norm leaves the residual stream un-normalised: one final norm per stack.
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.output_bias = nn.Parameter(torch.zeros(tgt_vocab))
        self.output = None if cfg.ties_output else nn.Linear(cfg.d_model, tgt_vocab, bias=False)
        # The training loss's function, an attribute so that a compiled run can keep it eager
        # (training/step.py `compile_loss`) without every process importing the compiler.
        self.cross_entropy = projected_cross_entropy
        self._init_weights()

    def _init_weights(self) -> None:
        """Xavier-uniform matrices, zero biases, N(0, d^-1/2) embeddings (pad row zero)."""
        for name, p in self.named_parameters():
            if "embed" in name:
                nn.init.normal_(p, mean=0.0, std=self.d_model**-0.5)
                with torch.no_grad():
                    p[self.pad_id].zero_()
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def part_parameters(self, part: str) -> list[nn.Parameter]:
        """The parameters of one part (embeddings, encoder or decoder: `PARTS`), a tied
        matrix once."""
        return [p for name, p in self.named_parameters() if self.PARTS[name.split(".")[0]] == part]

    def num_parameters(self) -> int:
        """Trainable parameters, shared embeddings counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def _embed(self, embedding: nn.Embedding, tokens: Tensor, offset: int = 0) -> Tensor:
        """tokens (batch, len) -> (batch, len, d_model): scaled embedding + positions."""
        x = embedding(tokens) * math.sqrt(self.d_model)
        return self.embed_dropout(x + self.positions(tokens.size(1), offset).to(x.dtype))

    def source_mask(self, src: Tensor) -> Tensor:
        """(batch, src_len) tokens -> (batch, 1, 1, src_len) boolean, True on real tokens."""
        return padding_mask(src != self.pad_id)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (batch, src_len) -> memory (batch, src_len, d_model), mask (batch, 1, 1, src_len)."""
        src_mask = self.source_mask(src)
        x = self._embed(self.src_embed, src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x), src_mask

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: DecoderCache | None = None,
        *,
        need_weights: bool = False,
    ) -> DecoderOutput:
        """tgt (batch, tgt_len) target prefix (starting with BOS) -> logits (batch, tgt_len, V).

        With ``cache``, ``tgt`` holds only the positions not decoded yet (usually one) and the
        cache grows by ``tgt_len``.
        """
        hidden, weights = self._decoder_states(tgt, memory, src_mask, cache,
                                               need_weights=need_weights)
        return DecoderOutput(self.project(hidden), weights)

    def _decoder_states(self, tgt: Tensor, memory: Tensor, src_mask: Tensor,
                        cache: DecoderCache | None = None, *, need_weights: bool = False
                        ) -> tuple[Tensor, list[Tensor]]:
        """The decoder stack up to (not including) the output projection."""
        offset = cache.length if cache is not None else 0
        x = self._embed(self.tgt_embed, tgt, offset)
        weights = []
        for i, layer in enumerate(self.decoder_layers):
            x, w = layer(x, memory, src_mask, cache=cache.layers[i] if cache else None,
                         need_weights=need_weights)
            if need_weights:
                weights.append(w)
        if cache is not None:
            cache.length += tgt.size(1)
        return self.decoder_norm(x), weights

    @property
    def output_weight(self) -> Tensor:
        """The (vocab, d_model) projection matrix: the target embedding when tied."""
        return self.tgt_embed.weight if self.output is None else self.output.weight

    def project(self, hidden: Tensor) -> Tensor:
        """(batch, len, d_model) -> (batch, len, vocab) logits (by the target embedding if tied)."""
        return F.linear(hidden, self.output_weight, self.output_bias)

    def new_cache(self, rows: int = 0, positions: int = 0) -> DecoderCache:
        """An empty cache; give the most rows and target positions a search will feed to
        allocate its buffers once (see ``KVCache``)."""
        return DecoderCache.empty(len(self.decoder_layers), rows, positions)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (batch, tgt_len, vocab) for training."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask).logits

    def summed_loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, *,
                    label_smoothing: float, compute_dtype: torch.dtype = torch.float32) -> Tensor:
        """Teacher-forced label-smoothed cross-entropy, summed over non-pad targets.

        Same value as cross-entropy on ``forward``'s logits, without materialising them all
        (see ``model/loss.py``). Call it inside the autocast context of the run.
        """
        memory, src_mask = self.encode(src)
        hidden, _ = self._decoder_states(tgt_in, memory, src_mask)
        return self.cross_entropy(hidden, self.output_weight, self.output_bias, tgt_out,
                                  ignore_index=self.pad_id, label_smoothing=label_smoothing,
                                  compute_dtype=compute_dtype)
