"""A short, warmed-up matrix-product measurement of the machine a run starts on, for machine.json.

Why: the CPU's name, cores and flags did not tell apart two hosts that trained the same config
1.6 times apart (issue 63). What a host does with the run's own kind of product, at the run's
threads and precision, does; and it also shows a machine shared with other work, which is why
the figure is recorded with the note that a busy machine lowers it.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# Square products of a size that keeps a many-core CPU's threads, or a GPU, busy: a small
# product's time is mostly the threads' start and meeting, which other work on the machine
# stretches out of all proportion. Except bf16 on a CPU: one without native bf16 products
# emulates them, far too slowly for that size in a fraction of a second, so bf16 there starts
# at FIRST_SIZE and doubles while the next size's product would fit a quarter of the time
# measured.
FIRST_SIZE, CPU_SIZE, GPU_SIZE = 128, 1024, 4096
MEASURED_SECONDS = 0.2  # the start of every run pays it, so it stays a fraction of a second
BUSY_NOTE = "measured once at the session's start; other work on the machine lowers it"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _operands(size: int, device: torch.device,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(size)  # leaves the run's random stream alone
    a, b = (torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
            for _ in range(2))
    return a, b


def _timed_product(a: torch.Tensor, b: torch.Tensor) -> float:
    """Seconds of one product, after one untimed product of the same shape (the first pays for
    starting threads and choosing, or compiling, the kernel)."""
    torch.mm(a, b)
    _sync(a.device)
    start = time.perf_counter()
    torch.mm(a, b)
    _sync(a.device)
    return time.perf_counter() - start


def matmul_calibration(device: torch.device, precision: str,
                       seconds: float = MEASURED_SECONDS) -> dict[str, Any]:
    """TFLOP/s of square matrix products on `device` in `precision` ('bf16': bf16 operands
    under autocast, as training multiplies; else fp32) at torch's current threads: warmed-up
    products of the size `FIRST_SIZE`'s comment explains, then as many as `seconds` holds, at
    least one."""
    largest = GPU_SIZE if device.type == "cuda" else CPU_SIZE
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    size = FIRST_SIZE if precision == "bf16" and device.type == "cpu" else largest
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16,
                                         enabled=precision == "bf16"):
        while True:
            a, b = _operands(size, device, dtype)
            if 8 * _timed_product(a, b) > seconds / 4 or size >= largest:
                break
            size *= 2
        products, start = 0, time.perf_counter()
        while products == 0 or time.perf_counter() - start < seconds:
            torch.mm(a, b)
            products += 1
            if device.type == "cuda" and products % 8 == 0:
                _sync(device)  # launches return at once: keep the queue short
        _sync(device)
        elapsed = time.perf_counter() - start
    return {"tflops": float(f"{2 * size**3 * products / elapsed / 1e12:.3g}"),
            "precision": "bf16" if precision == "bf16" else "fp32", "size": size,
            "products": products, "seconds": round(elapsed, 3),
            "threads": torch.get_num_threads(), "note": BUSY_NOTE}
