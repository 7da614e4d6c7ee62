"""A user's run survives faults: killed saves, refused resumes, bad weights, NaN, a full disk.

Every test trains the tiny config on the toy corpus (see conftest.py); the kills and the
file-size limit use real subprocesses, since neither can be faked inside the test process.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import (
    REPO,
    SMALL,
    assert_one_line_error,
    losses,
    metrics,
    pointers,
    resume,
    run_cli,
    train,
    train_args,
)
from safetensors.torch import load_file, save_file

from attncli.model.transformer import Seq2SeqTransformer
from attncli.runs.checkpoints import KILL_AT_ENV, SAVE_PHASES
from attncli.training.trainer import Trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir) -> Path:
    """`straight`: 6 updates, a step folder every 2 (steps 2, 4, 6 kept), validated at 6 on
    schedule (an end validation between scheduled ones would not count on in a resume)."""
    root = tmp_path_factory.mktemp("ckpt-runs")
    result = train(data_dir, root, SMALL, "--name", "straight",
                   sets=["train.max_steps=6", "train.save_every=2", "train.eval_every=6"])
    assert result.returncode == 0, result.stderr
    return root


def _copy(runs: Path, name: str) -> Path:
    target = runs / name
    shutil.copytree(runs / "straight", target)
    return target


def _cut_back(run: Path, step: int) -> None:
    """Make `run` look as if it had last saved at `step` (what a kill leaves behind)."""
    (run / "checkpoints" / "pointers.json").write_text(json.dumps({"last": f"step-{step}"}))


def _subprocess_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a subprocess run; its thread count is this process's, since a curve
    is only exact on the same threads (see training/extension.threads_notice)."""
    return {**os.environ, "ATTNCLI_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": str(torch.get_num_threads()), **extra}


# --------------------------------------------------------------------------------------------
# A kill inside a save
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", SAVE_PHASES)
def test_a_kill_at_any_phase_of_a_save_resumes_exactly(runs, data_dir, tmp_path, phase):
    args = train_args(SMALL, "--name", "killed", runs=tmp_path,
                      sets=["train.max_steps=6", "train.save_every=2"])
    killed = subprocess.run([sys.executable, "-m", "attncli", *args], capture_output=True,
                            text=True, timeout=600, cwd=tmp_path,
                            env=_subprocess_env(data_dir, **{KILL_AT_ENV: f"{phase}@4"}))
    assert killed.returncode == -9, killed.stderr
    run = tmp_path / "killed"
    saved = 4 if phase in ("pointed", "pruned") else 2
    assert pointers(run)["last"] == f"step-{saved}"
    result = resume(data_dir, run, "train.max_steps=6")
    assert result.returncode == 0, result.stderr
    assert losses(run) == pytest.approx(losses(runs / "straight"), abs=1e-6)
    assert sorted(losses(run)) == [1, 2, 3, 4, 5, 6]
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")] == []
    assert f"resumed {run} from step-{saved}" in (run / "train.log").read_text()


