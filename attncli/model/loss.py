"""Output projection fused with label-smoothed cross-entropy, computed in row chunks.

Why: the full logit matrix (batch tokens x vocabulary), its log-softmax and its gradient were
the largest cost of a CPU training step, each a fresh mmap paged in anew, and on a GPU they are
gigabytes at base.yaml's batch size (figures: benchmarks/MEASUREMENTS.md). Here the logits
exist one chunk of rows at a time, and the gradients for the hidden states, the projection
weight and the bias are formed in the same pass, so the backward pass only has to scale them.

Matches ``F.cross_entropy(hidden @ weight.T + bias, targets, ignore_index=..., label_smoothing=...,
reduction="sum")``; the matrix products run in ``compute_dtype`` (bf16 under mixed precision),
the softmax and every accumulation in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

CHUNK_ROWS = 256  # 256 x 8k fp32 logits = 8 MB: below glibc's mmap threshold, so reused
CUDA_CHUNK_ROWS = 4096  # large enough to fill a GPU, a fraction of the whole matrix
SCORED_ROWS_MULTIPLE = 64  # CPU: few distinct row counts, so few oneDNN kernel builds


def chunk_rows(device: torch.device) -> int:
    return CUDA_CHUNK_ROWS if device.type == "cuda" else CHUNK_ROWS


def drops_padding_rows(device: torch.device) -> bool:
    """Whether padding rows are removed before the loss (CPU) rather than masked (see below)."""
    return device.type == "cpu"


@dataclass(frozen=True)
class _Scoring:
    """How every chunk is scored, from the entry point down to the chunk loop: one object, so
    that two floats and a flag are never passed in the wrong order."""

    smoothing: float            # label smoothing
    compute_dtype: torch.dtype  # of the matrix products
    want_grad: bool             # also form the gradients of hidden, weight and bias


def _chunk_loss_and_logit_grad(logits: Tensor, targets: Tensor, keep: Tensor | None, *,
                               smoothing: float, want_grad: bool
                               ) -> tuple[Tensor, Tensor | None]:
    """Summed loss of one chunk and, if wanted, d(loss)/d(logits) (fp32, in place of logits).

    ``keep`` marks the rows that count; None when every row does (padding already removed).
    """
    vocab = logits.size(1)
    log_probs = torch.log_softmax(logits, dim=1)
    safe_targets = (targets if keep is None else targets.where(keep, 0)).unsqueeze(1)
    nll = -log_probs.gather(1, safe_targets).squeeze(1)
    loss_rows = (1.0 - smoothing) * nll
    if smoothing:
        loss_rows = loss_rows - smoothing * log_probs.mean(dim=1)
    loss = (loss_rows if keep is None else loss_rows.masked_fill(~keep, 0.0)).sum()
    if not want_grad:
        return loss, None
    # d/dlogits of the smoothed loss: softmax - (1 - eps) * onehot(target) - eps / V
    grad = log_probs.exp_()
    if smoothing:
        grad.sub_(smoothing / vocab)
    grad.scatter_add_(1, safe_targets, grad.new_full(safe_targets.shape, smoothing - 1.0))
    if keep is not None:
        grad.mul_(keep.unsqueeze(1))
    return loss, grad


def _chunked_loss(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, *,
                  ignore_index: int, scoring: _Scoring
                  ) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor] | None]:
    """Summed loss and, if wanted, the gradients of hidden, weight and bias.

    On CPU the scored rows are moved to the front and the padding rows after them are left out
    but for a few, so that the row count is a multiple of `SCORED_ROWS_MULTIPLE`: a padded batch
    is ~1/5 padding at pad_multiple 8, and oneDNN builds a bf16 kernel for every new row count.
    On CUDA that would need the row count on the host, a synchronisation per step, so there
    every row goes through and padding rows are masked.
    """
    keep = targets != ignore_index
    if not drops_padding_rows(hidden.device):
        return _loss_over_chunks(hidden, weight, bias, targets, scoring=scoring, keep=keep)
    scored = int(keep.sum())
    rows = min(targets.numel(), -(-scored // SCORED_ROWS_MULTIPLE) * SCORED_ROWS_MULTIPLE)
    order = torch.argsort(~keep, stable=True)[:rows]  # scored rows first, in their order
    total, grads = _loss_over_chunks(hidden[order], weight, bias, targets[order],
                                     scoring=scoring, keep=keep[order], kept_prefix=scored)
    if grads is None:
        return total, None
    grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32).index_copy_(0, order, grads[0])
    return total, (grad_hidden, grads[1], grads[2])


def _loss_over_chunks(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, *,
                      scoring: _Scoring, keep: Tensor, kept_prefix: int = 0
                      ) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor] | None]:
    """The row-chunk loop. ``keep`` marks the rows that count; the first ``kept_prefix`` rows
    are known to, so chunks within them skip the mask."""
    compute_dtype = scoring.compute_dtype
    w = weight.to(compute_dtype)
    b = bias.to(compute_dtype)
    fp32 = {"dtype": torch.float32, "device": hidden.device}
    grads = None
    if scoring.want_grad:
        grads = (torch.empty(hidden.shape, **fp32), torch.zeros(weight.shape, **fp32),
                 torch.zeros(bias.shape, **fp32))
    total = torch.zeros((), **fp32)
    step = chunk_rows(hidden.device)
    for start in range(0, hidden.size(0), step):
        rows = slice(start, start + step)
        h = hidden[rows].to(compute_dtype)
        logits = torch.addmm(b, h, w.t()).float()
        chunk_keep = None if start + step <= kept_prefix else keep[rows]
        loss, grad = _chunk_loss_and_logit_grad(logits, targets[rows], chunk_keep,
                                                smoothing=scoring.smoothing,
                                                want_grad=scoring.want_grad)
        total += loss
        if grads is not None:
            g = grad.to(compute_dtype)
            grads[0][rows] = g @ w
            grads[1].add_(g.t() @ h)
            grads[2].add_(grad.sum(dim=0))
    return total, grads


class _ProjectedCrossEntropy(torch.autograd.Function):
    """Forward computes the loss and all three gradients; backward scales them."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                ignore_index: int, smoothing: float, compute_dtype: torch.dtype) -> Tensor:
        # torch.autograd.Function.apply takes its arguments by position only: hence this
        # signature's length; they are named again from here on.
        scoring = _Scoring(smoothing=smoothing, compute_dtype=compute_dtype,
                           want_grad=any(ctx.needs_input_grad[:3]))
        total, grads = _chunked_loss(hidden, weight, bias, targets, ignore_index=ignore_index,
                                     scoring=scoring)
        if grads is not None:
            grad_hidden, grad_weight, grad_bias = grads
            ctx.save_for_backward(grad_hidden.to(hidden.dtype), grad_weight.to(weight.dtype),
                                  grad_bias.to(bias.dtype))
        return total

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return (grad_hidden * grad_output, grad_weight * grad_output, grad_bias * grad_output,
                None, None, None, None)


