"""The CPUs this process may use: its affinity mask and its cgroup's CPU quota, torch-free.

Why not `os.cpu_count()`: it counts the machine's CPUs, while a container (docker `--cpus`,
a systemd `CPUQuota=`) or `taskset` gives a process fewer. Threads sized by the machine's
count on a two-CPU quota of a 64-core host oversubscribe it 32 times over. Kept free of torch
so that `cli.main` can size OpenMP's threads before torch loads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def affinity_cpus() -> int:
    """How many CPUs the scheduler may run this process on (`taskset`, cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The CPUs' worth of time this process's cgroup may use (cgroup v2 `cpu.max`, else v1's
    `cpu.cfs_quota_us` / `cpu.cfs_period_us`), or None where there is no limit."""
    for quota_file, period_file in ((root / "cpu.max", None),
                                    (root / "cpu" / "cpu.cfs_quota_us",
                                     root / "cpu" / "cpu.cfs_period_us"),
                                    (root / "cpu,cpuacct" / "cpu.cfs_quota_us",
                                     root / "cpu,cpuacct" / "cpu.cfs_period_us")):
        try:
            words = quota_file.read_text().split()
            if period_file is not None:
                words.append(period_file.read_text().strip())
        except OSError:
            continue
        if len(words) != 2 or words[0] in ("max", "-1"):
            return None
        try:
            quota, period = float(words[0]), float(words[1])
        except ValueError:
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """The CPUs this process may keep busy: its affinity, capped by its cgroup's quota
    (rounded up: a quota of 1.5 CPUs still runs two threads usefully), at least 1."""
    cpus = affinity_cpus()
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(cpus, 1)