def _kill_once_it_trains(args: list[str], cwd: Path, env: dict[str, str], run: Path) -> None:
    """Start `attncli ARGS` and SIGKILL it as soon as metrics.jsonl shows a trained update."""
    process = subprocess.Popen([sys.executable, "-m", "attncli", *args], cwd=cwd, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (run / "metrics.jsonl").is_file() or '"train"' not in (
            run / "metrics.jsonl").read_text():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "no update within 300 s"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -9


def test_a_run_killed_before_its_first_save_trains_again_from_step_0(runs, data_dir,
                                                                      tmp_path):
    args = train_args(SMALL, "--name", "early", runs=tmp_path,
                      sets=["train.max_steps=1000", "train.eval_every=1000"])
    run = tmp_path / "early"
    _kill_once_it_trains(args, tmp_path, _subprocess_env(data_dir), run)
    assert "pointers.json" not in os.listdir(run / "checkpoints")
    (run / "spm.model").unlink()  # killed before the tokenizer was installed, too
    result = resume(data_dir, run, "train.max_steps=6", "train.eval_every=100")
    assert result.returncode == 0, result.stderr
    assert losses(run) == losses(runs / "straight")  # same seed, same config: same curve
    assert sorted(losses(run)) == [1, 2, 3, 4, 5, 6]  # the killed run's events are gone
    assert (run / "spm.model").read_bytes() == (runs / "straight" / "spm.model").read_bytes()
    assert pointers(run)["last"] == "step-6"
    assert os.listdir(tmp_path) == ["early"]  # the same folder, no second run beside it
    log = (run / "train.log").read_text()
    assert log.count("step      1 |") == 1 and "trains again from step 0" in log


def _resumed_from_step_4(runs: Path, data_dir: Path, name: str, tolerance: float,
                         edit_state=lambda state: None, sets: tuple[str, ...] = ()) -> Path:
    """A copy of the straight run resumed from step 4 to 6 (with `sets`), its losses checked
    against it."""
    run = _copy(runs, name)
    _cut_back(run, 4)
    state_file = run / "checkpoints" / "step-4" / "state.json"
    state = json.loads(state_file.read_text())
    edit_state(state)
    state_file.write_text(json.dumps(state))
    result = resume(data_dir, run, *sets)
    assert result.returncode == 0, result.stderr
    assert losses(run) == pytest.approx(losses(runs / "straight"), abs=tolerance)
    return run


def test_a_foreach_run_resumes_into_a_fused_optimizer(runs, data_dir):
    """What a run saved by attncli 0.4 (foreach AdamW on CPU) meets today, where the optimizer
    is fused on CPU and CUDA: the saved groups say foreach, the new optimizer is fused."""
    def as_saved_by_foreach(state):
        for group in state["optimizer"]["param_groups"]:
            group.update(fused=None, foreach=True)

    run = _resumed_from_step_4(runs, data_dir, "fused", 1e-5, as_saved_by_foreach)
    state = json.loads((run / "checkpoints" / "step-6" / "state.json").read_text())
    assert all(group["fused"] and not group["foreach"]
               for group in state["optimizer"]["param_groups"])


def test_a_resume_with_another_thread_count_says_so(runs, data_dir):
    run = _resumed_from_step_4(runs, data_dir, "threads", 1e-6,
                               lambda state: state.update(threads=99))
    assert "this run saved with 99 CPU threads and resumes with" in (run / "train.log").read_text()
    saved = json.loads((run / "checkpoints" / "step-6" / "state.json").read_text())
    assert saved["threads"] == torch.get_num_threads()


def test_a_resume_keeps_the_runs_pad_multiple_and_says_so(runs, data_dir, monkeypatch):
    monkeypatch.setattr("attncli.training.trainer.resolve_pad_multiple", lambda *args: 16)
    run = _resumed_from_step_4(runs, data_dir, "padded", 1e-6)
    saved = json.loads((run / "checkpoints" / "step-4" / "state.json").read_text())
    log = (run / "train.log").read_text()
    assert f"batch lengths stay rounded to multiples of {saved['pad_multiple']}," in log
    assert "this device would choose 16" in log


def test_auto_keeps_the_precision_a_run_began_in(runs, data_dir, monkeypatch):
    """A run begun in fp32, resumed with `precision: auto` where this machine's kind would
    choose bf16 (mocked): it stays in fp32, so its losses are the uninterrupted run's, and
    the log says why."""
    monkeypatch.setattr("attncli.training.trainer.resolve_precision", lambda *args: "bf16")
    run = _resumed_from_step_4(runs, data_dir, "auto-kept", 1e-6,
                               sets=("train.precision=auto",))
    assert ("training stays in fp32, as this run began (this machine would choose bf16"
            in (run / "train.log").read_text())
    saved = json.loads((run / "checkpoints" / "step-6" / "state.json").read_text())
    assert saved["precision"] == "fp32"


def test_a_named_precision_changes_the_path_and_says_so(runs, data_dir):
    """A run begun in bf16 (as on an AMX CPU), resumed with train.precision=fp32 named: fp32
    from there (the losses are the fp32 run's), said in the log. A save from before 0.7 (no
    precision recorded) resumes in what this machine chooses, silently."""
    run = _resumed_from_step_4(runs, data_dir, "named", 1e-6,
                               lambda state: state.update(precision="bf16"))
    assert ("training in fp32 from step 4 (train.precision; it trained in bf16 until here)"
            in (run / "train.log").read_text())
    run = _resumed_from_step_4(runs, data_dir, "before-0.7", 1e-6,
                               lambda state: state.pop("precision"))
    assert "training stays" not in (run / "train.log").read_text()
    saved = json.loads((run / "checkpoints" / "step-6" / "state.json").read_text())
    assert saved["precision"] == "fp32"


# --------------------------------------------------------------------------------------------
# What a resume refuses, and what it applies
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change, why", [
    ("model.heads=4", "changes the model"),
    ("model.ff_dim=32", "changes the model"),
    ("tokenizer.vocab_size=300", "changes the tokenizer"),
    ("data.train_limit=300", "changes the training data"),
    ("data.max_len=50", "changes the training data"),
    ("train.seed=7", "changes the data order"),
    ("train.batch_tokens=500", "changes the data order"),
    ("train.accum_steps=2", "changes the data order"),
])
def test_resume_refuses_what_it_cannot_honour(runs, data_dir, change, why):
    run = runs / "straight"
    before = {name: (run / name).read_bytes() for name in ("config.yaml", "metrics.jsonl")}
    result = resume(data_dir, run, change, "train.max_steps=8")
    assert_one_line_error(result, f"{change.split('=')[0]} cannot change when resuming")
    assert why in result.stderr and "max_steps" in result.stderr.split("May change:")[1]
    assert {name: (run / name).read_bytes() for name in before} == before


