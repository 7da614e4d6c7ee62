"""More than one training process (torchrun): the process group, who writes, each process's
share of an update, and the decisions every process must take together.

    torchrun --nproc_per_node 2 -m attncli train configs/small.yaml    # or: train --nproc 2

Every process builds the same batch order from the seed (see `data.batching.token_batches`). An
update is `train.accum_steps` consecutive batches of that one global stream; process r trains on
batches r, r + N, r + 2N, ... of it and DistributedDataParallel sums the gradients, so an update
holds the same tokens whatever the number of processes, and the saved data position (epoch,
batch index) counts global batches: a run resumes on another number of processes.

Rank 0 alone writes (run folder, tokenizer, metrics, checkpoints, the progress display); the
others wait for it where they need what it wrote. Stops (a signal, `max_minutes`) are agreed
over a small CPU (gloo) collective after every update, so all processes stop on the same update.

With one process (no torchrun) every function here is a no-op, and the single-process path pays
nothing for any of this.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from attncli.core.device import requested_device, resolve_device, use_device
from attncli.core.errors import LAUNCHER_ENV, PEER_FAILED_EXIT, AttncliError, PeerFailed

T = TypeVar("T")
# How long a process waits in a collective for the others: rank 0 may be tokenizing a large
# corpus for the cache while the others wait. A process that dies closes its sockets, and the
# others fail at once; this bound is only for one that hangs.
WAIT = datetime.timedelta(minutes=60)


@dataclass(frozen=True)
class World:
    """This process's place among the training processes (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1
    host_group: Any = None  # gloo group for CPU-side agreement, even when training on NCCL

    @property
    def primary(self) -> bool:
        """The process that writes: run folder, metrics, checkpoints, what the user sees."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def share(self, items: Sequence[T]) -> list[T]:
        """This process's items of a sequence every process holds: every size-th from rank."""
        return list(items[self.rank :: self.size])

    def any_of(self, flags: list[bool]) -> list[bool]:
        """Each flag True on every process when it is True on any (a CPU collective: no GPU
        sync)."""
        if not self.distributed:
            return flags
        values = torch.tensor(flags, dtype=torch.int32)
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.host_group)
        return [bool(v) for v in values.tolist()]

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise sum over processes of a tensor on the training device."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def from_primary(self, obj: T) -> T:
        """Rank 0's `obj` on every process (what the others pass is ignored)."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.host_group)
        return box[0]

    def gather(self, obj: T) -> list[T]:
        """Every process's `obj`, in rank order, on every process."""
        if not self.distributed:
            return [obj]
        boxes: list[Any] = [None] * self.size
        dist.all_gather_object(boxes, obj, group=self.host_group)
        return boxes

    def wait_for_primary(self) -> None:
        """Block until rank 0 gets here too (after it wrote what the others will read)."""
        if self.distributed:
            dist.barrier(group=self.host_group)


def launched_by_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1


def _device_for_ranks(device_name: str) -> torch.device:
    """``--device`` as every process of a torchrun job reads it: the CPU, or a bare 'cuda' that
    each process turns into the GPU of its LOCAL_RANK (an explicit cuda:N would put every
    process on the same GPU, so it is refused). Checked without using a GPU, so that the
    ``--nproc`` launcher can call it too."""
    if device_name not in ("auto", "cpu", "cuda"):
        raise AttncliError(f"--device {device_name}: under torchrun each process takes the GPU "
                           f"of its LOCAL_RANK; use --device cuda (or cpu, or auto)")
    return requested_device(device_name)


def _training_device(device_name: str, local_rank: int) -> torch.device:
    """One GPU per process, cuda:LOCAL_RANK (torchrun's way); the CPU otherwise.

    The GPU is named from LOCAL_RANK alone and made current before anything else runs on CUDA:
    resolving a bare 'cuda' first (to the current device, cuda:0) would give every process a
    CUDA context on GPU 0 as well, hundreds of MiB each, beside rank 0's work.
    """
    if _device_for_ranks(device_name).type == "cpu":
        return torch.device("cpu")
    if local_rank >= torch.cuda.device_count():
        raise AttncliError(f"LOCAL_RANK {local_rank}: this machine has "
                           f"{torch.cuda.device_count()} CUDA device(s); start at most that many "
                           f"processes per node (--nproc_per_node)")
    return use_device(torch.device("cuda", local_rank))


def start(device_name: str) -> tuple[World, torch.device]:
    """Join the process group torchrun set up (NCCL on CUDA, gloo on CPU); the device this
    process trains on. Without torchrun: a world of one and the `--device` asked for."""
    if not launched_by_torchrun():
        return World(), resolve_device(device_name)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    device = _training_device(device_name, local_rank)
    on_cuda = device.type == "cuda"
    dist.init_process_group("nccl" if on_cuda else "gloo", timeout=WAIT,
                            device_id=device if on_cuda else None)
    host = dist.new_group(backend="gloo", timeout=WAIT) if on_cuda else dist.group.WORLD
    return World(rank, size, host), device


def stop(world: World) -> None:
    """Leave the process group (torchrun waits for every process to).

    What still refers to it (DistributedDataParallel's reducer sits in reference cycles) is
    freed first: freed later, at interpreter shutdown, gloo's threads abort the process.

    SIGTERM is ignored from here on: this process is leaving anyway, and once another process
    has exited (the peers of one that failed exit as soon as it leaves the group), torchrun's
    launcher sends SIGTERM to those still running; dying of it would replace this process's
    exit code, the one that says what went wrong, with a death by signal.
    """
    if world.distributed and dist.is_initialized():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        gc.collect()
        dist.destroy_process_group()


