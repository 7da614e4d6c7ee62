"""One optimizer update: forward, loss, backward, clip, step.

Nothing here reads a value back from the device: the update's loss and gradient norm are
returned as device tensors (`StepStats`) for the loop to read in groups (see `figures.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attncli.core.config import TrainConfig
from attncli.core.device import autocast, compute_dtype
from attncli.data.batching import Batch
from attncli.training.distributed import without_gradient_sync


@dataclass
class StepStats:
    """One update's figures, left on the training device: reading one waits for the device to
    finish, so the loop reads them together at log steps."""

    loss: torch.Tensor       # this process's part of the update's mean loss per target token
    grad_norm: torch.Tensor  # of the update's whole gradient, before clipping
    tokens: int              # target tokens in the update (every process's batches)


@dataclass(frozen=True)
class UpdateShare:
    """What this process's batches are of an update that several processes share.

    `tokens`: the target tokens of the whole update (all processes' batches; None: the
    batches' own, one process's update); `processes`: how many share it (DistributedDataParallel
    averages their gradients); `counted=False`: this process's share is empty, its batch a
    stand-in with zero weight that must still join the gradient all-reduce. One object, so
    that the three never travel by position.
    """

    tokens: int | None = None
    processes: int = 1
    counted: bool = True


def train_step(loss_fn: nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[Batch],
               *, cfg: TrainConfig, lr: float, device: torch.device, precision: str,
               share: UpdateShare | None = None) -> StepStats:
    """One optimizer update over `batches` (gradient accumulation when there are several).

    `loss_fn(src, tgt_in, tgt_out, label_smoothing=..., compute_dtype=...)` is the summed loss
    (`SummedLoss`, wrapped in DistributedDataParallel with several processes). The loss is
    summed over the update's target tokens and divided by their count (`share.tokens`), so an
    accumulated update equals one big batch, and N processes sharing the batches equal one
    process accumulating them (DDP averages gradients, hence the `share.processes` factor).

    An update whose gradient is not finite (a NaN or inf loss makes it so) is skipped on the
    device: the weights and the optimizer state stay as they were.
    """
    loss_fn.train()
    share = share or UpdateShare()
    tokens = share.tokens or sum(b.num_tgt_tokens for b in batches)
    counted = share.counted
    weight = share.processes if counted else 0  # DDP divides the summed gradient by `processes`
    total = torch.zeros((), device=device)
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        with contextlib.nullcontext() if last else without_gradient_sync(loss_fn):
            batch = batch.to(device)
            with autocast(device, precision):
                summed = loss_fn(batch.src, batch.tgt_in, batch.tgt_out,
                                 label_smoothing=cfg.label_smoothing,
                                 compute_dtype=compute_dtype(precision))
            (summed * weight / tokens).backward()
        total += summed.detach().float() / tokens
    grad_norm = _clipped_grad_norm(list(loss_fn.parameters()), cfg.clip_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    step_unless_not_finite(optimizer, grad_norm)
    optimizer.zero_grad(set_to_none=True)
    return StepStats(total if counted else total.zero_(), grad_norm, tokens)


def _clipped_grad_norm(params: list[nn.Parameter], clip_norm: float | None) -> torch.Tensor:
    """The gradient's total norm before clipping; clipped to `clip_norm` when it is set."""
    if clip_norm:
        return torch.nn.utils.clip_grad_norm_(params, clip_norm)
    return torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])


def step_unless_not_finite(optimizer: torch.optim.Optimizer, grad_norm: torch.Tensor) -> None:
    """`optimizer.step()` when `grad_norm` is finite.

    A fused optimizer (CUDA) decides on the device through its `found_inf` input, so the host
    never waits for the GPU here; the `foreach` one (CPU) is told on the host, where reading the
    value costs nothing because nothing runs asynchronously.
    """
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = (~torch.isfinite(grad_norm)).float()
        optimizer.step()
        del optimizer.found_inf
    elif bool(torch.isfinite(grad_norm)):
        optimizer.step()


def compile_loss(model: nn.Module, backend: str = "inductor") -> None:
    """`torch.compile` what a training step calls (`summed_loss`, not `forward`).

    Batch shapes vary from batch to batch: the first shape compiles a static graph, the second
    a graph with dynamic lengths and batch size (torch's automatic dynamic shapes) that the
    others reuse. The chunked loss stays eager (see `model/loss.py`) and so does the CPU dropout
    mask trick (see `model/dropout.py`), since either would make a graph per shape. The loss is
    marked eager here rather than where it is defined: `torch.compiler.disable` imports
    torch._dynamo, most of a second that every translate, serve and eval paid for nothing.
    """
    model.cross_entropy = torch.compiler.disable(model.cross_entropy)
    model.summed_loss = torch.compile(model.summed_loss, backend=backend)
