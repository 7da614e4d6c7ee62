"""One timer for every benchmark: warm-up, repeated timed runs, median/percentiles, peak memory.

Timing is honest on both devices: on CUDA each run sits between two CUDA events recorded on the
stream (the GPU's own clock, read after a synchronize), on CPU work is synchronous so a
monotonic wall clock around the call is exact. Peak memory is measured in one extra, untimed
run, so its bookkeeping never slows the timed ones:

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus what was
  allocated before the run;
* CPU: torch has no CPU allocator counters, so the run goes under the torch profiler with
  ``profile_memory=True``; its allocation/free records, replayed in time order, give the
  highest number of bytes the run held at once (temporaries included).
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# The profiler (kineto) prints a line at every start and stop unless told otherwise; it reads
# this once, when first used. A user's own setting wins.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

MEMORY_METHOD = {
    "cuda": "torch.cuda.max_memory_allocated above the bytes held before the run",
    "cpu": "peak bytes torch's CPU allocator held during the run above those held before it "
           "(torch.profiler, profile_memory=True)",
}


@dataclass
class Timing:
    """Seconds of each timed run (in order) and, when asked, the peak extra bytes of one run."""

    times_s: list[float]
    peak_mem_bytes: int | None = None
    warmup: int = 0

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def p50_s(self) -> float:
        return self.percentile(50)

    @property
    def p95_s(self) -> float:
        return self.percentile(95)

    def percentile(self, q: float) -> float:
        """Linear interpolation between the closest ranks (numpy's default), q in 0..100."""
        xs = sorted(self.times_s)
        pos = (len(xs) - 1) * q / 100
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    def to_json(self) -> dict[str, Any]:
        return {
            "median_ms": self.median_s * 1e3,
            "p50_ms": self.p50_s * 1e3,
            "p95_ms": self.p95_s * 1e3,
            "times_ms": [t * 1e3 for t in self.times_s],
            "warmup": self.warmup,
            "peak_mem_bytes": self.peak_mem_bytes,
        }


def measure(
    fn: Callable[[], object],
    warmup: int,
    repeats: int,
    device: torch.device,
    memory: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed; optionally once more
    for its peak memory. ``clock`` (CPU only) is there so tests can control time."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for _ in range(warmup):
        fn()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection in the middle of a run is noise, not the code under test
    try:
        if device.type == "cuda":
            times = _time_cuda(fn, repeats, device)
        else:
            times = []
            for _ in range(repeats):
                start = clock()
                fn()
                times.append(clock() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    peak = peak_memory(fn, device) if memory else None
    return Timing(times, peak, warmup)


def _time_cuda(fn: Callable[[], object], repeats: int, device: torch.device) -> list[float]:
    """Per-run GPU time from events; one synchronize at the end reads them all."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    torch.cuda.synchronize(device)
    for start, end in zip(starts, ends, strict=True):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1e3 for start, end in zip(starts, ends, strict=True)]


def peak_memory(fn: Callable[[], object], device: torch.device) -> int:
    """Most bytes ``fn`` held at once beyond what was allocated before it (see module doc)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with _profiler(profile_memory=True) as prof:
        fn()
    records = [e for e in prof.kineto_results.events() if e.name() == "[memory]"]
    records.sort(key=lambda e: e.start_ns())
    held = peak = 0
    for record in records:
        held += record.nbytes()  # positive: allocation, negative: free
        peak = max(peak, held)
    return peak


def ops_called(fn: Callable[[], object]) -> set[str]:
    """Names of the aten operators ``fn`` dispatches (e.g. which attention kernel ran)."""
    with _profiler() as prof:
        fn()
    return {e.name() for e in prof.kineto_results.events()}


def _profiler(profile_memory: bool = False) -> torch.autograd.profiler.profile:
    """The autograd profiler, CPU operators only: the `torch.profiler` wrapper would first
    import torch._inductor (seconds, for nothing), and its raw records are all we read."""
    return torch.autograd.profiler.profile(use_cpu=True, profile_memory=profile_memory)