def test_allowed_optimizer_changes_are_applied_not_overwritten(runs, data_dir):
    run = _copy(runs, "betas")
    result = resume(data_dir, run, "train.max_steps=8", "train.betas=[0.8, 0.9]",
                    "train.weight_decay=0.01")
    assert result.returncode == 0, result.stderr
    state = json.loads((run / "checkpoints" / "step-8" / "state.json").read_text())
    groups = state["optimizer"]["param_groups"]
    assert [g["betas"] for g in groups] == [[0.8, 0.9], [0.8, 0.9]]
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    assert "- 0.8" in (run / "config.yaml").read_text()


def test_weights_load_strictly(runs, data_dir):
    run = _copy(runs, "strict")
    weights = run / "checkpoints" / "step-6" / "model.safetensors"
    tensors = load_file(weights)
    dropped = sorted(tensors)[-1]
    del tensors[dropped]
    with open(weights, "rb") as f:  # keep the metadata: only the tensors are wrong
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    save_file(tensors, weights, metadata=header["__metadata__"])
    assert_one_line_error(resume(data_dir, run, "train.max_steps=8"), "does not match")
    out = run_cli("translate", "--run", str(run), "--checkpoint", "last", "A dog.")
    assert_one_line_error(out, dropped)


def test_files_from_different_saves_are_refused(runs, data_dir):
    run = _copy(runs, "mixed")
    checkpoints = run / "checkpoints"
    shutil.copy(checkpoints / "step-4" / "optimizer.safetensors",
                checkpoints / "step-6" / "optimizer.safetensors")
    assert_one_line_error(resume(data_dir, run, "train.max_steps=8"),
                          "files from different saves")


def test_a_damaged_metrics_line_is_named_before_the_resume_rewrites_anything(runs, data_dir):
    run = _copy(runs, "damaged-metrics")
    lines = (run / "metrics.jsonl").read_text().splitlines(True)
    lines[2] = "garbage\n"
    (run / "metrics.jsonl").write_text("".join(lines))
    config_before = (run / "config.yaml").read_text()
    result = resume(data_dir, run, "train.max_steps=9")
    assert_one_line_error(result, f"{run / 'metrics.jsonl'}, line 3: not a metrics event")
    assert (run / "config.yaml").read_text() == config_before


def test_metrics_past_the_checkpoint_are_dropped_on_resume(runs, data_dir):
    run = _copy(runs, "replay")
    _cut_back(run, 4)  # as if killed after step 6 was logged but before it was saved
    result = resume(data_dir, run, "train.max_steps=6")
    assert result.returncode == 0, result.stderr
    assert losses(run) == pytest.approx(losses(runs / "straight"), abs=1e-6)
    val_steps = [r["step"] for r in metrics(run) if r["event"] == "val"]
    assert val_steps == [6]
    log = (run / "train.log").read_text()
    assert ("3 metric events past it dropped; train.log's lines above for steps past 4 are of "
            "the interrupted part, trained again from here") in log


def test_a_reached_limit_is_said_not_trained_past(runs, data_dir):
    """Refused before the data is prepared: the run folder is left exactly as it was (its
    log once grew by the preparation's lines)."""
    run = _copy(runs, "done")
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    assert_one_line_error(resume(data_dir, run), "train.max_steps (6) is reached already")
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


