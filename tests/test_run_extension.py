"""A run extended after it ended follows the run that was never stopped, and a stop that two
causes meet in the same update ends the run whole.

A run that reaches a limit between its scheduled validations validates and saves there, for
that end. Extended (`--resume --set train.max_steps=...`), it went on from that extra
validation: it counted for patience (the extension stopped earlier than the uninterrupted run),
moved best, and its save stayed among the kept ones and in the end's average."""

from __future__ import annotations

import os
import signal

from helpers import SMALL, metrics, resume, train
from test_signal_stops import signal_during_update

from attncli.training.stops import StopSignal

# At a learning rate of 1e-7 the weights stay as they were made, so every validation scores the
# same BLEU, on any machine: the first is best, each later one a bad one.
SCHEDULE = ["train.eval_every=4", "train.save_every=4", "train.patience=2",
            "train.average_last=2", "train.keep_checkpoints=2", "train.lr=1e-7"]


def _scheduled(run) -> tuple[list[tuple[int, float]], list, list[str]]:
    """Validations (step, BLEU) but the short run's at its end (step 6), the average at the
    end of the run (not the short run's), and the saves kept."""
    events = metrics(run)
    vals = [(e["step"], e["val_bleu"]) for e in events if e["event"] == "val" and e["step"] != 6]
    averaged = [e["steps"] for e in events if e["event"] == "averaged" and e["step"] > 6]
    return vals, averaged, sorted(p.name for p in (run / "checkpoints").glob("step-*"))


def test_an_extended_run_follows_the_uninterrupted_one(data_dir, tmp_path):
    whole = train(data_dir, tmp_path, SMALL, "--name", "whole",
                  sets=[*SCHEDULE, "train.max_steps=20"])
    assert whole.returncode == 0, whole.stderr
    assert "stopped at step 12 (patience)" in whole.stdout
    short = train(data_dir, tmp_path, SMALL, "--name", "short",
                  sets=[*SCHEDULE, "train.max_steps=6"])
    assert short.returncode == 0, short.stderr
    extended = resume(data_dir, tmp_path / "short", "train.max_steps=20")
    assert extended.returncode == 0, extended.stderr
    assert "the validation at step 6, made because the run ended there, does not count on" \
        in extended.stdout
    assert "stopped at step 12 (patience)" in extended.stdout  # was step 8
    assert _scheduled(tmp_path / "short") == _scheduled(tmp_path / "whole")


def test_patience_running_out_in_an_update_a_signal_hits_ends_the_run(data_dir, tmp_path,
                                                                    monkeypatch):
    """The signal stop won: a save at step 8 whose resume was refused (patience reached), and
    the end's averaging never done."""
    signal_during_update(monkeypatch, 8)
    result = train(data_dir, tmp_path, SMALL, "--name", "both",
                   sets=[*SCHEDULE, "train.patience=1", "train.max_steps=20"])
    assert result.returncode == 0, result.stderr
    assert "stopped at step 8 (patience)" in result.stdout
    assert "SIGTERM came while the run was ending" in result.stdout
    assert [e["steps"] for e in metrics(tmp_path / "both") if e["event"] == "averaged"] == [[4, 8]]


def test_a_launchers_copy_of_a_signal_is_the_same_stop(monkeypatch):
    """Under a launcher a process gets the signal sent to every process and the launcher's
    copy of it: counted as a second signal, it stopped at once and saved nothing."""
    with StopSignal(echo_s=2.0) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.name == "SIGTERM"
    raised = None
    try:
        with StopSignal() as stop:  # alone, a second signal still stops at once
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
    except SystemExit as exit_:
        raised = exit_.code
    assert raised == 143


def test_a_refused_resume_leaves_train_log_as_it_was(data_dir, tmp_path):
    """The lines printed before the checks (the cache reused) went to train.log, whose run
    the refusal left untouched otherwise."""
    assert train(data_dir, tmp_path, SMALL, "--name", "kept",
                 sets=["train.max_steps=2"]).returncode == 0
    log = (tmp_path / "kept" / "train.log").read_bytes()
    config = tmp_path / "kept" / "config.yaml"
    saved = config.read_text()
    config.write_text(saved.replace("seed: 1234", "seed: 99"))  # found against state.json
    refused = resume(data_dir, tmp_path / "kept", "train.max_steps=4")
    assert refused.returncode == 2 and "train.seed" in refused.stderr
    assert (tmp_path / "kept" / "train.log").read_bytes() == log
    config.write_text(saved)
    metrics_file = tmp_path / "kept" / "metrics.jsonl"
    kept_metrics = metrics_file.read_text()
    metrics_file.write_text(kept_metrics + '{"event": "train", "step": 3, bad\n')
    refused = resume(data_dir, tmp_path / "kept", "train.max_steps=4", "train.threads=1")
    assert refused.returncode == 2 and "metrics.jsonl" in refused.stderr
    assert (tmp_path / "kept" / "train.log").read_bytes() == log  # the threads line came first
    metrics_file.write_text(kept_metrics)
    accepted = resume(data_dir, tmp_path / "kept", "train.max_steps=4")
    assert accepted.returncode == 0, accepted.stderr
    assert b"cache: reusing" in (tmp_path / "kept" / "train.log").read_bytes()[len(log):]


def test_a_run_scored_with_another_bleu_tokenizer_is_rescored_on_resume():
    """`cmn` targets are Chinese now (zh BLEU); saves that recorded no BLEU tokenizer were
    scored with 13a for them, and their best was compared with zh-scored validations."""
    from attncli.core.config import Config, DataConfig
    from attncli.training.resume_rules import validation_changes, validation_settings

    config = Config(data=DataConfig(src="en", tgt="cmn"))
    before = {k: v for k, v in validation_settings(config).items() if k != "bleu.tokenize"}
    assert validation_changes(before, config) == ["bleu.tokenize '13a' -> 'zh'"]
    german = Config(data=DataConfig(src="en", tgt="de"))
    assert validation_changes(validation_settings(german), german) == []
    assert validation_changes(before | {"bleu.tokenize": "zh"}, config) == []
