"""Attention suite: reference, fused and additive attention, forward and forward+backward,
over sequence lengths, with the kernel the fused path dispatched to.

Every path gets the key padding mask training gives the encoder's self-attention (a boolean
``(batch, 1, 1, T)``, see ``model.attention.padding_mask``): the mask decides which kernel
``scaled_dot_product_attention`` can use (flash takes none, memory-efficient takes one), so a
table timed without it would show a kernel training does not run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attncli.bench.flops import FWD_BWD_FLOP_FACTOR, attention_flops
from attncli.bench.timing import MEMORY_METHOD, measure, ops_called
from attncli.model.attention import (
    AdditiveScore,
    additive_attention,
    padding_mask,
    reference_attention,
)

MIB = 2**20
MASK = ("key padding, boolean (B, 1, 1, T) as in training's encoder; the sentences' real keys "
        "spread evenly from T down to 3/4 T (B = 1: T, no padding)")


# aten operators behind scaled_dot_product_attention -> the kernel's name in the table.
SDPA_KERNELS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


@dataclass(frozen=True)
class AttentionSizes:
    """Fixed batch x heads x head_dim, varying sequence length (self-attention, T = S).

    ``additive_cap_bytes`` bounds the (batch, heads, T, T, head_dim) tensor that additive
    attention materialises; longer lengths are skipped and the reason is shown.
    """

    batch: int
    heads: int
    head_dim: int
    lengths: tuple[int, ...]
    additive_cap_bytes: int

    @classmethod
    def for_device(cls, device: torch.device) -> AttentionSizes:
        if device.type == "cuda":
            return cls(4, 8, 64, tuple(2**i for i in range(6, 13)), 2 * 1024 * MIB)
        # CPU: batch 1 keeps every T x T tensor at 1024 within 16 MiB (bf16), small enough for
        # the C allocator to reuse between runs instead of page-faulting fresh memory each time.
        return cls(1, 8, 64, tuple(2**i for i in range(6, 11)), 32 * MIB)


def key_padding_mask(batch: int, length: int, device: torch.device) -> Tensor:
    """The mask training passes for a batch of `batch` sentences padded to `length`: boolean
    ``(batch, 1, 1, length)``, True on real keys. The sentences end evenly from the full length
    (the first, unpadded) down to 3/4 of it (the last), as in batches of similar lengths."""
    lengths = torch.tensor([length - i * length // (4 * max(batch - 1, 1)) for i in range(batch)],
                           device=device)
    return padding_mask(lengths, length)


def sdpa_kernel_used(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> str:
    """Which kernel the default ``scaled_dot_product_attention`` dispatch picks for these
    inputs, read from the aten operator the profiler saw."""
    with torch.no_grad():
        names = ops_called(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    found = [kernel for op, kernel in SDPA_KERNELS.items() if op in names]
    return found[0] if found else "unknown"


def sdpa_kernels_that_run(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> list[str]:
    """The backends that accept these inputs when each is the only one allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "memory-efficient":
                SDPBackend.EFFICIENT_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION,
                "math": SDPBackend.MATH}
    runs = []
    for name, backend in backends.items():
        try:
            with warnings.catch_warnings(), sdpa_kernel([backend]), torch.no_grad():
                warnings.simplefilter("ignore")  # "kernel not used because ..." explanations
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            runs.append(name)
        except (RuntimeError, NotImplementedError):
            pass
    return runs


# fn(q, k, v, mask) -> output
AttentionPath = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def _attention_paths(head_dim: int, device: torch.device, dtype: torch.dtype
                     ) -> dict[str, tuple[AttentionPath, list[Tensor]]]:
    """path name -> (fn(q, k, v, mask) -> output, the parameters it also takes gradients of)."""
    score = AdditiveScore(head_dim).to(device=device, dtype=dtype)
    # "fused" is torch's kernel itself: the model's fused_attention writes the computation out
    # on CPU in bf16 (see there), and this table is where that choice can be checked.
    return {
        "reference": (lambda q, k, v, mask: reference_attention(q, k, v, mask)[0], []),
        "fused": (lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                  []),
        "additive": (lambda q, k, v, mask: additive_attention(q, k, v, score, mask=mask)[0],
                     list(score.parameters())),
    }


