"""A signal stops a run between updates and leaves it resumable, whatever the update it hits:
the last one (the run's end is done, not left undoable), one whose step is due for validation
(validated before the stop, not lost for good), or one whose validation it interrupts (no
further update is trained). The resume line and the curves are in the run folder."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import torch
from helpers import SMALL, metrics, pointers, resume, train

from attncli.training import trainer as trainer_module
from attncli.training.trainer import Trainer
from attncli.training.validate import score_weights

SETS = ["train.max_steps=6", "train.save_every=2", "train.eval_every=2"]


def signal_during_update(monkeypatch, step: int, sig: int = signal.SIGTERM) -> None:
    """Send `sig` while the update that makes `step` trains."""
    real = trainer_module.train_step

    def signalled(*args, **kwargs):
        trainer = signalled.trainer
        if trainer.state.step + 1 == step:
            os.kill(os.getpid(), sig)
        return real(*args, **kwargs)

    real_run = Trainer.run

    def run(trainer: Trainer):
        signalled.trainer = trainer
        return real_run(trainer)

    monkeypatch.setattr(trainer_module, "train_step", signalled)
    monkeypatch.setattr(Trainer, "run", run)


def signal_during_validation(monkeypatch, step: int, times: int = 1) -> None:
    """Send SIGTERM `times` times as the validation of `step` starts."""
    real = Trainer.validate

    def signalled_validate(trainer: Trainer) -> bool:
        if trainer.state.step == step:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGTERM)
        return real(trainer)

    monkeypatch.setattr(Trainer, "validate", signalled_validate)


def test_a_signal_in_the_last_update_lets_the_run_end_whole(data_dir, tmp_path, monkeypatch):
    signal_during_update(monkeypatch, 6)
    result = train(data_dir, tmp_path, SMALL, "--name", "end", sets=SETS)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "end"
    assert [r["step"] for r in metrics(run) if r["event"] == "val"] == [2, 4, 6]
    assert pointers(run)["last"] == "step-6"
    assert "stopped at step 6 (max_steps)" in result.stdout
    assert "SIGTERM came while the run was ending" in result.stdout


def test_a_signal_in_an_update_due_for_validation_validates_it_first(data_dir, tmp_path,
                                                                     monkeypatch):
    signal_during_update(monkeypatch, 4, signal.SIGINT)
    result = train(data_dir, tmp_path, SMALL, "--name", "mid", sets=SETS)
    assert result.returncode == 130, result.stderr
    run = tmp_path / "mid"
    assert [r["step"] for r in metrics(run) if r["event"] == "val"] == [2, 4]
    assert pointers(run)["last"] == "step-4"
    line = f"SIGINT: saved a checkpoint at step 4; resume with `attncli train --resume {run}`"
    assert line in result.stdout and line in (run / "train.log").read_text()
    assert (run / "curves.png").is_file()


def test_a_signal_during_validation_stops_before_another_update(data_dir, tmp_path,
                                                                monkeypatch):
    signal_during_validation(monkeypatch, 2)
    result = train(data_dir, tmp_path, SMALL, "--name", "during", sets=SETS)
    assert result.returncode == 143, result.stderr
    run = tmp_path / "during"
    assert pointers(run)["last"] == "step-2"
    assert max(r["step"] for r in metrics(run)) == 2  # no update 3 trained


def test_scoring_saved_weights_leaves_the_runs_random_numbers_alone(data_dir, tmp_path,
                                                                     monkeypatch):
    """A resume that changed validation scores its best save again (`rescore_best`): building
    that model must not move the generator the resumed run's dropout masks come from."""
    captured = {}
    real_run = Trainer.run

    def capture(trainer: Trainer):
        captured["trainer"] = trainer
        return real_run(trainer)

    monkeypatch.setattr(Trainer, "run", capture)
    result = train(data_dir, tmp_path, SMALL, "--name", "rng", sets=["train.max_steps=1"])
    assert result.returncode == 0, result.stderr
    trainer = captured["trainer"]
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    before = torch.get_rng_state()
    score_weights(trainer, weights, Path("weights"))
    assert torch.equal(torch.get_rng_state(), before)


def test_a_second_sigterm_stops_at_once_with_143_and_says_so(data_dir, tmp_path, monkeypatch):
    signal_during_validation(monkeypatch, 4, times=2)
    result = train(data_dir, tmp_path, SMALL, "--name", "twice", sets=SETS)
    assert result.returncode == 143
    assert "a second SIGTERM: stopped at once" in result.stderr
    assert pointers(tmp_path / "twice")["last"] == "step-2"  # the last save, whole


def test_a_save_a_signal_made_between_saves_goes_once_a_newer_one_exists(data_dir, tmp_path,
                                                                         monkeypatch):
    """Else it took a place among the kept saves and in the end's average: an interrupted run
    averaged steps 2, 3, 4, 6 where the uninterrupted one averages 2, 4, 6."""
    sets = [*SETS, "train.average_last=3"]
    with monkeypatch.context() as patch:
        signal_during_update(patch, 3)
        assert train(data_dir, tmp_path, SMALL, "--name", "cut", sets=sets).returncode == 143
    run = tmp_path / "cut"
    state = json.loads((run / "checkpoints" / "step-3" / "state.json").read_text())
    assert state["interrupted"] is True
    result = resume(data_dir, run)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*")) == [
        "step-2", "step-4", "step-6"]
    (averaged,) = [r for r in metrics(run) if r["event"] == "averaged"]
    assert averaged["steps"] == [2, 4, 6]


def test_closing_the_terminal_stops_a_run_with_a_save(data_dir, tmp_path):
    """A real terminal closed under a run: `attncli train` in a pseudo-terminal whose other end
    is closed gets SIGHUP, and its outputs then fail (EIO); it still saves and exits 129, and
    the run resumes from that save."""
    import pty
    import sys
    import time

    from helpers import REPO, train_args

    sets = ["train.max_steps=100000", "train.save_every=1000", "train.eval_every=1000"]
    argv = [sys.executable, "-m", "attncli", *train_args(SMALL, "--name", "hup", runs=tmp_path,
                                                         sets=sets)]
    env = {**os.environ, "ATTNCLI_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    pid, terminal = pty.fork()
    if pid == 0:  # the child: a session of its own, the pseudo-terminal its controlling one
        os.chdir(REPO)
        os.execve(sys.executable, argv, env)
    run, seen, deadline = tmp_path / "hup", b"", time.monotonic() + 120
    while b"step" not in seen and time.monotonic() < deadline:  # until it trains
        try:
            seen += os.read(terminal, 4096)
        except OSError:
            break
    time.sleep(1)
    os.close(terminal)  # the terminal's window closes
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGHUP, seen.decode()[-2000:]
    log = (run / "train.log").read_text()
    assert "SIGHUP: saved a checkpoint at step" in log, log[-2000:]
    step = int(pointers(run)["last"].removeprefix("step-"))
    resumed = resume(data_dir, run, f"train.max_steps={step + 2}")
    assert resumed.returncode == 0, resumed.stderr
    assert pointers(run)["last"] == f"step-{step + 2}"
