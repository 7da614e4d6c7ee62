"""Training end to end through the CLI: run folder, resume, exact resume, determinism, errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from helpers import (
    SMALL,
    assert_one_line_error,
    losses,
    metrics,
    pointers,
    resume,
    run_cli,
    train,
)

from attncli.core.device import cpu_supports_bf16, resolve_pad_multiple
from attncli.training.figures import memory_fields


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    """Runs of the same tiny config: 6 steps straight, twice; 6 steps with batches collated by
    two worker processes; 3 steps then resumed to 6."""
    root = tmp_path_factory.mktemp("runs")
    results = {}
    for name in ("straight", "again"):
        results[name] = train(data_dir, root, SMALL, "--name", name, sets=["train.max_steps=6"])
    results["workers"] = train(data_dir, root, SMALL, "--name", "workers",
                               sets=["train.max_steps=6", "train.workers=2"])
    results["stopped"] = train(data_dir, root, SMALL, "--name", "split",
                               sets=["train.max_steps=3"])
    results["resumed"] = run_cli("train", "--resume", str(root / "split"),
                                 "--set", "train.max_steps=6", data_dir=data_dir)
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
    return root


def test_run_folder_has_every_artifact(runs):
    run = runs / "straight"
    for rel in ("config.yaml", "spm.model", "train.log", "curves.png", "metrics.jsonl",
                "checkpoints/pointers.json", "checkpoints/step-6/model.safetensors",
                "checkpoints/step-6/optimizer.safetensors", "checkpoints/step-6/state.json"):
        assert (run / rel).is_file(), rel
    pointers = json.loads((run / "checkpoints" / "pointers.json").read_text())
    assert pointers["last"] == "step-6" and (run / "checkpoints" / pointers["best"]).is_dir()
    state = json.loads((run / "checkpoints" / "step-6" / "state.json").read_text())
    assert state["step"] == 6 and {"optimizer", "rng", "epoch", "batch_index"} <= state.keys()
    # pad_multiple auto follows the run's precision (fp32 in the tests): 1
    expected = resolve_pad_multiple("auto", torch.device("cpu"), "fp32")
    assert state["pad_multiple"] == expected == 1
    assert not list(run.rglob(".tmp-*"))


def test_the_log_says_what_its_losses_and_scores_are_of(runs):
    """The training loss is label-smoothed, the validation loss not, and validation scores
    only the first data.valid_limit pairs: lines that did not say so read as comparable."""
    log = (runs / "straight" / "train.log").read_text()
    assert " (ls 0.1) | lr " in log
    assert "validation step 6 (first 16 of " in log
    # the first window's rate holds the process's start-up (data loader, first kernels)
    steps = [line for line in log.splitlines() if line.startswith("step ")]
    assert "tgt tok/s (incl. start-up)" in steps[0]
    assert not any("start-up" in line for line in steps[1:])
    train = [r for r in metrics(runs / "straight") if r["event"] == "train"]
    assert train[0]["includes_startup"] and "includes_startup" not in train[1]


def test_metrics_have_train_and_validation_events(runs):
    lines = (runs / "straight" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    train = [r for r in records if r["event"] == "train"]
    val = [r for r in records if r["event"] == "val"]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    assert {"step", "epoch", "loss", "lr", "tokens_per_s", "seconds"} <= train[0].keys()
    assert len(val) == 1 and {"val_loss", "val_bleu", "step"} <= val[0].keys()


def test_each_log_line_shows_the_resident_memory_and_the_end_its_peak(runs):
    """The figures of a user's system monitor: each train event's `rss_mb`, at most the peak
    the log's last lines print (rounded to 0.01 GB there)."""
    log = (runs / "straight" / "train.log").read_text().splitlines()
    steps = [line for line in log if line.startswith("step ")]
    assert steps and all(re.search(r" \| RSS \d+\.\d\d GB$", line) for line in steps)
    logged = [r["rss_mb"] for r in metrics(runs / "straight") if r["event"] == "train"]
    assert len(logged) == 6 and all(mb > 50 for mb in logged)  # torch alone is more
    [peak_line] = [line for line in log if line.startswith("peak memory: ")]
    peak_gb = float(re.match(r"peak memory: (\d+\.\d\d) GB resident", peak_line)[1])
    assert max(logged) <= peak_gb * 1000 + 5


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux's /proc")
def test_the_logged_memory_is_what_the_kernel_says():
    """`rss_mb` against /proc/self/status's VmRSS (the kernel's own line, not statm's pages)."""
    status = Path("/proc/self/status").read_text(encoding="ascii").splitlines()
    vm_rss = next(line for line in status if line.startswith("VmRSS:"))
    kernel_mb = int(vm_rss.split()[1]) * 1024 / 1e6
    assert memory_fields()["rss_mb"] == pytest.approx(kernel_mb, rel=0.1)


