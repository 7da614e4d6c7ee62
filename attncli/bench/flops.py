"""Model FLOP counts: what MFU divides by the device's peak."""

from __future__ import annotations

from attncli.core.config import ModelConfig
from attncli.core.text import PAD_ID
from attncli.data.batching import Batch

FWD_BWD_FLOP_FACTOR = 3  # backward = 2 x forward (dQ, dK from dS; dV, dP from dO)


def attention_flops(batch: int, heads: int, q_len: int, k_len: int, head_dim: int,
                    additive: bool = False) -> float:
    """Forward FLOPs of QKᵀ and AV: 2 matmuls x 2 FLOPs per multiply-add = 4·B·H·T·S·D.

    Additive attention: wᵀ·tanh(·) over the T·S·D hidden tensor and AV counted the same way,
    plus its own projections of the queries and keys, W_q q and W_k k: 2·B·H·(T+S)·D² (half
    the total at T = S = 64 with D = 64); its elementwise add and tanh are not counted, and
    softmax never is.
    """
    flops = 4.0 * batch * heads * q_len * k_len * head_dim
    if additive:
        flops += 2.0 * batch * heads * (q_len + k_len) * head_dim * head_dim
    return flops


def seq2seq_forward_flops(cfg: ModelConfig, vocab: int, batch: Batch) -> float:
    """Forward model FLOPs of one batch: matrix multiplies only, 2 FLOPs per multiply-add.

    Per real (non-pad) token, with d = d_model, f = ff_dim, V = vocab:
      source token, per encoder layer: Q/K/V/out projections 4d², feed-forward 2df;
      target token, per decoder layer: self Q/K/V/out 4d², cross Q/out 2d², feed-forward 2df;
      source token, per decoder layer: cross K/V 2d² (computed once per sentence);
      target token: output projection dV (tied or not: it is a real matmul).
    Attention, per sentence (QKᵀ and AV, 2·d multiply-adds per query-key pair): S² per encoder
    layer, T² (the full square, causal half not subtracted) and T·S per decoder layer.
    Additive scoring (``model.scoring: additive``) adds its per-head projections of queries
    and keys, head_dim² each per head (d²/heads a position): 2S per encoder layer, 2T + T + S
    per decoder layer (self, then cross); its wᵀtanh costs what QKᵀ would.
    Padding is not counted: compute spent on it lowers MFU, as it should. Embedding lookups,
    norms, softmax and biases are left out. A training step is 3 x this (backward = 2 x).
    """
    d, f = cfg.d_model, cfg.ff_dim
    additive = d * d // cfg.heads if cfg.scoring == "additive" else 0
    src_lens = (batch.src != PAD_ID).sum(dim=1).tolist()
    tgt_lens = (batch.tgt_out != PAD_ID).sum(dim=1).tolist()
    macs = 0
    for s, t in zip(src_lens, tgt_lens, strict=True):
        macs += cfg.enc_layers * (s * (4 * d * d + 2 * d * f) + 2 * s * s * d
                                  + 2 * s * additive)
        macs += cfg.dec_layers * (t * (6 * d * d + 2 * d * f) + s * 2 * d * d
                                  + 2 * t * t * d + 2 * t * s * d + (3 * t + s) * additive)
        macs += t * d * vocab
    return 2.0 * macs
