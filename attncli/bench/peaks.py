"""The device: its name and its peak matrix throughput (for MFU)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from attncli.timing import measure

# Dense bf16 tensor-core peaks from NVIDIA's data sheets (the sparsity figures halved), matched
# against torch.cuda.get_device_name(); the first entry whose words all occur wins.
BF16_DENSE_PEAKS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("h100", "pcie"), 756e12),
    (("h100", "nvl"), 835e12),
    (("h100",), 989e12),  # SXM5, reported as "NVIDIA H100 80GB HBM3"
    (("h200",), 989e12),  # H200 and GH200
    (("a100",), 312e12),
)


def device_name(device: torch.device) -> str:
    """The GPU's marketing name, or the CPU model from /proc/cpuinfo where there is one."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def spec_bf16_peak(name: str) -> float | None:
    """Data-sheet dense bf16 FLOP/s for a known GPU name, else None."""
    lowered = name.lower()
    for words, peak in BF16_DENSE_PEAKS:
        if all(w in lowered for w in words):
            return peak
    return None


def _matmul_runner(a: Tensor, b: Tensor, out: Tensor) -> Callable[[], object]:
    return lambda: torch.matmul(a, b, out=out)


def measured_matmul_peak(device: torch.device, dtype: torch.dtype, warmup: int, repeats: int,
                         sizes: Sequence[int] | None = None) -> float:
    """Best square-matmul FLOP/s over a few sizes (median per size): the fallback peak."""
    sizes = sizes or ((4096, 8192) if device.type == "cuda" else (1024, 2048))
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)  # no allocation inside the timing
        timing = measure(_matmul_runner(a, b, out), max(warmup, 1), repeats, device)
        best = max(best, 2 * n**3 / timing.median_s)
    return best


def device_peak(device: torch.device, precision: str, warmup: int, repeats: int
                ) -> tuple[float, str]:
    """(peak FLOP/s, where it comes from) for MFU: the data sheet if known, else measured."""
    if device.type == "cuda" and precision == "bf16":
        spec = spec_bf16_peak(device_name(device))
        if spec is not None:
            return spec, "data sheet, dense bf16"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    peak = measured_matmul_peak(device, dtype, warmup, repeats)
    return peak, f"measured {str(dtype).removeprefix('torch.')} matmul on this device"
