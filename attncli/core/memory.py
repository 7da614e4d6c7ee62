"""The process's memory as the operating system counts it (resident set size), for the training
log, `metrics.jsonl` and `attncli bench`: what a user's system monitor shows, which the
allocator's own figures (torch's, CUDA's) do not, since they leave out libraries, caches of
kernels and memory the C allocator keeps after a free.

Kept apart from torch: reading it costs a file read and imports nothing heavy.
"""

from __future__ import annotations

import os
import sys

MB = 1_000_000  # figures are in MB and GB of 10^6 and 10^9 bytes, as `time -v` users convert


def resident_bytes() -> int | None:
    """The resident set size now (Linux's /proc/self/statm); None where there is no /proc."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_resident_bytes() -> int | None:
    """The largest resident set size of this process so far (getrusage's ru_maxrss: KiB on
    Linux, bytes on macOS); None where the `resource` module is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def megabytes(count: int | None) -> float | None:
    """Bytes as MB with one decimal (None stays None), the unit of the metrics' memory fields."""
    return None if count is None else round(count / MB, 1)


def gigabytes_text(count: int | None) -> str:
    """'1.23 GB', or 'unknown' where the system does not say."""
    return "unknown" if count is None else f"{count / 1e9:.2f} GB"