def test_a_resume_inside_a_log_window_logs_the_uninterrupted_runs_figures(data_dir, tmp_path):
    """Stopped at step 6 with log_every 4, the first train event after the resume (step 8)
    averaged steps 7-8 only; the open window is saved with the checkpoint."""
    sets = ["train.log_every=4", "train.eval_every=100"]
    straight = train(data_dir, tmp_path, SMALL, "--name", "whole",
                     sets=[*sets, "train.max_steps=8"])
    assert straight.returncode == 0, straight.stderr
    first = train(data_dir, tmp_path, SMALL, "--name", "halves",
                  sets=[*sets, "train.max_steps=6"])
    assert first.returncode == 0, first.stderr
    again = resume(data_dir, tmp_path / "halves", "train.max_steps=8")
    assert again.returncode == 0, again.stderr
    assert losses(tmp_path / "halves") == losses(tmp_path / "whole")  # steps 4 and 8


def test_a_hand_edited_config_cannot_change_a_fixed_key(runs, data_dir):
    """--set of train.seed is refused; the same change written into config.yaml was taken,
    and the saved data position then pointed into batches cut another way."""
    run = _copy(runs, "edited")
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("seed: 1234", "seed: 99"))
    assert_one_line_error(resume(data_dir, run, "train.max_steps=8"),
                          "train.seed is 99 in the run's config.yaml, but the run trained with "
                          "1234 (was the file edited?)")
    assert pointers(run)["last"] == "step-6"


def test_a_resume_that_changes_validation_scores_the_best_again(runs, data_dir):
    """BLEU of the old validation pairs and of the new ones were compared: `best`, patience
    and the end's averaging then chose on figures of two kinds."""
    run = _copy(runs, "revalidated")
    before = json.loads((run / "checkpoints" / pointers(run)["best"] / "state.json").read_text())
    result = resume(data_dir, run, "train.max_steps=8", "data.valid_limit=5")
    assert result.returncode == 0, result.stderr
    log = (run / "train.log").read_text()
    assert (f"validation changed (data.valid_limit 16 -> 5): the best checkpoint so far, "
            f"step-{before['best_step']}, scored again: greedy BLEU") in log
    # the curves break there (they joined BLEU on 16 pairs and on 5 in one line)
    (changed,) = [e for e in metrics(run) if e["event"] == "validation_changed"]
    assert changed["step"] == 6 and changed["changes"] == ["data.valid_limit 16 -> 5"]
    plain = _copy(runs, "same-validation")
    assert resume(data_dir, plain, "train.max_steps=8").returncode == 0
    assert "validation changed" not in (plain / "train.log").read_text()


@pytest.mark.parametrize("flag", [["--name", "other"], ["--runs-dir", "elsewhere"]])
def test_a_resume_refuses_the_new_run_flags_it_would_ignore(runs, data_dir, flag):
    run = _copy(runs, f"flags{flag[0]}")
    result = run_cli("train", "--resume", str(run), "--set", "train.max_steps=9", *flag,
                     data_dir=data_dir)
    assert_one_line_error(result, f"--resume {run} continues that run in its own folder: "
                                  "--name and --runs-dir are for a new run")


def test_a_crash_after_the_rescore_still_rescores_at_the_next_resume(runs, data_dir,
                                                                      monkeypatch):
    """The rescored best lives in memory until the next save, while config.yaml already holds
    the new settings: the next resume must compare with what the checkpoint was scored on."""
    run = _copy(runs, "crashed-rescore")

    def crash(trainer):
        raise RuntimeError("killed before the next save")

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "run", crash)
        assert resume(data_dir, run, "train.max_steps=8", "data.valid_limit=5").returncode == 1
    assert "valid_limit: 5" in (run / "config.yaml").read_text()
    result = resume(data_dir, run, "train.max_steps=8")
    assert result.returncode == 0, result.stderr
    log = (run / "train.log").read_text()
    assert log.count("validation changed (data.valid_limit 16 -> 5)") == 2


def test_a_live_run_is_not_resumed_by_a_second_process(runs, data_dir):
    """A second `--resume` of a run being trained loaded the other's older save, dropped its
    newer metrics and collided with it at a save: the run folder is held while training."""
    from attncli.runs.layout import RunPaths, run_lock

    run = _copy(runs, "live")
    with run_lock(RunPaths(run)):  # as the training process holds it
        refused = resume(data_dir, run, "train.max_steps=8")
        assert_one_line_error(refused, "in use by another `attncli train` (it holds ")
    assert pointers(run)["last"] == "step-6"
    again = resume(data_dir, run, "train.max_steps=8")
    assert again.returncode == 0, again.stderr
    assert pointers(run)["last"] == "step-8"


