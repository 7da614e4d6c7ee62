"""Which kind of CPU the matrix products run on: AMX, AVX-512 with BF16, AVX-512 without it,
AVX2, or another architecture (ARM, or an x86 older than AVX2).

The kind decides what `precision: auto` picks on a CPU (`core.device.resolve_precision`):
bf16 autocast pays only where the CPU multiplies bf16 natively (AMX tiles, or AVX-512-BF16's
dot products); elsewhere oneDNN emulates bf16 with fp32 instructions and pays for the casts
on top. Why not ask oneDNN (ideep's `has_bf16_type_support`, torch's
`_is_mkldnn_bf16_supported`): it answers true on any AVX-512 CPU, so AVX-512 CPUs without BF16
(Skylake to Tiger Lake, common in clouds) were given bf16 that they only emulate (issue 65).

The kind is the hardware's, capped by the two settings that keep kernels below it:
`ONEDNN_MAX_CPU_ISA` (oneDNN's products: e.g. AVX2 on an AMX machine emulates an AVX2 CPU) and
`ATEN_CPU_CAPABILITY` (ATen's own vectorised kernels). Reading them here is what makes such an
emulation take the emulated kind's path, as a real CPU of that kind would. Torch-free, like
`core.host`, whose /proc/cpuinfo reading it shares; every input can be passed in for tests.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass

from attncli.core.host import CPUINFO, cpuinfo_fields, kernel_flags

# From least to most capable; a cap and the hardware meet at the lesser of the two.
KINDS = ("other", "avx2", "avx512", "avx512_bf16", "amx")
NATIVE_BF16_KINDS = ("avx512_bf16", "amx")
X86_MACHINES = ("x86_64", "amd64", "i386", "i686")
# The kind each flag of `host.KERNEL_FLAGS` proves, most capable first.
FLAG_KINDS = (("amx_bf16", "amx"), ("avx512_bf16", "avx512_bf16"), ("avx512f", "avx512"),
              ("avx2", "avx2"))


@dataclass(frozen=True)
class CpuKind:
    """What the CPU has (`hardware`), what its kernels may use (`kind`: the hardware capped by
    the environment) and the setting that capped it (None: nothing did)."""

    hardware: str
    kind: str
    capped_by: str | None = None

    @property
    def native_bf16(self) -> bool:
        """Whether bf16 products run on bf16 instructions here, not emulated in fp32."""
        return self.kind in NATIVE_BF16_KINDS

    def describe(self) -> str:
        """The kind for a log line, with the hardware where a setting capped it."""
        if self.capped_by is None:
            return self.kind
        return f"{self.kind} (an {self.hardware} CPU, capped by {self.capped_by})"

    def record(self) -> dict[str, str | None]:
        """For machine.json and the bench's report."""
        return {"hardware": self.hardware, "kind": self.kind, "capped_by": self.capped_by}


def hardware_kind(flags: list[str], machine: str) -> str:
    """The most capable kind the CPU's flags (`host.kernel_flags`) prove; 'other' off x86 or
    on an x86 without AVX2."""
    if machine.lower() not in X86_MACHINES:
        return "other"
    return next((kind for flag, kind in FLAG_KINDS if flag in flags), "other")


def onednn_cap(value: str) -> str | None:
    """The kind an `ONEDNN_MAX_CPU_ISA` value keeps oneDNN's kernels to (oneDNN's names:
    SSE41 ... AVX2_VNNI_2, AVX512_CORE[_VNNI|_BF16|_FP16], AVX10_1_512[_AMX[_FP16]],
    AVX512_CORE_AMX[_FP16]); None for DEFAULT, ALL or a name oneDNN would not know."""
    isa = value.strip().upper()
    if "AMX" in isa:
        return "amx"
    if isa in ("AVX512_CORE_BF16", "AVX512_CORE_FP16") or isa.startswith("AVX10"):
        return "avx512_bf16"
    if isa.startswith("AVX512"):
        return "avx512"
    if isa.startswith("AVX2"):
        return "avx2"
    return "other" if isa in ("SSE41", "AVX") else None


def aten_cap(value: str) -> str | None:
    """The kind an `ATEN_CPU_CAPABILITY` value keeps ATen's kernels to: 'default' (no
    vectorisation) and 'avx2' cap; 'avx512' is ATen's highest and caps nothing oneDNN does."""
    return {"default": "other", "avx2": "avx2"}.get(value.strip().lower())


def environment_cap(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The lowest kind the environment's settings allow, and the setting that says so."""
    caps = []
    for name, reader in (("ONEDNN_MAX_CPU_ISA", onednn_cap), ("ATEN_CPU_CAPABILITY", aten_cap)):
        if (value := env.get(name)) and (cap := reader(value)) is not None:
            caps.append((KINDS.index(cap), cap, f"{name}={value}"))
    if not caps:
        return None
    _, cap, setting = min(caps)
    return cap, setting


def _probed_flags() -> list[str]:
    """The flags as torch's cpuinfo library reads CPUID, where /proc/cpuinfo says nothing
    (not Linux)."""
    import torch

    probes = (("amx_bf16", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"),
              ("avx512f", "_is_avx512_supported"), ("avx2", "_is_avx2_supported"))
    return [flag for flag, probe in probes if getattr(torch.cpu, probe, lambda: False)()]


def detect_cpu_kind(cpuinfo_text: str | None = None, env: Mapping[str, str] | None = None,
                    machine: str | None = None) -> CpuKind:
    """This CPU's kind: /proc/cpuinfo's flags (or `cpuinfo_text`), capped by `env` (default
    the process's environment), on `machine` (default `platform.machine()`)."""
    machine = machine or platform.machine()
    if cpuinfo_text is None:
        try:
            cpuinfo_text = CPUINFO.read_text()
        except OSError:
            cpuinfo_text = ""
    has_flags = "flags" in cpuinfo_fields(cpuinfo_text)
    flags = kernel_flags(cpuinfo_text) if has_flags or machine.lower() not in X86_MACHINES \
        else _probed_flags()
    hardware = hardware_kind(flags, machine)
    cap = environment_cap(os.environ if env is None else env)
    if cap is None or KINDS.index(cap[0]) >= KINDS.index(hardware):
        return CpuKind(hardware, hardware)
    return CpuKind(hardware, cap[0], cap[1])
