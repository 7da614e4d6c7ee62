"""The device: its name and its peak matrix throughput (for MFU)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attncli.bench.timing import measure
from attncli.core.device import device_name

# Dense bf16 tensor-core peaks from NVIDIA's data sheets (the sparsity figures halved) and the
# streaming multiprocessors (SMs) of the whole chip they are for, matched against
# torch.cuda.get_device_name(); the first entry whose words all occur wins.
BF16_DENSE_PEAKS: tuple[tuple[tuple[str, ...], float, int], ...] = (
    (("h100", "pcie"), 756e12, 114),
    (("h100", "nvl"), 835e12, 132),
    (("h100",), 989e12, 132),  # SXM5, reported as "NVIDIA H100 80GB HBM3"
    (("h200",), 989e12, 132),  # H200 and GH200
    (("a100",), 312e12, 108),
)


def _chip(name: str) -> tuple[float, int] | None:
    """(data-sheet dense bf16 FLOP/s, SMs) of the whole chip a GPU name belongs to."""
    lowered = name.lower()
    for words, peak, sms in BF16_DENSE_PEAKS:
        if all(w in lowered for w in words):
            return peak, sms
    return None


def spec_bf16_peak(name: str) -> float | None:
    """Data-sheet dense bf16 FLOP/s of the whole chip for a known GPU name, else None."""
    chip = _chip(name)
    return None if chip is None else chip[0]


def gpu_spec_peak(device: torch.device) -> tuple[float, str] | None:
    """(dense bf16 FLOP/s, where it comes from) of this GPU from the data sheet, else None.

    A MIG slice (a share of one chip's SMs, which CUDA shows as a device of its own, named
    "... MIG 3g.40gb") keeps the chip's name, but only its SMs compute: its peak is the chip's
    scaled by its SMs over the chip's, else its MFU would be divided by the whole chip's peak.
    The SM count is what tells, since a slice's name may or may not say MIG. A name that says
    MIG on an SM count the table cannot account for is measured instead (None).
    """
    name = device_name(device)
    chip = _chip(name)
    if chip is None:
        return None
    peak, chip_sms = chip
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    mig = re.search(r"\bMIG\b", name, re.IGNORECASE) is not None
    if sms < chip_sms:
        part = "this MIG slice" if mig else "this device"
        return (peak * sms / chip_sms,
                f"data sheet, dense bf16, scaled to {part}'s {sms} of the chip's {chip_sms} SMs")
    return None if mig else (peak, "data sheet, dense bf16")


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
        spec = gpu_spec_peak(device)
        if spec is not None:
            return spec
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    peak = measured_matmul_peak(device, dtype, warmup, repeats)
    return peak, f"measured {str(dtype).removeprefix('torch.')} matmul on this device"
