"""glibc malloc tuning, kept apart from torch so that importing it costs nothing.

Why a module of its own: the CLI calls it before any command runs, and ``attncli --help`` or a
bad-config error should not wait seconds for torch to import.
"""

from __future__ import annotations


def keep_freed_memory() -> None:
    """Ask glibc's malloc to keep freed memory for reuse instead of handing it back to the OS.

    Why: a training step frees and re-allocates the same activation buffers every time, and
    glibc's default mmap()s for large blocks made it page-fault them in anew each step
    (benchmarks/MEASUREMENTS.md). Blocks up to 32 MiB (glibc's ceiling) then come from the heap
    and are reused. A no-op where the C library is not glibc, or where
    ATTNCLI_KEEP_FREED_MEMORY=0 (glibc's defaults, which benchmarks/memory_growth.py compares).
    """
    import ctypes
    import ctypes.util
    import os
    import platform

    if os.environ.get("ATTNCLI_KEEP_FREED_MEMORY") == "0":
        return
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)
    libc.mallopt(m_trim_threshold, 1024 * 1024 * 1024)
    libc.mallopt(m_top_pad, 64 * 1024 * 1024)