def _forward_runner(path: AttentionPath, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor
                    ) -> Callable[[], object]:
    def run() -> None:
        with torch.no_grad():
            path(q, k, v, mask)
    return run


def _forward_backward_runner(path: AttentionPath, q: Tensor, k: Tensor, v: Tensor, *,
                             mask: Tensor, params: list[Tensor]) -> Callable[[], object]:
    inputs = [q, k, v, *params]
    grad_out = torch.randn_like(q)

    def run() -> None:
        torch.autograd.grad(path(q, k, v, mask), inputs, grad_out)  # no .grad accumulation
    return run


def _timed_mode(run: Callable[[], object], flops: float, *, device: torch.device, warmup: int,
                repeats: int) -> dict[str, Any]:
    """Timing + peak memory + TFLOP/s of one cell, or the reason it could not run."""
    try:
        timing = measure(run, warmup, repeats, device, memory=True)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"skipped": "out of memory"}
    return {**timing.to_json(), "tflops": flops / timing.median_s / 1e12}


def run_attention_suite(device: torch.device, dtype: torch.dtype, sizes: AttentionSizes, *,
                        warmup: int, repeats: int) -> dict[str, Any]:
    """Every path x length x {forward, forward+backward}; see `AttentionSizes`."""
    b, h, d = sizes.batch, sizes.heads, sizes.head_dim
    paths = _attention_paths(d, device, dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows: list[dict[str, Any]] = []
    kernels_that_run: list[str] = []
    for name, (path, params) in paths.items():
        for t in sizes.lengths:
            row: dict[str, Any] = {"path": name, "seq_len": t, "kernel": None}
            hidden_bytes = b * h * t * t * d * itemsize
            if name == "additive" and hidden_bytes > sizes.additive_cap_bytes:
                reason = (f"its (B, H, T, T, D) tanh input would take {hidden_bytes / MIB:,.0f} "
                          f"MiB, over the {sizes.additive_cap_bytes / MIB:,.0f} MiB cap")
                row["forward"] = row["forward_backward"] = {"skipped": reason}
                rows.append(row)
                continue
            q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True)
                       for _ in range(3))
            mask = key_padding_mask(b, t, device)
            if name == "fused":
                row["kernel"] = sdpa_kernel_used(q, k, v, mask)
                if not kernels_that_run:
                    kernels_that_run = sdpa_kernels_that_run(q, k, v, mask)
            flops = attention_flops(b, h, q_len=t, k_len=t, head_dim=d,
                                    additive=name == "additive")
            row["forward"] = _timed_mode(_forward_runner(path, q, k, v, mask=mask), flops,
                                         device=device, warmup=warmup, repeats=repeats)
            row["forward_backward"] = _timed_mode(
                _forward_backward_runner(path, q, k, v, mask=mask, params=params),
                FWD_BWD_FLOP_FACTOR * flops, device=device, warmup=warmup, repeats=repeats)
            rows.append(row)
    return {
        "batch": b, "heads": h, "head_dim": d, "lengths": list(sizes.lengths),
        "dtype": str(dtype).removeprefix("torch."), "mask": MASK,
        "additive_cap_bytes": sizes.additive_cap_bytes,
        "sdpa_kernels_that_run_alone": kernels_that_run,
        "flops_convention": "forward 4·B·H·T²·D (QKᵀ and AV; additive: wᵀtanh and AV, plus "
                            "its query and key projections 2·B·H·2T·D²); "
                            f"forward+backward {FWD_BWD_FLOP_FACTOR}x forward (backward = 2x "
                            "forward; the flash backward's recomputation of QKᵀ not counted)",
        "memory_method": MEMORY_METHOD[device.type],
        "rows": rows,
    }
