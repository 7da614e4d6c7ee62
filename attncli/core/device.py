"""Choosing the device and the numeric precision, in one place for train, eval and bench."""

from __future__ import annotations

import contextlib
import os
import platform
import re
from collections.abc import Iterator
from typing import Any

import torch

from attncli.core.calibration import matmul_calibration
from attncli.core.config import LARGEST_AUTO_PAD_MULTIPLE
from attncli.core.cpu_kind import CpuKind, detect_cpu_kind
from attncli.core.errors import AttncliError
from attncli.core.host import CPUINFO, cpuinfo_fields, host_description, usable_cpus


def requested_device(name: str) -> torch.device:
    """The device ``--device name`` asks for, checked against this machine without using a GPU.

    'auto' -> cuda when present else cpu; a bare 'cuda' keeps no index: which GPU it means is
    decided where the device is put to use (`use_device` in one process, LOCAL_RANK under
    torchrun). A device this machine does not have is a user error (exit 2).

    Only the driver's device count is read, and that creates no CUDA context: the ``--nproc``
    launcher checks its ``--device`` here without holding memory on GPU 0 for the whole run.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    match = re.fullmatch(r"cpu|cuda(?::(\d+))?", name)
    if match is None:
        raise AttncliError(f"--device {name}: expected auto, cpu, cuda or cuda:N")
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise AttncliError(f"--device {name}: CUDA is not available on this machine "
                           f"(torch {torch.__version__}); use --device cpu")
    if match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        raise AttncliError(f"--device {name}: this machine has {torch.cuda.device_count()} "
                           f"CUDA device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return torch.device(name)


def use_device(device: torch.device) -> torch.device:
    """Make a GPU this process's current one, so kernels and allocations without an explicit
    device go there too; a bare 'cuda' is the current GPU (cuda:0 unless something chose
    another). Returns the device with its index; the CPU is returned as it is.

    This is where a process first touches a GPU (its CUDA context is created on the GPU made
    current), which is why a process meant for cuda:N must come here with cuda:N, never with a
    bare 'cuda' first.
    """
    if device.type != "cuda":
        return device
    index = torch.cuda.current_device() if device.index is None else device.index
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def resolve_device(name: str) -> torch.device:
    """The device ``--device name`` asks for (see `requested_device`), made current: what a
    command running in one process trains, evaluates or benchmarks on."""
    return use_device(requested_device(name))


def _onednn_bf16() -> bool:
    """oneDNN's own answer: true where it can run bf16 at all, emulated or not."""
    try:
        mkldnn = torch.backends.mkldnn
        return bool(mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_supports_bf16(kind: CpuKind | None = None) -> bool:
    """True where the CPU multiplies bf16 natively: an AMX or AVX-512-BF16 `kind` (default:
    this CPU's, `detect_cpu_kind`). Off x86 (kind 'other': ARM), oneDNN's own answer, as
    before 0.7: no ARM machine has measured otherwise."""
    kind = kind or detect_cpu_kind()
    if kind.kind == "other" and kind.hardware == "other":
        return _onednn_bf16()
    return kind.native_bf16


def resolve_precision(precision: str, device: torch.device, kind: CpuKind | None = None
                      ) -> str:
    """'auto' -> 'bf16' on CUDA with bf16 support or on a CPU that multiplies bf16 natively
    (`cpu_supports_bf16` of `kind`, default this CPU's), else 'fp32': an AVX-512 CPU without
    BF16 and an AVX2 one emulate bf16, and train faster in fp32."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_supports_bf16(kind) else "fp32"


def resolve_pad_multiple(setting: int | str, device: torch.device, precision: str) -> int:
    """'auto' -> 1 for fp32 on CPU, 8 otherwise (bf16 on CPU, and CUDA).

    Why: oneDNN compiles a bf16 matrix kernel for each tensor shape and keeps it (about 1 MB a
    kernel), and every batch shape needs a few dozen. With exact lengths nearly every batch has
    a new shape: small.yaml met more than 1,024 kernels in its first 100 updates, held 3 GB and
    kept compiling. Multiples of 8 make a few hundred kernels in all and trained small.yaml
    and en-zh.yaml faster and in less than half the memory on a CPU with AMX; without AMX, 8
    was already the choice. GPUs like multiples of 8 too. In fp32 on CPU, MKL compiles nothing
    per shape and exact lengths train faster (figures: benchmarks/MEASUREMENTS.md).
    """
    if setting != "auto":
        return int(setting)
    if device.type == "cpu" and precision == "fp32":
        return 1
    return LARGEST_AUTO_PAD_MULTIPLE


def resolve_decode_precision(train_precision: str, device: torch.device) -> str:
    """The precision to decode in: the run's on CUDA, fp32 on CPU.

    Why fp32 on CPU: oneDNN builds a bf16 matrix kernel per tensor shape, and a decoding step's
    shapes change all the time (the key/value cache grows, finished sentences leave the batch),
    so bf16 decoding paid more in kernel builds than it saved (figures: benchmarks/
    MEASUREMENTS.md). Training batches repeat their shapes, which is why bf16 pays off there.
    """
    if device.type == "cpu":
        return "fp32"
    return resolve_precision(train_precision, device)


@contextlib.contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """bf16 autocast (fp32 master weights) when precision is 'bf16'; a no-op for 'fp32'."""
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        yield


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype matrix products run in: bf16 under mixed precision, else fp32."""
    return torch.bfloat16 if precision == "bf16" else torch.float32


def allow_tf32(device: torch.device) -> None:
    """On CUDA, let fp32 matmuls (fp32 training, and what bf16 autocast leaves in fp32) use TF32
    tensor cores: several times the plain fp32 rate, at a 10-bit mantissa per product."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def set_threads(threads: int | None) -> None:
    """Use `threads` CPU threads. None: OMP_NUM_THREADS or MKL_NUM_THREADS where the user set
    one, else torch's default capped at the CPUs this process may use (`host.usable_cpus`):
    torch counts the CPUs it may run on, not a container's CPU quota, and threads beyond the
    quota only wait for their turn. Never the machine's load: training's threads decide its
    loss curve."""
    if threads is None and not {"OMP_NUM_THREADS", "MKL_NUM_THREADS"} & os.environ.keys():
        threads = min(torch.get_num_threads(), usable_cpus())
    if threads:
        torch.set_num_threads(threads)


def device_name(device: torch.device) -> str:
    """The GPU's marketing name, or the CPU model from /proc/cpuinfo where there is one."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        name = cpuinfo_fields(CPUINFO.read_text()).get("model name")
    except OSError:
        name = None
    return name or platform.processor() or platform.machine()


def machine_description(device: torch.device, processes: int = 1, *,
                        precision: str = "fp32") -> dict[str, Any]:
    """What a run trained on, for the run folder (`machine.json`) and its model card: the
    device's name, the CPU's, its cores and bf16 instructions, the processes, torch's
    version; the CPU's family, model and stepping, threads per core, the CPUs this process
    may use, its kernel flags and torch's threads (`host.host_description`); and a short
    matrix-product calibration in the run's `precision`, since hosts of one name can differ
    in speed (issue 63). Read and measured on this machine, never guessed."""
    cpu, kind = device_name(torch.device("cpu")), detect_cpu_kind()
    return {"device": device.type, "device_name": device_name(device), "cpu": cpu,
            "cpu_cores": os.cpu_count(), "cpu_bf16": cpu_supports_bf16(kind),
            "cpu_kind": kind.record(),
            "processes": processes, "torch": torch.__version__,
            "system": f"{platform.system()} {platform.machine()}",
            **host_description(), "torch_threads": torch.get_num_threads(),
            "calibration": matmul_calibration(device, precision)}
