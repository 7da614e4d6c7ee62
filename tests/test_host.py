"""Which host a run trained on (issue 63): /proc/cpuinfo's identity and kernel flags, threads
per core, the CPUs a process may use (affinity and cgroup quota), read from sample files, and
the short matrix-product calibration. No assertion depends on this machine's CPU or speed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attncli.core import host
from attncli.core.calibration import BUSY_NOTE, CPU_SIZE, matmul_calibration

# Two processors of a Sapphire Rapids guest (AMX), abridged: only the first block is read.
INTEL_AMX = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
stepping\t: 8
siblings\t: 4
cpu cores\t: 2
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile \
amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
stepping\t: 8
flags\t\t: fpu sse2
"""
AMD_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
siblings\t: 2
cpu cores\t: 2
flags\t\t: fpu sse2 avx f16c avx2 bmi2 sha_ni vaes
"""
ARM = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
CPU part\t: 0xd0c

Hardware\t: some board
"""


@pytest.mark.parametrize(("text", "identity", "flags"), [
    (INTEL_AMX, ("GenuineIntel", 6, 143, 8), ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]),
    (AMD_AVX2, ("AuthenticAMD", 25, 1, 1), ["avx2"]),
    (ARM, (None, None, None, None), []),
    ("", (None, None, None, None), []),
])
def test_cpuinfo_gives_the_cpu_s_identity_and_kernel_flags(text, identity, flags):
    found = host.cpu_identity(text)
    assert (found["cpu_vendor"], found["cpu_family"], found["cpu_model"],
            found["cpu_stepping"]) == identity
    assert host.kernel_flags(text) == flags


@pytest.mark.parametrize(("text", "count"), [
    ("0\n", 1), ("0-1\n", 2), ("0,64\n", 2), ("0-1,4-5\n", 4), ("", None), ("cpu0", None),
])
def test_a_kernel_cpu_list_is_counted(text, count):
    assert host.cpu_list_count(text) == count


def test_threads_per_core_from_the_sibling_list_else_cpuinfo(tmp_path):
    siblings = tmp_path / "thread_siblings_list"
    siblings.write_text("0,64\n")
    assert host.threads_per_core(siblings, AMD_AVX2) == 2  # the sibling list is read first
    missing = tmp_path / "absent"
    assert host.threads_per_core(missing, INTEL_AMX) == 2  # siblings 4 / cpu cores 2
    assert host.threads_per_core(missing, AMD_AVX2) == 1
    assert host.threads_per_core(missing, ARM) is None


def _cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(("files", "quota", "usable"), [
    ({"cpu.max": "max 100000\n"}, None, 8),  # v2, no limit
    ({"cpu.max": "150000 100000\n"}, 1.5, 2),  # 1.5 CPUs still run two threads usefully
    ({"cpu.max": "400000 100000\n"}, 4.0, 4),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None, 8),  # v1
    ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0, 2),
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000\n",
      "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0.5, 1),
    ({}, None, 8),  # no cgroup files at all (not Linux, or not mounted)
])
def test_usable_cpus_are_the_affinity_capped_by_the_cgroup_quota(tmp_path, monkeypatch, files,
                                                                  quota, usable):
    monkeypatch.setattr(host, "affinity_cpus", lambda: 8)
    root = _cgroup(tmp_path, files)
    assert host.cgroup_cpu_quota(root) == quota
    assert host.usable_cpus(root) == usable


def test_a_quota_above_the_affinity_leaves_the_affinity(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "affinity_cpus", lambda: 2)
    root = _cgroup(tmp_path, {"cpu.max": "400000 100000\n"})
    assert host.usable_cpus(root) == 2


def test_the_host_description_reads_the_files_it_is_given(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "affinity_cpus", lambda: 4)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(INTEL_AMX)
    root = _cgroup(tmp_path / "cgroup", {"cpu.max": "150000 100000\n"})
    assert host.host_description(cpuinfo=cpuinfo, cgroup_root=root,
                                 siblings=tmp_path / "absent") == {
        "cpu_vendor": "GenuineIntel", "cpu_family": 6, "cpu_model": 143, "cpu_stepping": 8,
        "threads_per_core": 2, "usable_cpus": 2, "affinity_cpus": 4, "cgroup_cpu_quota": 1.5,
        "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]}
    nothing = host.host_description(cpuinfo=tmp_path / "absent", cgroup_root=tmp_path / "absent",
                                    siblings=tmp_path / "absent")
    assert nothing["cpu_vendor"] is None and nothing["cpu_flags"] == []
    assert nothing["usable_cpus"] == 4 and nothing["threads_per_core"] is None


def test_host_stays_torch_free():
    """`cli.main` sizes OpenMP's threads from it before torch loads."""
    code = "import sys, attncli.core.host; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_calibration_is_short_and_says_what_it_measured(precision):
    found = matmul_calibration(torch.device("cpu"), precision, seconds=0.02)
    assert found["tflops"] > 0 and found["products"] >= 1 and found["precision"] == precision
    assert found["threads"] == torch.get_num_threads() and found["note"] == BUSY_NOTE
    assert found["size"] == CPU_SIZE if precision == "fp32" else found["size"] <= CPU_SIZE
