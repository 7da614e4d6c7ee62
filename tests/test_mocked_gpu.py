"""GPU code paths checked on a CPU, with torch.cuda mocked: which GPU each training process
takes, that the `--nproc` launcher never touches one, and the MFU peak of a MIG slice.

`fake_gpus` makes the machine look like it has GPUs as far as attncli can ask without using
one (is_available, device_count), records `set_device`, and fails the test on anything that
would create a CUDA context (`torch.cuda._lazy_init` is what every CUDA tensor, stream and
`current_device()` goes through first).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from helpers import SMALL, run_cli

from attncli.core.errors import AttncliError
from attncli.training import distributed


@contextlib.contextmanager
def fake_gpus(count: int) -> Iterator[mock.MagicMock]:
    """`count` GPUs that cannot be used; yields the recorded `torch.cuda.set_device`."""
    context = AssertionError("a CUDA context was created")
    with mock.patch.object(torch.cuda, "is_available", return_value=count > 0), \
            mock.patch.object(torch.cuda, "device_count", return_value=count), \
            mock.patch.object(torch.cuda, "_lazy_init", side_effect=context), \
            mock.patch.object(torch.cuda, "set_device") as set_device:
        yield set_device


@contextlib.contextmanager
def torchrun_rank(local_rank: int, size: int = 2) -> Iterator[mock.MagicMock]:
    """This process as rank `local_rank` of a one-node torchrun job, its process group
    mocked; yields the recorded `init_process_group`."""
    env = {"LOCAL_RANK": str(local_rank), "RANK": str(local_rank), "WORLD_SIZE": str(size)}
    with mock.patch.dict(os.environ, env), \
            mock.patch.object(distributed.dist, "init_process_group") as init, \
            mock.patch.object(distributed.dist, "new_group", return_value="gloo group"):
        yield init


@pytest.mark.parametrize("local_rank", [0, 1])
@pytest.mark.parametrize("device_name", ["cuda", "auto"])
def test_each_rank_takes_the_gpu_of_its_local_rank_and_no_other(local_rank, device_name):
    with fake_gpus(2) as set_device, torchrun_rank(local_rank) as init:
        world, device = distributed.start(device_name)
    assert device == torch.device("cuda", local_rank)
    assert set_device.call_args_list == [mock.call(local_rank)]  # never set_device(0) first
    assert init.call_args.args == ("nccl",)
    assert init.call_args.kwargs["device_id"] == device
    assert (world.rank, world.size, world.host_group) == (local_rank, 2, "gloo group")


@pytest.mark.parametrize("local_rank", [0, 1])
@pytest.mark.parametrize(("device_name", "gpus"), [("cpu", 2), ("auto", 0)])
def test_ranks_on_the_cpu_leave_the_gpus_alone(local_rank, device_name, gpus):
    with fake_gpus(gpus) as set_device, torchrun_rank(local_rank) as init:
        _, device = distributed.start(device_name)
    assert device == torch.device("cpu")
    set_device.assert_not_called()
    assert init.call_args.args == ("gloo",) and init.call_args.kwargs["device_id"] is None


@pytest.mark.parametrize(("device_name", "local_rank", "message"), [
    ("cuda:1", 0, "--device cuda:1: under torchrun each process takes the GPU of its LOCAL_RANK"),
    ("cuda", 2, "LOCAL_RANK 2: this machine has 2 CUDA device(s)"),
])
def test_a_rank_refuses_a_gpu_it_cannot_have_alone(device_name, local_rank, message):
    with fake_gpus(2) as set_device, torchrun_rank(local_rank), \
            pytest.raises(AttncliError, match=message.replace("(", r"\(").replace(")", r"\)")):
        distributed.start(device_name)
    set_device.assert_not_called()


def test_one_process_keeps_its_current_gpu_and_an_explicit_one():
    """Without torchrun nothing changed: 'cuda' is the current GPU, 'cuda:1' is GPU 1."""
    with fake_gpus(2) as set_device, mock.patch.object(torch.cuda, "current_device",
                                                       return_value=0):
        assert distributed.start("cuda")[1] == torch.device("cuda", 0)
        assert distributed.start("cuda:1")[1] == torch.device("cuda", 1)
    assert set_device.call_args_list == [mock.call(0), mock.call(1)]


def _train_nproc_2(device_name: str, gpus: int, tmp_path: Path):
    """`attncli train --nproc 2` on `gpus` fake GPUs, torchrun's launcher mocked: the result,
    the recorded `set_device` and the launcher mock."""
    launched = mock.MagicMock()
    with fake_gpus(gpus) as set_device, mock.patch.dict(os.environ), \
            mock.patch("torch.distributed.launcher.api.elastic_launch", launched):
        os.environ.pop("LOCAL_RANK", None)
        result = run_cli("train", SMALL, "--runs-dir", str(tmp_path), "--set",
                         "train.accum_steps=2", "--nproc", "2", "--device", device_name)
    return result, set_device, launched


@pytest.mark.parametrize(("device_name", "gpus"), [("cuda", 2), ("auto", 2), ("cpu", 2),
                                                   ("auto", 0)])
def test_the_launcher_starts_the_ranks_without_touching_a_gpu(device_name, gpus, tmp_path):
    """`train --nproc 2` checks the GPUs and hands over to torchrun's launcher; it makes no GPU
    current and creates no CUDA context (the ranks each take their own GPU)."""
    result, set_device, launched = _train_nproc_2(device_name, gpus, tmp_path)
    assert result.returncode == 0, result.stderr
    set_device.assert_not_called()
    config, entrypoint = launched.call_args.args
    assert config.nproc_per_node == 2 and entrypoint == sys.executable
    assert launched.return_value.call_args.args[:3] == ("-u", "-m", "attncli")
    assert list(tmp_path.iterdir()) == []  # the ranks make the run folder, not the launcher


@pytest.mark.parametrize(("device_name", "gpus", "message"), [
    ("cuda", 1, "--nproc 2 --device cuda: one GPU per process, and this machine has 1"),
    ("cuda:0", 2, "--device cuda:0: under torchrun each process takes the GPU"),
    ("cuda", 0, "--device cuda: CUDA is not available"),
])
def test_the_launcher_refuses_before_starting_anything(device_name, gpus, message, tmp_path):
    result, set_device, launched = _train_nproc_2(device_name, gpus, tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    launched.assert_not_called()
    set_device.assert_not_called()


@contextlib.contextmanager
def gpu_named(name: str, sms: int) -> Iterator[None]:
    """torch.cuda describing one GPU: its name and its streaming multiprocessors."""
    properties = SimpleNamespace(name=name, multi_processor_count=sms)
    with mock.patch.object(torch.cuda, "get_device_name", return_value=name), \
            mock.patch.object(torch.cuda, "get_device_properties", return_value=properties):
        yield


@pytest.mark.parametrize(("name", "sms", "peak", "source"), [
    ("NVIDIA H100 80GB HBM3", 132, 989e12, "data sheet, dense bf16"),
    ("NVIDIA H100 PCIe", 114, 756e12, "data sheet, dense bf16"),
    ("NVIDIA A100-SXM4-40GB", 108, 312e12, "data sheet, dense bf16"),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60, 989e12 * 60 / 132,
     "data sheet, dense bf16, scaled to this MIG slice's 60 of the chip's 132 SMs"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14, 312e12 * 14 / 108,
     "data sheet, dense bf16, scaled to this MIG slice's 14 of the chip's 108 SMs"),
    # a slice whose name does not say MIG: its SM count still gives it away
    ("NVIDIA A100-SXM4-40GB", 42, 312e12 * 42 / 108,
     "data sheet, dense bf16, scaled to this device's 42 of the chip's 108 SMs"),
])
def test_the_mfu_peak_of_a_gpu_is_that_of_its_sms(name, sms, peak, source):
    from attncli.bench.peaks import device_peak

    with gpu_named(name, sms), mock.patch(
            "attncli.bench.peaks.measured_matmul_peak", side_effect=AssertionError("measured")):
        found = device_peak(torch.device("cuda", 0), "bf16", warmup=0, repeats=1)
    assert found == (pytest.approx(peak), source)


def test_a_mig_slice_the_table_cannot_scale_is_measured():
    from attncli.bench.peaks import device_peak

    with gpu_named("NVIDIA A100-SXM4-40GB MIG 7g.40gb", 108), mock.patch(
            "attncli.bench.peaks.measured_matmul_peak", return_value=2e14) as measured:
        assert device_peak(torch.device("cuda", 0), "bf16", 0, 1) == (
            2e14, "measured bfloat16 matmul on this device")
    measured.assert_called_once()
