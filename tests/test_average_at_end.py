"""`train.average_last`: when training ends, the mean of its last saves becomes the averaged
checkpoint if it validates better than best, and eval, translate and export then use it.

A tiny model's BLEU says nothing about averaging, so where a test needs the mean to be kept or
refused, `averaging.score_weights` is replaced by a stand-in score; the mean itself, the files
and the choice of checkpoint are the real ones. One test scores for real, and checks that the
scoring reproduces validation's BLEU for the best checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import SMALL, assert_one_line_error, metrics, pointers, resume, run_cli, train
from safetensors.torch import load_file
from test_signal_stops import signal_during_validation

from attncli.runs.checkpoints import read_tensors
from attncli.runs.layout import MODEL_FILE
from attncli.training import averaging
from attncli.training.validate import ValScores

SAVES = ["train.max_steps=6", "train.save_every=2", "train.average_last=3"]


def _scored(bleu):
    """A stand-in for `score_weights`: `bleu(trainer)` as the mean's greedy val BLEU."""
    return lambda trainer, weights: ValScores(1.0, bleu(trainer), 0.0, 0.0)


@pytest.fixture(scope="module")
def kept(tmp_path_factory, data_dir) -> tuple[Path, str]:
    """6 updates, a save every 2 (steps 2, 4, 6); their mean scored above best, so kept."""
    root = tmp_path_factory.mktemp("average-runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(averaging, "score_weights", _scored(lambda t: t.state.best_bleu + 5))
        result = train(data_dir, root, SMALL, "--name", "kept", sets=SAVES)
    assert result.returncode == 0, result.stderr
    return root / "kept", result.stdout


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def test_the_averaged_checkpoint_is_the_mean_of_the_last_saves(kept):
    run, stdout = kept
    folder = run / "checkpoints"
    saves = [load_file(folder / f"step-{s}" / MODEL_FILE) for s in (2, 4, 6)]
    averaged = load_file(folder / "averaged" / MODEL_FILE)
    assert averaged.keys() == saves[0].keys()
    for name, tensor in averaged.items():
        mean = (saves[0][name].double() + saves[1][name].double() + saves[2][name].double()) / 3
        assert torch.allclose(tensor.double(), mean, atol=1e-7), name
    assert not torch.equal(averaged["output_bias"], saves[2]["output_bias"])
    state = json.loads((folder / "averaged" / "state.json").read_text())
    (event,) = [r for r in metrics(run) if r["event"] == "averaged"]
    assert state["averaged_steps"] == event["steps"] == [2, 4, 6] and event["kept"]
    assert state["val_bleu"] == event["val_bleu"] == round(event["best_val_bleu"] + 5, 3)
    assert "averaged steps 2, 4, 6: greedy val BLEU" in stdout and "better, kept" in stdout


def _eval(run: Path, data_dir: Path, *args: str) -> dict:
    out = run_cli("eval", str(run), "--beam", "1", "--json", *args, data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_eval_and_translate_use_averaged_when_present_else_best(kept, data_dir, tmp_path):
    run, _ = kept
    report = _eval(run, data_dir)
    assert report["checkpoint"] == "averaged"
    assert report["averaged"]["averaged_steps"] == [2, 4, 6]
    said = run_cli("translate", "--run", str(run), "A dog.")
    assert said.returncode == 0, said.stderr
    assert "checkpoint averaged (mean of steps 2, 4, 6; greedy val BLEU" in said.stderr
    assert _eval(run, data_dir, "--checkpoint", "best")["checkpoint"] == pointers(run)["best"]
    plain = _copy(run, tmp_path)
    shutil.rmtree(plain / "checkpoints" / "averaged")
    report = _eval(plain, data_dir)
    assert report["checkpoint"] == pointers(plain)["best"] and "averaged" not in report
    said = run_cli("translate", "--run", str(plain), "A dog.")
    assert f"checkpoint {pointers(plain)['best']}\n" in said.stderr


def test_an_average_no_better_than_best_is_not_kept(kept, data_dir, tmp_path, monkeypatch):
    run = _copy(kept[0], tmp_path)
    finished = resume(data_dir, run)  # a finished run resumes as before, averaged untouched
    assert_one_line_error(finished, "train.max_steps (6) is reached already")
    assert (run / "checkpoints" / "averaged").is_dir()
    monkeypatch.setattr(averaging, "score_weights", _scored(lambda t: t.state.best_bleu))
    result = resume(data_dir, run, "train.max_steps=8")
    assert result.returncode == 0, result.stderr
    assert not (run / "checkpoints" / "averaged").exists()
    assert ("averaged steps 4, 6, 8: greedy val BLEU" in result.stdout
            and "not better, so no averaged checkpoint is kept (the earlier one removed)"
            in result.stdout)
    assert "not better" in (run / "train.log").read_text()
    events = [r for r in metrics(run) if r["event"] == "averaged"]
    assert [(e["steps"], e["kept"]) for e in events] == [([2, 4, 6], True), ([4, 6, 8], False)]
    assert _eval(run, data_dir)["checkpoint"] == pointers(run)["best"]


def test_an_average_older_than_the_last_save_is_not_the_default(kept, data_dir, tmp_path):
    """Resumed and ended without averaging again, a run keeps its old mean (of steps 2, 4, 6);
    'auto' then takes the newer best, and 'averaged' still names the old mean."""
    run = _copy(kept[0], tmp_path)
    result = resume(data_dir, run, "train.max_steps=8", "train.average_last=0")
    assert result.returncode == 0, result.stderr
    assert (run / "checkpoints" / "averaged").is_dir() and pointers(run)["last"] == "step-8"
    assert _eval(run, data_dir)["checkpoint"] == pointers(run)["best"]
    assert _eval(run, data_dir, "--checkpoint", "averaged")["checkpoint"] == "averaged"


def test_a_signal_while_the_run_ends_is_held_until_it_has_ended(data_dir, tmp_path,
                                                                monkeypatch):
    """SIGTERM at the start of the final validation: validation, the save and the averaging
    still happen, and the run exits 0, whole (before, the signal killed it there)."""
    signal_during_validation(monkeypatch, 6)
    monkeypatch.setattr(averaging, "score_weights", _scored(lambda t: t.state.best_bleu + 5))
    result = train(data_dir, tmp_path, SMALL, "--name", "held", sets=SAVES)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "held"
    assert pointers(run)["last"] == "step-6" and (run / "checkpoints" / "averaged").is_dir()
    assert [r["step"] for r in metrics(run) if r["event"] == "val"] == [6]
    assert "SIGTERM came while the run was ending" in result.stdout


def test_the_mean_is_scored_as_validation_scores(data_dir, tmp_path, monkeypatch):
    """The real scoring: given the best save's weights it gives validation's BLEU for them."""
    real, seen = averaging.score_weights, {}

    def spy(trainer, weights):
        best, _ = read_tensors(trainer.paths.step_dir(trainer.state.best_step) / MODEL_FILE)
        seen["best"], seen["rescored"] = trainer.state.best_bleu, real(trainer, best).bleu
        seen["mean"] = real(trainer, weights)
        return seen["mean"]

    monkeypatch.setattr(averaging, "score_weights", spy)
    result = train(data_dir, tmp_path, SMALL, "--name", "real",
                   sets=["train.max_steps=6", "train.save_every=2", "train.eval_every=2",
                         "train.average_last=2"])
    assert result.returncode == 0, result.stderr
    assert seen["rescored"] == pytest.approx(seen["best"], abs=1e-9)
    (event,) = [r for r in metrics(tmp_path / "real") if r["event"] == "averaged"]
    assert event["val_bleu"] == round(seen["mean"].bleu, 3) and event["steps"] == [4, 6]
    assert event["kept"] == (seen["mean"].bleu > seen["best"])
    assert (tmp_path / "real" / "checkpoints" / "averaged").is_dir() == event["kept"]


def test_a_run_with_too_few_saves_is_not_averaged(data_dir, tmp_path):
    result = train(data_dir, tmp_path, SMALL, "--name", "short",
                   sets=["train.max_steps=2", "train.average_last=3"])
    assert result.returncode == 0, result.stderr
    assert ("the run has 1 saved step folder(s), train.average_last asks for 3; no averaged "
            "checkpoint") in result.stdout
    assert not (tmp_path / "short" / "checkpoints" / "averaged").exists()


@pytest.mark.parametrize("sets", [["train.average_last=6"], ["train.average_last=1"],
                                  ["train.average_last=5", "train.keep_checkpoints=4"]])
def test_average_last_must_fit_the_saves_kept(data_dir, tmp_path, sets):
    result = train(data_dir, tmp_path, SMALL, sets=sets)
    assert_one_line_error(result, "must be 0 (off) or 2 to train.keep_checkpoints")
    assert list(tmp_path.iterdir()) == []
