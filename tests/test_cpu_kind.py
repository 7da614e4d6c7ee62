"""CPU kinds (issue 65): what /proc/cpuinfo's flags make of a CPU, how ONEDNN_MAX_CPU_ISA and
ATEN_CPU_CAPABILITY cap it, and what `precision: auto` picks for each kind. Every kind is
mocked from cpuinfo text, so each runs on any machine; the one check of this machine compares
/proc/cpuinfo's reading with torch's own CPUID probes."""

from __future__ import annotations

import pytest
import torch

from attncli.core import device as device_module
from attncli.core.cpu_kind import CpuKind, detect_cpu_kind, environment_cap

CPU = torch.device("cpu")
SKYLAKE = "avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_vnni"
COOPER_LAKE = SKYLAKE + " avx512_bf16"
SAPPHIRE_RAPIDS = COOPER_LAKE + " avx512_fp16 amx_bf16 amx_tile amx_int8"
EPYC_ZEN3 = "avx avx2 fma bmi2 sha_ni vaes"


def cpuinfo(flags: str) -> str:
    return f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 {flags}\n\n"


@pytest.mark.parametrize(("flags", "kind", "auto"), [
    (SAPPHIRE_RAPIDS, "amx", "bf16"),
    (COOPER_LAKE, "avx512_bf16", "bf16"),
    (SKYLAKE, "avx512", "fp32"),   # oneDNN would say bf16 here: it only emulates it
    (EPYC_ZEN3, "avx2", "fp32"),   # auto on AVX2 keeps the fp32 path
    ("sse4_2 avx", "other", None),  # an x86 older than AVX2: oneDNN's own answer
])
def test_each_kind_and_what_auto_picks_for_it(flags, kind, auto, monkeypatch):
    monkeypatch.setattr(device_module, "_onednn_bf16", lambda: False)
    found = detect_cpu_kind(cpuinfo(flags), env={}, machine="x86_64")
    assert found == CpuKind(kind, kind)
    assert device_module.resolve_precision("auto", CPU, found) == (auto or "fp32")
    assert device_module.resolve_precision("bf16", CPU, found) == "bf16"  # named: kept


@pytest.mark.parametrize(("env", "kind", "capped_by"), [
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "avx2", "ONEDNN_MAX_CPU_ISA=AVX2"),
    ({"ONEDNN_MAX_CPU_ISA": "avx512_core"}, "avx512", "ONEDNN_MAX_CPU_ISA=avx512_core"),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, "avx512_bf16",
     "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16"),
    ({"ATEN_CPU_CAPABILITY": "avx2"}, "avx2", "ATEN_CPU_CAPABILITY=avx2"),
    ({"ATEN_CPU_CAPABILITY": "default"}, "other", "ATEN_CPU_CAPABILITY=default"),
    # the lower of two caps decides
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx2"}, "avx2",
     "ATEN_CPU_CAPABILITY=avx2"),
    # settings that cap nothing on this CPU
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, "amx", None),
    ({"ONEDNN_MAX_CPU_ISA": "ALL", "ATEN_CPU_CAPABILITY": "avx512"}, "amx", None),
    ({"ONEDNN_MAX_CPU_ISA": "no such isa"}, "amx", None),
])
def test_the_environment_caps_an_amx_cpu(env, kind, capped_by, monkeypatch):
    monkeypatch.setattr(device_module, "_onednn_bf16", lambda: True)  # what oneDNN says on AMX
    found = detect_cpu_kind(cpuinfo(SAPPHIRE_RAPIDS), env=env, machine="x86_64")
    assert (found.hardware, found.kind, found.capped_by) == ("amx", kind, capped_by)
    emulated = kind not in ("amx", "avx512_bf16")
    assert device_module.resolve_precision("auto", CPU, found) == ("fp32" if emulated else "bf16")
    if capped_by:
        assert found.describe() == f"{kind} (an amx CPU, capped by {capped_by})"


def test_a_cap_never_raises_a_cpu_above_its_hardware():
    found = detect_cpu_kind(cpuinfo(EPYC_ZEN3), env={"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"},
                            machine="x86_64")
    assert found == CpuKind("avx2", "avx2")
    assert environment_cap({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}) == (
        "amx", "ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX")


@pytest.mark.parametrize("onednn", [True, False])
def test_off_x86_auto_follows_onednn_as_before(onednn, monkeypatch):
    """ARM (Graviton, Apple) keeps the path it had: oneDNN's answer decides."""
    monkeypatch.setattr(device_module, "_onednn_bf16", lambda: onednn)
    found = detect_cpu_kind("processor\t: 0\nFeatures\t: fp asimd bf16 sve\n", env={},
                            machine="aarch64")
    assert found == CpuKind("other", "other")
    assert device_module.resolve_precision("auto", CPU, found) == ("bf16" if onednn else "fp32")


def test_this_machine_reads_as_torch_s_cpuid_probes_say():
    """/proc/cpuinfo's flags and torch's CPUID probes (the cpuinfo library) agree on the kind
    of the CPU the tests run on, whichever it is."""
    if not torch.cpu._is_avx2_supported():
        pytest.skip("not an x86 CPU with AVX2")
    found = detect_cpu_kind(env={})
    probes = [(torch.cpu._is_amx_tile_supported(), "amx"),
              (torch.cpu._is_avx512_bf16_supported(), "avx512_bf16"),
              (torch.cpu._is_avx512_supported(), "avx512"), (True, "avx2")]
    assert found.hardware == next(kind for probed, kind in probes if probed)
