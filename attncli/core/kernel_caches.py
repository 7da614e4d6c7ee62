"""A bound on ideep's cache of compiled CPU kernels, set before torch loads oneDNN.

Why: on CPU, torch runs bf16 matrix products through oneDNN (by way of ideep, its wrapper),
which compiles a kernel for each shape it meets. Two caches of 1,024 entries keep them:
oneDNN's primitive cache and ideep's computation cache, and an ideep entry keeps its kernel
alive after oneDNN's cache dropped it. A training run whose batch lengths are rounded to
multiples of 1 meets new batch shapes at almost every update, so both fill, and a kernel can be
held twice. 64 ideep entries give most of that share of memory back at the same speed (one
entry gave a little more, and trained slower); oneDNN's own cache stays as it is, since a
smaller one compiled again kernels that updates a few steps later reuse, and trained slower
still (benchmarks/MEASUREMENTS.md, "Where a training run's memory goes"). A user's own setting
wins. Kept apart from torch, like malloc.py: it must run before torch is imported, and costs
nothing.
"""

from __future__ import annotations

import os

# Read by ideep (torch's oneDNN wrapper) once, at its first cached computation; oneDNN's own
# cache is ONEDNN_PRIMITIVE_CACHE_CAPACITY, left to the user.
IDEEP_CACHE_VARIABLE = "LRU_CACHE_CAPACITY"
KERNEL_CACHE_BOUNDS = {IDEEP_CACHE_VARIABLE: "64"}


def bound_kernel_caches() -> None:
    """Set attncli's cache bounds in this process's environment, unless the user set them."""
    for variable, capacity in KERNEL_CACHE_BOUNDS.items():
        os.environ.setdefault(variable, capacity)