def test_a_run_stopped_by_patience_is_not_trained_past_on_resume(data_dir, tmp_path):
    """Resumed as it was, it trained one more validation interval and stopped again."""
    result = train(data_dir, tmp_path, SMALL, "--name", "patient",
                   sets=["train.max_steps=60", "train.eval_every=2", "train.patience=1",
                         "train.lr=1e-7"])  # too low to improve: the second validation stops it
    assert result.returncode == 0, result.stderr
    run = tmp_path / "patient"
    stopped = pointers(run)["last"]
    assert "(patience)" in (run / "train.log").read_text()
    assert_one_line_error(resume(data_dir, run), "train.patience (1) is reached already")
    assert pointers(run)["last"] == stopped
    again = resume(data_dir, run, "train.patience=2")
    assert again.returncode == 0, again.stderr


# --------------------------------------------------------------------------------------------
# Step folders: how many are kept, and averaging them
# --------------------------------------------------------------------------------------------


def test_the_newest_step_folders_and_the_best_are_kept(data_dir, tmp_path):
    result = train(data_dir, tmp_path, SMALL, "--name", "keep",
                   sets=["train.max_steps=7", "train.save_every=1", "train.eval_every=2",
                         "train.keep_checkpoints=2"])
    assert result.returncode == 0, result.stderr
    checkpoints = tmp_path / "keep" / "checkpoints"
    best = pointers(tmp_path / "keep")["best"]
    val = [r for r in metrics(tmp_path / "keep") if r["event"] == "val"]
    best_val = max(val, key=lambda r: (r["val_bleu"], -r["step"]))
    assert best == f"step-{best_val['step']}"  # the first of the highest BLEU
    kept = {p.name for p in checkpoints.iterdir() if p.is_dir()}
    assert kept == {"step-6", "step-7", best}


def test_average_writes_the_mean_that_eval_and_translate_can_use(runs, data_dir):
    run = _copy(runs, "averaged")
    out = run_cli("average", str(run), "--last", "2")
    assert out.returncode == 0, out.stderr
    folder = run / "checkpoints"
    step4, step6 = (load_file(folder / f"step-{s}" / "model.safetensors") for s in (4, 6))
    averaged = load_file(folder / "averaged" / "model.safetensors")
    assert averaged.keys() == step6.keys()
    for name, tensor in averaged.items():
        assert torch.allclose(tensor, step4[name] * 0.5 + step6[name] * 0.5, atol=1e-7), name
    assert not torch.equal(averaged["output_bias"], step6["output_bias"])
    scored = run_cli("eval", str(run), "--checkpoint", "averaged", "--beam", "1", "--json",
                     data_dir=data_dir)
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["checkpoint"] == "averaged"
    for name in ("averaged", "step-4", "last", "best"):
        said = run_cli("translate", "--run", str(run), "--checkpoint", name, "A dog.")
        assert said.returncode == 0, said.stderr


def test_a_full_disk_while_averaging_is_one_line_and_leaves_no_folder(runs, monkeypatch):
    from safetensors import SafetensorError

    from attncli.runs import average

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device "
                              "(os error 28)")

    run = _copy(runs, "full-average")
    monkeypatch.setattr(average, "save_file", full)
    assert_one_line_error(run_cli("average", str(run), "--last", "2"),
                          "could not write the averaged checkpoint (No space left on device)")
    assert not [p for p in (run / "checkpoints").iterdir()
                if p.name.startswith((".tmp-", "averaged"))]


