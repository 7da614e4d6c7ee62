"""The resume's own checks and notices (`training/extension.py`), on a bare `RunState`: the
cases the whole-run tests (test_checkpoints, test_distributed, test_run_extension) do not reach."""

from __future__ import annotations

import torch

from attncli.core.config import ModelConfig
from attncli.training.checkpointing import RunState
from attncli.training.extension import (
    forget_end_validation,
    processes_notice,
    threads_notice,
)


def test_another_process_count_is_not_said_without_dropout_but_is_recorded():
    state = RunState(processes=2)
    assert processes_notice(state, 1, ModelConfig(dropout=0.0, attention_dropout=0.0)) is None
    assert state.processes == 1  # the next save records the count it trained with
    state = RunState(processes=2)
    line = processes_notice(state, 1, ModelConfig(dropout=0.1))
    assert line is not None and "--nproc 2" in line


def test_thread_counts_are_said_on_cpu_only_and_runs_before_0_5_are_quiet():
    threads = torch.get_num_threads()
    assert threads_notice(RunState(threads=threads + 3), torch.device("meta")) is None
    assert threads_notice(RunState(threads=0), torch.device("cpu")) is None
    state = RunState(threads=threads + 3)
    assert f"saved with {threads + 3} CPU threads" in threads_notice(state, torch.device("cpu"))
    assert state.threads == threads


def test_an_end_validation_is_forgotten_once():
    before = {"best_bleu": 12.5, "best_step": 40, "bad_validations": 1}
    state = RunState(step=45, best_bleu=13.0, best_step=45, bad_validations=0,
                     before_end=before)
    assert "best (step-40)" in forget_end_validation(state)
    assert (state.best_bleu, state.best_step, state.bad_validations) == (12.5, 40, 1)
    assert state.before_end == {} and forget_end_validation(state) is None
