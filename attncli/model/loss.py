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

import torch
from torch import Tensor

CHUNK_ROWS = 256  # 256 x 8k fp32 logits = 8 MB: below glibc's mmap threshold, so reused
CUDA_CHUNK_ROWS = 4096  # large enough to fill a GPU, a fraction of the whole matrix


def chunk_rows(device: torch.device) -> int:
    return CUDA_CHUNK_ROWS if device.type == "cuda" else CHUNK_ROWS


def _chunk_loss_and_logit_grad(logits: Tensor, targets: Tensor, keep: Tensor, smoothing: float,
                               want_grad: bool) -> tuple[Tensor, Tensor | None]:
    """Summed loss of one chunk and, if wanted, d(loss)/d(logits) (fp32, in place of logits)."""
    vocab = logits.size(1)
    log_probs = torch.log_softmax(logits, dim=1)
    safe_targets = targets.where(keep, 0).unsqueeze(1)
    nll = -log_probs.gather(1, safe_targets).squeeze(1)
    loss_rows = (1.0 - smoothing) * nll
    if smoothing:
        loss_rows = loss_rows - smoothing * log_probs.mean(dim=1)
    loss = loss_rows.masked_fill(~keep, 0.0).sum()
    if not want_grad:
        return loss, None
    # d/dlogits of the smoothed loss: softmax - (1 - eps) * onehot(target) - eps / V
    grad = log_probs.exp_()
    if smoothing:
        grad.sub_(smoothing / vocab)
    grad.scatter_add_(1, safe_targets, grad.new_full(safe_targets.shape, smoothing - 1.0))
    grad.mul_(keep.unsqueeze(1))
    return loss, grad


def _chunked_loss(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                  ignore_index: int, smoothing: float, compute_dtype: torch.dtype,
                  want_grad: bool) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor] | None]:
    """Summed loss over row chunks and, if wanted, the gradients of hidden, weight and bias."""
    w = weight.to(compute_dtype)
    b = bias.to(compute_dtype)
    fp32 = {"dtype": torch.float32, "device": hidden.device}
    grads = None
    if want_grad:
        grads = (torch.empty(hidden.shape, **fp32), torch.zeros(weight.shape, **fp32),
                 torch.zeros(bias.shape, **fp32))
    total = torch.zeros((), **fp32)
    step = chunk_rows(hidden.device)
    for start in range(0, hidden.size(0), step):
        rows = slice(start, start + step)
        h = hidden[rows].to(compute_dtype)
        t = targets[rows]
        logits = torch.addmm(b, h, w.t()).float()
        loss, grad = _chunk_loss_and_logit_grad(logits, t, t != ignore_index, smoothing,
                                                want_grad)
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
        want_grad = any(ctx.needs_input_grad[:3])
        total, grads = _chunked_loss(hidden, weight, bias, targets, ignore_index, smoothing,
                                     compute_dtype, want_grad)
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


@torch.compiler.disable  # its chunk loop would make a graph per row count; eager is as fast
def projected_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                            ignore_index: int, label_smoothing: float = 0.0,
                            compute_dtype: torch.dtype = torch.float32) -> Tensor:
    """Summed label-smoothed cross-entropy of ``hidden @ weight.T + bias`` against ``targets``.

    hidden (..., d), weight (vocab, d), bias (vocab,), targets (...) -> scalar fp32. Positions
    whose target is ``ignore_index`` contribute nothing (neither loss nor gradient). Runs with
    autocast off: ``compute_dtype`` already says which precision the products use.
    """
    with torch.autocast(hidden.device.type, enabled=False):
        return _summed_loss(hidden, weight, bias, targets, ignore_index, label_smoothing,
                            compute_dtype)


def _summed_loss(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                 ignore_index: int, label_smoothing: float, compute_dtype: torch.dtype) -> Tensor:
    """With gradients off (validation), the loss alone: `needs_input_grad` is true for
    parameters in any grad mode, so the autograd function would still form every gradient."""
    args = (hidden.reshape(-1, hidden.size(-1)), weight, bias, targets.reshape(-1),
            ignore_index, label_smoothing, compute_dtype)
    if torch.is_grad_enabled():
        return _ProjectedCrossEntropy.apply(*args)
    return _chunked_loss(*args, want_grad=False)[0]