def projected_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, *,
                            ignore_index: int, label_smoothing: float = 0.0,
                            compute_dtype: torch.dtype = torch.float32) -> Tensor:
    """Summed label-smoothed cross-entropy of ``hidden @ weight.T + bias`` against ``targets``.

    hidden (..., d), weight (vocab, d), bias (vocab,), targets (...) -> scalar fp32. Positions
    whose target is ``ignore_index`` contribute nothing (neither loss nor gradient). Runs with
    autocast off: ``compute_dtype`` already says which precision the products use.
    """
    with torch.autocast(hidden.device.type, enabled=False):
        return _summed_loss(hidden, weight, bias, targets, ignore_index=ignore_index,
                            label_smoothing=label_smoothing, compute_dtype=compute_dtype)


def _summed_loss(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, *,
                 ignore_index: int, label_smoothing: float, compute_dtype: torch.dtype) -> Tensor:
    """With gradients off (validation), the loss alone: `needs_input_grad` is true for
    parameters in any grad mode, so the autograd function would still form every gradient."""
    rows, flat_targets = hidden.reshape(-1, hidden.size(-1)), targets.reshape(-1)
    if torch.is_grad_enabled():
        return _ProjectedCrossEntropy.apply(rows, weight, bias, flat_targets, ignore_index,
                                            label_smoothing, compute_dtype)
    scoring = _Scoring(smoothing=label_smoothing, compute_dtype=compute_dtype, want_grad=False)
    return _chunked_loss(rows, weight, bias, flat_targets, ignore_index=ignore_index,
                         scoring=scoring)[0]