def test_same_seed_same_config_gives_identical_loss_curve(runs):
    assert losses(runs / "straight") == losses(runs / "again")


def test_batches_from_worker_processes_give_the_same_loss_curve(runs):
    assert "2 batch worker(s)" in (runs / "workers" / "train.log").read_text()
    assert losses(runs / "workers") == losses(runs / "straight")


def test_worker_processes_are_started_once_for_every_epoch(data_dir, tmp_path, monkeypatch):
    """Starting a pool of batch workers costs seconds on CUDA machines: once per run."""
    from torch.utils.data import dataloader

    pools, real_init = [], dataloader._MultiProcessingDataLoaderIter.__init__

    def counted_init(self, loader):
        pools.append(loader)
        real_init(self, loader)

    monkeypatch.setattr(dataloader._MultiProcessingDataLoaderIter, "__init__", counted_init)
    result = train(data_dir, tmp_path, SMALL, "--name", "epochs",
                   sets=["data.train_limit=60", "train.max_epochs=3", "train.workers=1"])
    assert result.returncode == 0, result.stderr
    epochs = {r["epoch"] for r in metrics(tmp_path / "epochs") if r["event"] == "train"}
    assert epochs == {0, 1, 2} and len(pools) == 1  # three epochs (each step labelled with
    # the epoch its batches came from, not the position after it), one pool of workers


def test_resumed_run_matches_uninterrupted_run(runs):
    straight, resumed = losses(runs / "straight"), losses(runs / "split")
    assert sorted(resumed) == [1, 2, 3, 4, 5, 6]
    for step in range(1, 7):
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6), step


def test_new_run_never_overwrites_an_old_one(runs, data_dir):
    result = train(data_dir, runs, SMALL, "--name", "straight",
                    sets=["train.max_steps=1"])
    assert result.returncode == 0, result.stderr
    assert (runs / "straight-2" / "config.yaml").is_file()
    pointers = json.loads((runs / "straight" / "checkpoints" / "pointers.json").read_text())
    assert pointers["last"] == "step-6"


@pytest.mark.parametrize("sets, expected", [
    (["data.dataset=no-such-corpus"], "not found"),
    (["data.tgt=xx"], "no language 'xx'"),
])
def test_bad_data_is_a_one_line_error(tmp_path, data_dir, sets, expected):
    result = train(data_dir, tmp_path / "runs", SMALL,
                    sets=sets, cwd=tmp_path)
    assert_one_line_error(result, expected)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_empty_training_split_is_a_one_line_error(tmp_path):
    corpus = tmp_path / "data" / "empty"
    corpus.mkdir(parents=True)
    (corpus / "train.jsonl").write_text('{"en": "  ", "de": ""}\n', encoding="utf-8")
    (corpus / "val.jsonl").write_text('{"en": "a", "de": "b"}\n', encoding="utf-8")
    result = train(tmp_path / "data", tmp_path / "runs", SMALL,
                    sets=["data.dataset=empty"], cwd=tmp_path)
    assert_one_line_error(result, "no non-empty")


def test_non_utf8_training_file_names_file_and_line(tmp_path):
    corpus = tmp_path / "data" / "broken"
    corpus.mkdir(parents=True)
    (corpus / "train.jsonl").write_bytes(b'{"en": "a", "de": "b"}\n{"en": "\xff", "de": "c"}\n')
    (corpus / "val.jsonl").write_text('{"en": "a", "de": "b"}\n', encoding="utf-8")
    result = train(tmp_path / "data", tmp_path / "runs", SMALL,
                    sets=["data.dataset=broken"], cwd=tmp_path)
    assert_one_line_error(result, "train.jsonl: line 2: not valid UTF-8")


def test_corrupt_sentencepiece_model_is_a_one_line_error(tmp_path, data_dir):
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"this is not a sentencepiece model")
    result = train(data_dir, tmp_path / "runs", SMALL,
                    sets=[f"tokenizer.model_file={bad}"], cwd=tmp_path)
    assert_one_line_error(result, "not a valid SentencePiece model")


def test_resume_of_a_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "plain").mkdir()
    for folder, expected in [(tmp_path / "plain", "not a run folder"),
                             (tmp_path / "missing", "does not exist")]:
        result = run_cli("train", "--resume", str(folder))
        assert_one_line_error(result, expected)