def test_average_again_replaces_the_mean(runs):
    run = _copy(runs, "averaged-twice")
    for last in (2, 3):
        assert run_cli("average", str(run), "--last", str(last)).returncode == 0
    state = json.loads((run / "checkpoints" / "averaged" / "state.json").read_text())
    assert state["averaged_steps"] == [2, 4, 6]
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("fingerprint", ["other", "same"])
def test_average_refuses_weights_of_another_shape_before_adding(runs, fingerprint):
    """A step folder of another model (or a damaged one of the same fingerprint) is refused
    with one line, not a tensor-size error from the sum."""
    run = _copy(runs, f"mixed-{fingerprint}")
    weights = run / "checkpoints" / "step-4" / "model.safetensors"
    with open(weights, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    tensors = load_file(weights)
    tensors["output_bias"] = tensors["output_bias"][:10].clone()
    meta = dict(header["__metadata__"])
    if fingerprint == "other":
        meta["model_fingerprint"] = "another model"
    save_file(tensors, weights, metadata=meta)
    assert_one_line_error(run_cli("average", str(run), "--last", "2"),
                          "hold different model configs")
    assert not (run / "checkpoints" / "averaged").exists()


@pytest.mark.parametrize("args, expected", [
    (["average", "{run}", "--last", "4"], "--last 4 needs 4 step folders, the run has 3"),
    (["translate", "--run", "{run}", "--checkpoint", "step-5", "A dog."],
     "no checkpoint 'step-5' (this run has: last, best, step-2, step-4, step-6)"),
    (["eval", "{run}", "--checkpoint", "averaged"], "no checkpoint 'averaged'"),
])
def test_checkpoint_choices_that_do_not_exist(runs, args, expected):
    run = str(runs / "straight")
    assert_one_line_error(run_cli(*(a.format(run=run) for a in args)), expected)


# --------------------------------------------------------------------------------------------
# Non-finite updates
# --------------------------------------------------------------------------------------------


@pytest.fixture
def nan_at(monkeypatch):
    """nan_at(attempts): the training loss is NaN at those update attempts (1-based)."""
    attempts = {"n": 0}
    real = Seq2SeqTransformer.summed_loss

    def install(bad: set[int]) -> None:
        def summed_loss(self, *args, **kwargs):
            loss = real(self, *args, **kwargs)
            if not self.training:
                return loss
            attempts["n"] += 1
            return loss * float("nan") if attempts["n"] in bad else loss

        monkeypatch.setattr(Seq2SeqTransformer, "summed_loss", summed_loss)

    return install


def test_a_non_finite_update_is_skipped_and_logged(data_dir, tmp_path, nan_at):
    nan_at({3})
    result = train(data_dir, tmp_path, SMALL, "--name", "nan",
                   sets=["train.max_steps=6", "train.save_every=1", "train.keep_checkpoints=10"])
    assert result.returncode == 0, result.stderr
    run = tmp_path / "nan"
    skipped = [r for r in metrics(run) if r["event"] == "skipped"]
    assert [r["step"] for r in skipped] == [3] and "nan" in skipped[0]["reason"]
    assert sorted(losses(run)) == [1, 2, 4, 5, 6]  # update 3 has no training loss
    state = json.loads((run / "checkpoints" / "step-6" / "state.json").read_text())
    assert state["batch_index"] == 6  # the skipped update's batch was consumed
    # Update 3's weights gave a non-finite update: step 3 was neither validated nor saved.
    saved = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert "step-3" not in saved and {"step-2", "step-4"} <= set(saved)
    # The skipped update left the optimizer as it was: step 4's has taken 3 steps.
    optimizer = json.loads((run / "checkpoints" / "step-4" / "state.json").read_text())
    assert {s["step"]["tensor"] for s in optimizer["optimizer"]["state"].values()} == {3}
    weights = load_file(run / "checkpoints" / "step-6" / "model.safetensors")
    assert all(bool(torch.isfinite(t).all()) for t in weights.values())


def test_non_finite_updates_in_a_row_stop_the_run_and_keep_the_last_checkpoint(
        data_dir, tmp_path, nan_at):
    nan_at(set(range(5, 100)))
    result = train(data_dir, tmp_path, SMALL, "--name", "nan",
                   sets=["train.max_steps=8", "train.save_every=2",
                         "train.max_nonfinite_updates=3"])
    assert_one_line_error(result, "update 7: 3 non-finite updates in a row")
    run = tmp_path / "nan"
    # Step 6 came after two skipped updates: the weights that gave them were not saved (as
    # `last` they would have pruned good checkpoints, and every resume would start from them).
    assert "the last checkpoint (step-4) is intact" in result.stderr
    assert pointers(run)["last"] == "step-4"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "pointers.json", "step-2", "step-4"]
    nan_at(set())
    again = resume(data_dir, run, "train.max_steps=8")
    assert again.returncode == 0, again.stderr


