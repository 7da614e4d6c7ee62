"""The optimizer, and its settings again after a resume (the learning rate: `lr_schedule.py`)."""

from __future__ import annotations

import torch
from torch import nn

from attncli.core.config import TrainConfig


def use_fused_adamw(device: torch.device) -> bool:
    """The fused kernel (one pass over each parameter) on CUDA and CPU; `foreach` elsewhere.
    On CPU the foreach path makes a pass per operation and was ~3x slower (benchmarks/)."""
    return device.type in ("cuda", "cpu")


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; biases, norms and embeddings (the second group) get no weight decay."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() > 1 and "embed" not in name else no_decay).append(p)
    fused = use_fused_adamw(next(model.parameters()).device)
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": no_decay}], lr=cfg.lr,
                                  fused=fused or None, foreach=None if fused else True)
    apply_optimizer_settings(optimizer, cfg)
    return optimizer


def apply_optimizer_settings(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> None:
    """The config's betas and weight decay on the optimizer's two groups.

    Called again after a resume: the param groups loaded from a checkpoint carry the old
    settings, and a `--set train.betas=...` the resume accepted must win over them.
    """
    decay_group, no_decay_group = optimizer.param_groups
    for group in optimizer.param_groups:
        group["betas"] = tuple(cfg.betas)
    decay_group["weight_decay"], no_decay_group["weight_decay"] = cfg.weight_decay, 0.0