@pytest.mark.parametrize("fused", [True, False])
def test_an_update_with_a_non_finite_gradient_changes_nothing(fused):
    """The fused optimizer (what CUDA uses) skips on the device through `found_inf`; the
    foreach one is told on the host. Either way weights and optimizer state stay put, and a
    finite update after it is what it would have been without the skipped one."""
    from attncli.training.step import step_unless_not_finite

    def model_and_optimizer():
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 3)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1, weight_decay=0.1,
                                      fused=fused or None, foreach=None if fused else True)
        return layer, optimizer

    def update(layer, optimizer, scale):
        layer(torch.ones(2, 4)).sum().mul(scale).backward()
        norm = torch.nn.utils.get_total_norm([p.grad for p in layer.parameters()])
        step_unless_not_finite(optimizer, norm)
        optimizer.zero_grad(set_to_none=True)

    layer, optimizer = model_and_optimizer()
    update(layer, optimizer, 1.0)
    before = [p.detach().clone() for p in layer.parameters()]
    update(layer, optimizer, float("nan"))
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True))
    assert all(int(s["step"]) == 1 for s in optimizer.state.values())
    update(layer, optimizer, 1.0)

    plain, plain_optimizer = model_and_optimizer()
    update(plain, plain_optimizer, 1.0)
    update(plain, plain_optimizer, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), layer.parameters(),
                                                strict=True))


def test_compiled_loss_does_not_recompile_for_every_batch_shape(tiny_model_config):
    """Bucketed batches of many shapes: a static graph, a dynamic one, and at most one more (a
    batch of one pair is specialised), not a graph per shape. Backend aot_eager traces forward
    and backward as inductor would, without its minutes of code generation."""
    import numpy as np
    from torch._dynamo.utils import counters

    from attncli.data.batching import collate, token_batches
    from attncli.model.transformer import Seq2SeqTransformer
    from attncli.training.step import compile_loss

    torch._dynamo.reset()
    counters.clear()
    rng = np.random.default_rng(0)
    src_lens, tgt_lens = rng.integers(2, 90, 300), rng.integers(1, 90, 300)
    batches = token_batches(src_lens, tgt_lens, 600, seed=0, epoch=0, multiple=8)
    shapes = set()
    model = Seq2SeqTransformer(tiny_model_config.model_copy(update={"dropout": 0.1}), 50, 50)
    compile_loss(model, backend="aot_eager")
    model.train()
    for pairs in batches[:8]:
        batch = collate([[3] * (int(src_lens[i]) - 1) + [2] for i in pairs],
                        [[4] * int(tgt_lens[i]) for i in pairs], 8)
        shapes.add((tuple(batch.src.shape), tuple(batch.tgt_out.shape)))
        model.summed_loss(batch.src, batch.tgt_in, batch.tgt_out, label_smoothing=0.1).backward()
    assert len(shapes) >= 6
    assert counters["stats"]["unique_graphs"] <= 3, dict(counters["stats"])
    torch._dynamo.reset()


def test_tensorboard_true_without_it_is_refused_before_any_work(data_dir, tmp_path,
                                                              monkeypatch):
    monkeypatch.setattr("attncli.training.tensorboard._installed", lambda: False)
    result = train(data_dir, tmp_path, SMALL, sets=["train.tensorboard=true"])
    assert_one_line_error(result, "train.tensorboard is true but tensorboard is not installed")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # no run folder left behind


def test_tensorboard_events_hold_the_metrics_scalars(data_dir, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = train(data_dir, tmp_path, SMALL, "--name", "tb",
                   sets=["train.max_steps=6", "train.eval_every=3", "train.tensorboard=true"])
    assert result.returncode == 0, result.stderr
    run = tmp_path / "tb"
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    expected = {}
    for record in records:
        names = {"train": ("loss", "lr", "tokens_per_s", "grad_norm"),
                 "val": ("val_loss", "val_bleu")}.get(record["event"], ())
        for name in names:
            expected.setdefault(f"{record['event']}/{name}", []).append(
                (record["step"], record[name]))
    assert set(events.Tags()["scalars"]) == set(expected)
    for tag, points in expected.items():
        found = [(e.step, e.value) for e in events.Scalars(tag)]
        assert [s for s, _ in found] == [s for s, _ in points], tag
        for (_, value), (_, want) in zip(found, points, strict=True):
            assert value == pytest.approx(want, rel=1e-6), tag


def test_a_resume_without_tensorboard_drops_its_events_past_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from attncli.training.tensorboard import TensorBoardLog, open_tensorboard

    log = TensorBoardLog(tmp_path / "tb", None)
    for step in range(1, 7):
        log({"event": "train", "step": step, "loss": 1.0 / step, "lr": 1e-3, "tokens_per_s": 1,
             "grad_norm": 1.0})
    log.close()
    assert open_tensorboard(False, tmp_path / "tb", resumed_at=3) is None
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3]  # were 1..6


