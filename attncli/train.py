"""The training loop: optimizer, schedule, precision, accumulation, validation, checkpoints.

The pieces a benchmark also needs (`make_optimizer`, `inverse_sqrt_lr`, `train_step`) come
first; `Trainer` and `train_command` below drive them over epochs and write the run folder.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attncli.batching import Batch
from attncli.config import TrainConfig
from attncli.device import autocast
from attncli.tokenizer import PAD_ID


def inverse_sqrt_lr(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to `peak_lr` over `warmup` updates, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if warmup and step < warmup:
        return peak_lr * step / warmup
    return peak_lr * math.sqrt(max(warmup, 1) / step)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; biases, norms and embeddings get no weight decay."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() > 1 and "embed" not in name else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, foreach=True)


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float
                  ) -> torch.Tensor:
    """Summed label-smoothed cross-entropy over non-pad targets.

    logits (batch, tgt_len, vocab), targets (batch, tgt_len) -> scalar (sum, not mean, so that
    accumulated batches are normalised by their total token count).
    """
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),
        targets.reshape(-1),
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
        reduction="sum",
    )


@dataclass
class StepStats:
    loss: float          # mean loss per target token over the update
    tokens: int          # target tokens in the update
    grad_norm: float     # before clipping


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[Batch],
               cfg: TrainConfig, lr: float, device: torch.device, precision: str) -> StepStats:
    """One optimizer update over `batches` (gradient accumulation when there are several).

    Loss is summed over all target tokens of the update and divided by their count, so an
    accumulated update equals one big batch.
    """
    model.train()
    tokens = sum(b.num_tgt_tokens for b in batches)
    total = 0.0
    for batch in batches:
        batch = batch.to(device)
        with autocast(device, precision):
            logits = model(batch.src, batch.tgt_in)
        loss = sequence_loss(logits, batch.tgt_out, cfg.label_smoothing) / tokens
        loss.backward()
        total += loss.item()
    if cfg.clip_norm:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm))
    else:
        grad_norm = float(torch.nn.utils.get_total_norm(
            [p.grad for p in model.parameters() if p.grad is not None]))
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(total, tokens, grad_norm)
