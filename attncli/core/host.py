"""The CPUs this process may use (its affinity mask and its cgroup's CPU quota) and which CPU
they are (/proc/cpuinfo, the core's sibling threads), torch-free.

Why not `os.cpu_count()`: it counts the machine's CPUs, while a container (docker `--cpus`,
a systemd `CPUQuota=`) or `taskset` gives a process fewer. Threads sized by the machine's
count on a two-CPU quota of a 64-core host oversubscribe it 32 times over. Kept free of torch
so that torch-free code (the bench's load measure, the stop trials) can use it.

Why the CPU's family, model and stepping and its flags: two hosts that lscpu names alike ("AMD
EPYC" under KVM) can be different generations, and trained the same config at different speeds
(issue 63); machine.json records what tells them apart.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPUINFO = Path("/proc/cpuinfo")
THREAD_SIBLINGS = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
# The /proc/cpuinfo flags that decide which matrix kernels MKL and oneDNN pick.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


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


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's `key : value` lines of /proc/cpuinfo text (every processor of a
    host is the same kind, and one block is enough to say which)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _number(value: str | None) -> int | str | None:
    """A decimal or hex field as an int; other text as it is; None where absent or empty."""
    if not value:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return value


def cpu_identity(text: str) -> dict[str, int | str | None]:
    """The CPU's vendor, family, model and stepping (x86's CPUID, as Linux prints it): what
    tells apart two generations the model name calls alike. None for each field the text
    lacks (ARM's cpuinfo has none of them)."""
    fields = cpuinfo_fields(text)
    return {"cpu_vendor": fields.get("vendor_id") or None,
            "cpu_family": _number(fields.get("cpu family")),
            "cpu_model": _number(fields.get("model")),
            "cpu_stepping": _number(fields.get("stepping"))}


def kernel_flags(text: str) -> list[str]:
    """Which of `KERNEL_FLAGS` the CPU has: the instructions that decide the kernels a run
    gets (AVX2 fp32; AVX-512; native bf16 products; AMX tiles)."""
    flags = set(cpuinfo_fields(text).get("flags", "").split())
    return [flag for flag in KERNEL_FLAGS if flag in flags]


def cpu_list_count(text: str) -> int | None:
    """How many CPUs a kernel CPU list names ("0-1,4,6-7" -> 5); None where it is not one."""
    count = 0
    try:
        for part in text.strip().split(","):
            first, _, last = part.partition("-")
            count += int(last or first) - int(first) + 1
    except ValueError:
        return None
    return count or None


def threads_per_core(siblings: Path = THREAD_SIBLINGS,
                     cpuinfo_text: str | None = None) -> int | None:
    """The hardware threads of a core (2 with SMT, which shares a core's matrix units between
    two threads): CPU 0's sibling list, else cpuinfo's `siblings` / `cpu cores`, as lscpu
    does; None where neither says."""
    text = _read(siblings)
    if text is not None and (count := cpu_list_count(text)):
        return count
    fields = cpuinfo_fields(cpuinfo_text or "")
    try:
        return int(fields["siblings"]) // int(fields["cpu cores"]) or None
    except (KeyError, ValueError, ZeroDivisionError):
        return None


def host_description(cpuinfo: Path = CPUINFO, cgroup_root: Path = CGROUP_ROOT,
                     siblings: Path = THREAD_SIBLINGS) -> dict[str, object]:
    """The host as machine.json records it, besides the model name: the CPU's identity, its
    threads per core, the CPUs this process may use (and the affinity and the quota that
    decide it), and its kernel flags."""
    text = _read(cpuinfo) or ""
    return {**cpu_identity(text), "threads_per_core": threads_per_core(siblings, text),
            "usable_cpus": usable_cpus(cgroup_root), "affinity_cpus": affinity_cpus(),
            "cgroup_cpu_quota": cgroup_cpu_quota(cgroup_root), "cpu_flags": kernel_flags(text)}