def test_the_progress_bar_counts_to_the_first_limit_the_run_will_meet():
    from attncli.core.config import TrainConfig
    from attncli.training.prepare import planned_updates

    # multi30k.yaml's 100 epochs of 133 batches end a --set train.max_steps=20000 run at 13,300
    assert planned_updates(TrainConfig(max_epochs=100, max_steps=20000), 133) == 13_300
    assert planned_updates(TrainConfig(max_epochs=100, max_steps=500), 133) == 500
    assert planned_updates(TrainConfig(max_epochs=2, accum_steps=2), 133) == 134
    assert planned_updates(TrainConfig(max_epochs=None, max_steps=None), 133) is None
    assert planned_updates(TrainConfig(max_epochs=100, max_minutes=30), 133) is None


def test_the_curves_start_a_new_line_where_smoothing_or_validation_changed(tmp_path,
                                                                          monkeypatch):
    """A resume may change train.label_smoothing or what validation scores: one line labelled
    with the current smoothing joined losses of two kinds, and BLEU of two kinds."""
    from matplotlib.axes import Axes

    from attncli.core.plots import plot_curves

    drawn: list[tuple[str | None, list]] = []
    real = Axes.plot

    def recording(ax, x, y, *args, **kwargs):
        drawn.append((kwargs.get("label"), list(x)))
        return real(ax, x, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", recording)
    train = [{"event": "train", "step": s, "loss": 5.0, **({"label_smoothing": 0.1} if s <= 4
                                                              else {"label_smoothing": 0.0})}
             for s in (2, 4, 6, 8)]
    val = [{"event": "val", "step": s, "val_loss": 4.0, "val_bleu": 1.0} for s in (4, 8)]
    plot_curves([*train, val[0], {"event": "validation_changed", "step": 4, "changes": []},
                 val[1]], tmp_path / "curves.png", label_smoothing=0.0)
    assert ("train loss (label-smoothed, 0.1)", [2, 4]) in drawn
    assert ("train loss", [6, 8]) in drawn
    bleu = [steps for label, steps in drawn if label is None]
    assert [4] in bleu and [8] in bleu and [4, 8] not in bleu


def test_a_run_goes_on_when_its_standard_output_goes_away(data_dir, tmp_path):
    """`attncli train ... | head`: the reader's exit broke stdout, and the run died at its next
    log line without a checkpoint (exit 1, nothing said)."""
    import subprocess
    import sys

    from helpers import REPO, train_args

    args = train_args(SMALL, "--name", "piped", runs=tmp_path,
                      sets=["train.max_steps=12", "train.save_every=6"])
    env = {**os.environ, "ATTNCLI_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "attncli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=REPO)
    process.stdout.readline()
    process.stdout.close()  # as `head -1` exits
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    assert pointers(tmp_path / "piped")["last"] == "step-12"
    assert "stopped at step 12" in (tmp_path / "piped" / "train.log").read_text()


@pytest.mark.skipif(not cpu_supports_bf16(), reason="this CPU has no bf16 support")
def test_bf16_training_on_this_cpu_repeats_itself_and_resumes_exactly(data_dir, tmp_path):
    """The tests train in fp32 on every CPU kind (helpers.TINY); where the CPU has bf16, its
    own padding multiple and kernels are checked here: the same seed gives the same curve, and
    a run stopped at a save and resumed follows it."""
    sets = ["train.precision=bf16", "train.pad_multiple=auto", "train.max_steps=6",
            "train.save_every=3"]
    for name, steps in (("straight", 6), ("again", 6), ("stopped", 3)):
        result = train(data_dir, tmp_path, SMALL, "--name", name,
                       sets=[*sets, f"train.max_steps={steps}"])
        assert result.returncode == 0, result.stderr
    assert resume(data_dir, tmp_path / "stopped", "train.max_steps=6").returncode == 0
    cpu = torch.device("cpu")
    state = json.loads((tmp_path / "straight" / "checkpoints" / "step-6" / "state.json")
                       .read_text())
    assert state["pad_multiple"] == resolve_pad_multiple("auto", cpu, "bf16")
    curve = losses(tmp_path / "straight")
    assert losses(tmp_path / "again") == curve and losses(tmp_path / "stopped") == curve
