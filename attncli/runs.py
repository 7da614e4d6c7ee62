"""The run folder: its layout, atomic writes, the metrics log, and finding runs again.

    runs/<name>/
      config.yaml                  fully resolved config (every key)
      spm.model                    SentencePiece model (joint) — or spm.src.model + spm.tgt.model
      checkpoints/last.safetensors model weights of the newest checkpoint
      checkpoints/last.optim.safetensors  optimizer moments (tensors, no pickle)
      checkpoints/last.json        step, epoch, scheduler, RNG and data position (JSON)
      checkpoints/best.*           the same for the best validation BLEU
      metrics.jsonl                one JSON object per log or validation event
      train.log                    the plain-text log
      curves.png                   training/validation loss and BLEU against steps
      eval/<split>.hyp.txt, eval/<split>.json   written by `attncli eval`
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncli.errors import AttncliError

if TYPE_CHECKING:
    from attncli.config import Config


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class RunPaths:
    """Where everything of one run lives; the one place that knows the file names."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def weights(self, tag: str) -> Path:
        """tag is 'last' or 'best'."""
        return self.checkpoints / f"{tag}.safetensors"

    def optimizer(self, tag: str) -> Path:
        return self.checkpoints / f"{tag}.optim.safetensors"

    def state(self, tag: str) -> Path:
        return self.checkpoints / f"{tag}.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def curves(self) -> Path:
        return self.root / "curves.png"

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"

    def spm_model(self, side: str | None = None) -> Path:
        """side None -> the joint model; 'src'/'tgt' -> a separate model."""
        return self.root / ("spm.model" if side is None else f"spm.{side}.model")


def create_run_dir(runs_dir: Path, name: str) -> RunPaths:
    """Make a fresh run folder; an existing name gets a -2, -3 ... suffix, never overwritten."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    candidate, n = runs_dir / name, 1
    while True:
        try:
            candidate.mkdir()
            break
        except FileExistsError:
            n += 1
            candidate = runs_dir / f"{name}-{n}"
    (candidate / "checkpoints").mkdir()
    return RunPaths(candidate)


def default_run_name(config_path: Path | None) -> str:
    stem = config_path.stem if config_path else "run"
    return f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def open_run(run_dir: Path, need: str | None = None) -> RunPaths:
    """Check that `run_dir` is a run folder (and, with need='best'/'last', has that checkpoint)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AttncliError(f"{run_dir}: run folder does not exist")
    paths = RunPaths(run_dir)
    if not paths.config.is_file():
        raise AttncliError(f"{run_dir}: not a run folder (no config.yaml); make one with "
                           "`attncli train CONFIG`")
    if need and not paths.weights(need).is_file():
        if need == "best" and paths.weights("last").is_file():
            return paths
        raise AttncliError(f"{run_dir}: no checkpoint yet ({paths.weights(need).name} missing)")
    return paths


def find_latest_run(runs_dir: Path = Path("runs")) -> RunPaths:
    """The most recently written run under `runs_dir` that has a best checkpoint."""
    candidates = [p for p in Path(runs_dir).glob("*/checkpoints/best.safetensors") if p.is_file()]
    if not candidates:
        raise AttncliError(f"no trained run under {runs_dir}/ (train one with "
                           "`attncli train configs/small.yaml`, or pass --run RUN_DIR)")
    newest = max(candidates, key=lambda p: p.stat().st_mtime)
    return RunPaths(newest.parent.parent)


class MetricsLog:
    """Appends one JSON object per event to metrics.jsonl (flushed at once, so a crash keeps it)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text("utf-8").splitlines() if line]


def training_config(config_path: Path | None, overrides: list[str],
                    resume: Path | None) -> tuple[Config, RunPaths | None]:
    """The config `attncli train` will use, and the run folder when resuming (else None).

    Torch-free on purpose: the CLI calls it before loading the trainer, so a missing or mistyped
    config, or a folder that is not a resumable run, is reported in a blink.
    """
    from attncli.config import load_config

    if resume is None and config_path is None:
        raise AttncliError("give a CONFIG file, or --resume RUN_DIR to continue a run")
    if resume is None:
        return load_config(config_path, overrides), None
    paths = open_run(resume)
    if not paths.state("last").is_file():
        raise AttncliError(f"{resume}: no last checkpoint to resume from")
    return load_config(paths.config, overrides), paths