def test_a_run_that_ends_during_non_finite_updates_saves_none_of_them(data_dir, tmp_path,
                                                                      nan_at):
    nan_at({5, 6})
    result = train(data_dir, tmp_path, SMALL, "--name", "nan-end",
                   sets=["train.max_steps=6", "train.save_every=2"])
    assert_one_line_error(result, "stopped (max_steps) after 2 non-finite update(s) in a row")
    assert "the last checkpoint (step-4) is intact" in result.stderr
    assert pointers(tmp_path / "nan-end")["last"] == "step-4"


# --------------------------------------------------------------------------------------------
# The disk
# --------------------------------------------------------------------------------------------


def test_a_file_size_limit_while_saving_keeps_the_previous_checkpoint(runs, data_dir):
    run = _copy(runs, "full")
    _cut_back(run, 2)
    limit = (run / "checkpoints" / "step-2" / "model.safetensors").stat().st_size - 1

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "attncli", "train", "--resume", str(run),
         "--set", "train.max_steps=4", "--set", "train.save_every=3"],
        capture_output=True, text=True, timeout=600, preexec_fn=small_files,
        env=_subprocess_env(data_dir))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "could not save the checkpoint of step 3 (File too large)" in done.stderr
    assert "the previous checkpoint (step-2) is intact" in done.stderr
    assert pointers(run)["last"] == "step-2"
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]
    result = resume(data_dir, run, "train.max_steps=6")
    assert result.returncode == 0, result.stderr
    assert losses(run) == pytest.approx(losses(runs / "straight"), abs=1e-6)


def test_an_unwritable_runs_dir_is_an_error_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_cli("train", SMALL, "--runs-dir", str(blocker / "runs"),
                     "--set", "data.dataset=no-such-corpus")
    assert_one_line_error(result, "cannot write run folders here")


def test_a_run_in_the_old_layout_is_named_as_such(runs, tmp_path):
    old = tmp_path / "old"
    (old / "checkpoints").mkdir(parents=True)
    shutil.copy(runs / "straight" / "config.yaml", old / "config.yaml")
    shutil.copy(runs / "straight" / "checkpoints" / "step-6" / "model.safetensors",
                old / "checkpoints" / "last.safetensors")
    assert_one_line_error(run_cli("translate", "--run", str(old), "A dog."),
                          "checkpoints in attncli 0.1's layout")


def test_a_position_in_batches_cut_another_way_is_not_resumed(runs, data_dir):
    """attncli 0.2 budgeted target tokens only; its batch index means other batches now."""
    run = _copy(runs, "old-batching")
    _cut_back(run, 4)
    state_file = run / "checkpoints" / "step-4" / "state.json"
    state = json.loads(state_file.read_text())
    del state["batching"]
    state_file.write_text(json.dumps(state))
    result = resume(data_dir, run, "train.max_steps=8")
    assert_one_line_error(result, "cannot resume exactly")


def test_a_resume_on_other_training_data_is_refused(runs, data_dir, tmp_path):
    """The data position indexes batches cut from the training pairs' lengths: with 20 pairs
    fewer it would point elsewhere, so the resume says why and writes nothing."""
    run = _copy(runs, "other-data")
    _cut_back(run, 4)
    other = Path(shutil.copytree(data_dir, tmp_path / "data"))
    train_file = other / "tatoeba-en-de" / "train.jsonl"
    train_file.write_text("".join(train_file.read_text().splitlines(keepends=True)[:380]))
    before = (run / "metrics.jsonl").read_bytes()
    result = resume(other, run, "train.max_steps=8")
    assert_one_line_error(result, "this run trained on other data (400 pairs, lengths ")
    assert "now 380 pairs" in result.stderr and "cannot resume exactly" in result.stderr
    assert (run / "metrics.jsonl").read_bytes() == before
    assert resume(data_dir, run, "train.max_steps=8").returncode == 0


def test_a_cpu_run_saves_no_gpu_random_state_and_ignores_one(runs):
    """Only the training device's generator is saved; a GPU state (attncli 0.2 saved every
    visible GPU's) does not stop a resume on a machine without that GPU."""
    from attncli.runs.checkpoints import rng_state, set_rng_state

    state = json.loads((runs / "straight" / "checkpoints" / "step-6" / "state.json").read_text())
    assert "cuda" not in state["rng"]
    cpu = torch.device("cpu")
    saved = {**rng_state(cpu), "cuda": ["bm90IGEgc3RhdGU="] * 8}
    expected = torch.rand(3)
    set_rng_state(saved, cpu)
    assert torch.equal(torch.rand(3), expected)
