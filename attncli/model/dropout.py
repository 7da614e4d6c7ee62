"""Dropout with a cheaper random mask on CPU.

Why: torch's CPU dropout draws one random number per element (``bernoulli_``), a large share
of a CPU training step (figures: benchmarks/MEASUREMENTS.md). Here each 32-bit draw of torch's
generator yields two independent 15-bit uniforms, and an element is kept when its 15 bits are
at or above ``round(p * 32768)``: the drop rate is ``p`` to within 1/65536. The generator is
torch's global one, so seeding and checkpointed RNG state still make runs repeatable. On CUDA
torch's fused kernel is already fast and is used as it is, and under `torch.compile` too (the
compiler fuses it; the mask trick would break its graph).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LOW_15_BITS = 0x7FFF


def keep_mask(shape: torch.Size, p: float) -> Tensor:
    """A boolean mask of `shape`, each element True with probability 1 - p (to 1/65536)."""
    count = shape.numel()
    words = torch.empty((count + 1) // 2, dtype=torch.int32).random_()  # 31 random bits each
    halves = words.view(torch.int16)[:count].view(shape)  # low half: 16 bits, high: 15
    return (halves & _LOW_15_BITS).ge(round(p * (_LOW_15_BITS + 1)))


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` (same scaling by 1/(1-p) in training, identity in eval)."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or torch.compiler.is_compiling():  # compiled: fused there
            return F.dropout(x, self.p, training=True)
        scale = keep_mask(x.shape, self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * scale

    def extra_repr(self) -> str:
        return f"p={self.p}"
