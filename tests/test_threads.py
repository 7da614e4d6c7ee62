"""Threads: how many threads decoding and training use (--threads; else torch's count, capped
by the CPUs the process may use, never by the machine's load)."""

from __future__ import annotations

import pytest
import torch
from helpers import run_cli

from attncli.core import device


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_default_threads_are_capped_by_the_usable_cpus(monkeypatch, torch_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    monkeypatch.setattr(device, "usable_cpus", lambda: 1)  # a one-CPU container quota
    device.set_threads(None)
    assert torch.get_num_threads() == 1


def test_the_users_thread_count_wins(monkeypatch, torch_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    monkeypatch.setattr(device, "usable_cpus", lambda: 1)
    device.set_threads(None)
    assert torch.get_num_threads() == 2
    device.set_threads(1)
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("command", ["translate", "eval"])
def test_decoding_commands_take_a_thread_count(served_run, data_dir, command, monkeypatch,
                                              torch_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    args = (["translate", "--run", str(served_run), "a dog sees the cat"] if command == "translate"
            else ["eval", str(served_run), "--split", "val", "--json"])
    result = run_cli(*args, "--threads", "1", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    assert torch.get_num_threads() == 1
