"""Running `attncli` in the test process, the tiny training config, and common assertions."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attncli.cli import main

REPO = Path(__file__).resolve().parents[1]
SMALL = str(REPO / "configs" / "small.yaml")
# small.yaml shrunk to seconds: a 35k-parameter model on 400 toy pairs.
TINY = [
    "data.train_limit=400", "data.valid_limit=16", "data.max_len=60",
    "tokenizer.vocab_size=400",
    "model.d_model=32", "model.heads=2", "model.enc_layers=1", "model.dec_layers=1",
    "model.ff_dim=64", "model.max_positions=128",
    "train.batch_tokens=400", "train.log_every=1", "train.eval_every=100",
    "train.warmup_steps=5", "decode.max_len_b=5", "decode.max_len_a=0.5",
    "train.average_last=0",  # small.yaml averages none; the tests of averaging set their own
    "train.lr=0.001", "model.dropout=0.1",  # what the tests were written for, not the recipe's
    # the schedule that needs no plan, so a resume with a raised limit goes on as the run that
    # never stopped (the budgeted shapes: test_lr_schedule.py)
    "train.lr_schedule=inverse_sqrt",
    # fp32 on every CPU kind: `auto` would train in bf16 where the CPU has it, and round batch
    # lengths to a multiple that depends on AMX, so each kind would train another model; the
    # padding multiple left to `auto` (1 in fp32), as most configs leave it
    "train.precision=fp32", "train.pad_multiple=auto",
    "train.examples=[]",  # small.yaml's examples are decoded at each validation (test_examples)
]


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


def train_args(*args: str, runs: Path, sets: Sequence[str] = ()) -> list[str]:
    """`train ARGS --runs-dir RUNS` with the tiny config's `--set`s, then `sets`."""
    cmd = ["train", *args, "--runs-dir", str(runs)]
    for item in [*TINY, *sets]:
        cmd += ["--set", item]
    return cmd


def train(data_dir: Path, runs: Path, *args: str, sets: Sequence[str] = (),
          cwd: Path | None = None) -> Result:
    return run_cli(*train_args(*args, runs=runs, sets=sets), data_dir=data_dir, cwd=cwd)


def resume(data_dir: Path, run: Path, *sets: str) -> Result:
    cmd = ["train", "--resume", str(run)]
    for item in sets:
        cmd += ["--set", item]
    return run_cli(*cmd, data_dir=data_dir)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def losses(run: Path) -> dict[int, float]:
    """Training loss by step; a step logged twice would be a bug, so it fails here."""
    train_events = [r for r in metrics(run) if r["event"] == "train"]
    steps = [r["step"] for r in train_events]
    assert len(steps) == len(set(steps)), f"duplicate steps in {run}/metrics.jsonl: {steps}"
    return {r["step"]: r["loss"] for r in train_events}


def pointers(run: Path) -> dict[str, str]:
    return json.loads((run / "checkpoints" / "pointers.json").read_text())


def assert_one_line_error(result: Result, expected: str) -> None:
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def train_tokenizer(cfg, src_texts: Sequence[str], tgt_texts: Sequence[str], folder: Path,
                    languages: tuple[str, str]):
    """A tokenizer trained on texts in memory (or `tokenizer.model_file` copied) into `folder`,
    as training does from its cached sample; for tests of small corpora."""
    from attncli.data.tokenizer import TokenizerModels, load_tokenizer, train_models

    texts = {"src": src_texts, "tgt": tgt_texts}
    models = (TokenizerModels.from_model_file(cfg) if cfg.model_file
              else train_models(cfg, texts.__getitem__, languages))
    models.install(folder)
    return load_tokenizer(folder, cfg.joint)
