"""Training end to end through the CLI: run folder, resume, exact resume, determinism, errors."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from attncli.cli import main
from attncli.device import resolve_pad_multiple, resolve_precision

TINY = [
    "data.train_limit=400", "data.valid_limit=16", "data.max_len=60",
    "tokenizer.vocab_size=400",
    "model.d_model=32", "model.heads=2", "model.enc_layers=1", "model.dec_layers=1",
    "model.ff_dim=64", "model.max_positions=128",
    "train.batch_tokens=400", "train.log_every=1", "train.eval_every=100",
    "train.warmup_steps=5", "decode.max_len_b=5", "decode.max_len_a=0.5",
]
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, data_dir: Path | None = None, cwd: Path | None = None) -> Result:
    """Run `attncli ARGS` in this process (a subprocess per run would re-import torch)."""
    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd, old_data = sys.argv, Path.cwd(), os.environ.get("ATTNCLI_DATA_DIR")
    sys.argv = ["attncli", *args]
    if data_dir is not None:
        os.environ["ATTNCLI_DATA_DIR"] = str(data_dir)
    os.chdir(cwd or REPO)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
        if old_data is None:
            os.environ.pop("ATTNCLI_DATA_DIR", None)
        else:
            os.environ["ATTNCLI_DATA_DIR"] = old_data
    return Result(code, out.getvalue(), err.getvalue())


def _train(data_dir: Path, runs: Path, *args: str, sets: list[str] = (),
           cwd: Path | None = None) -> Result:
    cmd = ["train", *args, "--runs-dir", str(runs)]
    for item in [*TINY, *sets]:
        cmd += ["--set", item]
    return run_cli(*cmd, data_dir=data_dir, cwd=cwd)


def _losses(run: Path) -> dict[int, float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["event"] == "train"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    """Three runs of the same tiny config: 6 steps straight, twice; 3 steps then resumed to 6."""
    root = tmp_path_factory.mktemp("runs")
    config = str(REPO / "configs" / "small.yaml")
    results = {}
    for name in ("straight", "again"):
        results[name] = _train(data_dir, root, config, "--name", name,
                               sets=["train.max_steps=6"])
    results["stopped"] = _train(data_dir, root, config, "--name", "split",
                                sets=["train.max_steps=3"])
    results["resumed"] = run_cli("train", "--resume", str(root / "split"),
                                 "--set", "train.max_steps=6", data_dir=data_dir)
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
    return root


def test_run_folder_has_every_artifact(runs):
    run = runs / "straight"
    for rel in ("config.yaml", "spm.model", "train.log", "curves.png", "metrics.jsonl",
                "checkpoints/last.safetensors", "checkpoints/last.json",
                "checkpoints/last.optim.safetensors", "checkpoints/best.safetensors",
                "checkpoints/best.json"):
        assert (run / rel).is_file(), rel
    state = json.loads((run / "checkpoints" / "last.json").read_text())
    assert state["step"] == 6 and {"optimizer", "rng", "epoch", "batch_index"} <= state.keys()
    # pad_multiple auto follows the precision auto picks here: 1 for fp32, 8 on a bf16 CPU
    cpu = torch.device("cpu")
    expected = resolve_pad_multiple("auto", cpu, resolve_precision("auto", cpu))
    assert state["pad_multiple"] == expected
    assert not list(run.rglob("*.tmp")) and not list(run.rglob(".*.tmp"))


def test_metrics_have_train_and_validation_events(runs):
    lines = (runs / "straight" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    train = [r for r in records if r["event"] == "train"]
    val = [r for r in records if r["event"] == "val"]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    assert {"step", "epoch", "loss", "lr", "tokens_per_s", "seconds"} <= train[0].keys()
    assert len(val) == 1 and {"val_loss", "val_bleu", "step"} <= val[0].keys()
    assert train[-1]["loss"] < train[0]["loss"]


def test_same_seed_same_config_gives_identical_loss_curve(runs):
    assert _losses(runs / "straight") == _losses(runs / "again")


def test_resumed_run_matches_uninterrupted_run(runs):
    straight, resumed = _losses(runs / "straight"), _losses(runs / "split")
    assert sorted(resumed) == [1, 2, 3, 4, 5, 6]
    for step in range(1, 7):
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6), step


def test_new_run_never_overwrites_an_old_one(runs, data_dir):
    result = _train(data_dir, runs, str(REPO / "configs" / "small.yaml"), "--name", "straight",
                    sets=["train.max_steps=1"])
    assert result.returncode == 0, result.stderr
    assert (runs / "straight-2" / "config.yaml").is_file()
    assert json.loads((runs / "straight" / "checkpoints" / "last.json").read_text())["step"] == 6


def _assert_one_line_error(result: Result, expected: str) -> None:
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("sets, expected", [
    (["data.dataset=no-such-corpus"], "not found"),
    (["data.tgt=xx"], "no language 'xx'"),
])
def test_bad_data_is_a_one_line_error(tmp_path, data_dir, sets, expected):
    result = _train(data_dir, tmp_path / "runs", str(REPO / "configs" / "small.yaml"),
                    sets=sets, cwd=tmp_path)
    _assert_one_line_error(result, expected)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_empty_training_split_is_a_one_line_error(tmp_path):
    corpus = tmp_path / "data" / "empty"
    corpus.mkdir(parents=True)
    (corpus / "train.jsonl").write_text('{"en": "  ", "de": ""}\n', encoding="utf-8")
    (corpus / "val.jsonl").write_text('{"en": "a", "de": "b"}\n', encoding="utf-8")
    result = _train(tmp_path / "data", tmp_path / "runs", str(REPO / "configs" / "small.yaml"),
                    sets=["data.dataset=empty"], cwd=tmp_path)
    _assert_one_line_error(result, "no non-empty")


def test_non_utf8_training_file_names_file_and_line(tmp_path):
    corpus = tmp_path / "data" / "broken"
    corpus.mkdir(parents=True)
    (corpus / "train.jsonl").write_bytes(b'{"en": "a", "de": "b"}\n{"en": "\xff", "de": "c"}\n')
    (corpus / "val.jsonl").write_text('{"en": "a", "de": "b"}\n', encoding="utf-8")
    result = _train(tmp_path / "data", tmp_path / "runs", str(REPO / "configs" / "small.yaml"),
                    sets=["data.dataset=broken"], cwd=tmp_path)
    _assert_one_line_error(result, "train.jsonl: line 2: not valid UTF-8")


def test_corrupt_sentencepiece_model_is_a_one_line_error(tmp_path, data_dir):
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"this is not a sentencepiece model")
    result = _train(data_dir, tmp_path / "runs", str(REPO / "configs" / "small.yaml"),
                    sets=[f"tokenizer.model_file={bad}"], cwd=tmp_path)
    _assert_one_line_error(result, "not a valid SentencePiece model")


def test_resume_of_a_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "plain").mkdir()
    for folder, expected in [(tmp_path / "plain", "not a run folder"),
                             (tmp_path / "missing", "does not exist")]:
        result = run_cli("train", "--resume", str(folder))
        _assert_one_line_error(result, expected)