class SummedLoss(nn.Module):
    """The model's training loss as a module's `forward`: DistributedDataParallel hooks the
    gradient all-reduce into `forward`, and the training step calls `summed_loss`."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, *,
                label_smoothing: float, compute_dtype: torch.dtype) -> torch.Tensor:
        return self.model.summed_loss(src, tgt_in, tgt_out, label_smoothing=label_smoothing,
                                      compute_dtype=compute_dtype)


def loss_module(model: nn.Module, world: World, device: torch.device) -> nn.Module:
    """What the training step calls for the loss: wrapped in DistributedDataParallel when
    there are several processes (which also makes every process start from rank 0's weights)."""
    module = SummedLoss(model)
    if not world.distributed:
        return module
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    # The only buffers are constant position tables: no need to re-send them every forward
    # (the option's name changed in torch 2.13).
    quiet_buffers = ("forward_sync_buffers" if "forward_sync_buffers" in
                     inspect.signature(DistributedDataParallel).parameters else "broadcast_buffers")
    return DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=True, **{quiet_buffers: False})


def without_gradient_sync(module: nn.Module) -> contextlib.AbstractContextManager:
    """For the micro-batches before an update's last: accumulate locally, all-reduce once."""
    if hasattr(module, "no_sync"):
        return module.no_sync()
    return contextlib.nullcontext()


@contextlib.contextmanager
def peer_failures_as_errors(world: World) -> Iterator[None]:
    """A collective that failed because another process died (its sockets closed): one line
    instead of the collective's traceback.

    NCCL raises `DistError`s; gloo raises plain RuntimeErrors naming its transport, which is
    how they are told from a bug here (a bug keeps its traceback).
    """
    try:
        yield
    except RuntimeError as err:
        text = str(err).strip()
        from_backend = isinstance(err, dist.DistError) or "gloo" in text or "NCCL" in text
        if not (world.distributed and from_backend):
            raise
        first = (text.splitlines() or [type(err).__name__])[0]
        raise PeerFailed(f"rank {world.rank}: another training process stopped, so this one "
                         f"stops too ({first[:200]})") from None


# --------------------------------------------------------------------------------------------
# `attncli train --nproc N`: torchrun's launcher, started from attncli
# --------------------------------------------------------------------------------------------


def launch(nproc: int, argv: list[str], device_name: str) -> None:
    """Run `python -m attncli <argv>` in `nproc` processes on this machine, as
    `torchrun --standalone --nproc_per_node nproc` would, and turn its outcome into attncli's
    exit codes: a process that failed is one line (which rank, how), a signal saves and stops.
    """
    import logging
    import uuid

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _check_gpus_for(nproc, device_name)
    for name in list(logging.root.manager.loggerDict):  # attncli says what went wrong itself
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    if "OMP_NUM_THREADS" not in os.environ:  # share the cores instead of oversubscribing them
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                          monitor_interval=0.5)
    os.environ[LAUNCHER_ENV] = "1"
    try:
        elastic_launch(config, sys.executable)("-u", "-m", "attncli", *argv)
    except ChildFailedError as err:
        raise SystemExit(_report_failure(err.failures, nproc)) from None
    except SignalException as err:
        print(f"{err.sigval.name}: every training process was told to save and stop",
              file=sys.stderr)
        raise SystemExit(130 if err.sigval.name == "SIGINT" else 143) from None


def _check_gpus_for(nproc: int, device_name: str) -> None:
    """On CUDA each process takes one GPU: refuse before starting any of them.

    The launcher itself stays off the GPUs: it reads the driver's device count only and never
    makes a GPU current, since a CUDA context here would hold memory on GPU 0 for the whole run.
    """
    if _device_for_ranks(device_name).type == "cpu":
        return
    if nproc > torch.cuda.device_count():
        raise AttncliError(f"--nproc {nproc} --device {device_name}: one GPU per process, and "
                           f"this machine has {torch.cuda.device_count()}")


def _report_failure(failures: dict, nproc: int) -> int:
    """The launcher's line and exit code. A process killed by a signal could not say why, so
    the launcher says it; the others said their own errors (rank 0 for errors every process
    meets) or stopped because a peer did (exit code 3, quiet).

    Once one process has failed, torchrun's launcher stops the rest with SIGTERM, and a process
    that meets it before its own handler is installed (still starting) or after (leaving) dies
    of it: such a SIGTERM is the launcher's doing, not the cause, when another process exited
    with an error it said itself (1 or 2). Among the kills, a signal other than SIGTERM (the
    OOM killer's SIGKILL, a crash's SIGSEGV) comes from outside and is the one named.
    """
    said_why = any(f.exitcode in (1, 2) for f in failures.values())
    killed = {rank: f for rank, f in failures.items() if f.exitcode < 0
              and not (said_why and f.exitcode == -signal.SIGTERM)}
    if killed:
        rank = min(killed, key=lambda r: (killed[r].exitcode == -signal.SIGTERM,
                                          killed[r].timestamp))
        print(f"error: training process rank {rank} of {nproc} was killed by "
              f"{signal.Signals(-killed[rank].exitcode).name}; every process stopped, and the "
              f"run folder keeps its last checkpoint", file=sys.stderr)
        return 1
    codes = {f.exitcode for f in failures.values() if f.exitcode >= 0}
    return 2 if codes <= {2, PEER_FAILED_EXIT} else 1
