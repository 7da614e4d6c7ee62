"""The run folder: its layout, the metrics log, and finding runs again.

    runs/<name>/
      config.yaml                  fully resolved config (every key)
      spm.model                    SentencePiece model (joint) — or spm.src.model + spm.tgt.model
      checkpoints/step-<N>/        one folder per save (see checkpoint.py): model.safetensors,
                                   optimizer.safetensors, state.json
      checkpoints/pointers.json    {"last": "step-<N>", "best": "step-<M>"}, replaced atomically
      checkpoints/averaged/        the mean of the last step folders (`attncli average`, or
                                   train.average_last when training ends)
      metrics.jsonl                one JSON object per log, validation or examples event
      train.log                    the plain-text log
      curves.png                   training/validation loss and BLEU against steps
      eval/<split>.hyp.txt, eval/<split>.json   written by `attncli eval` (--data: <split>-<data>.*)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from attncli.core.config import Config
from attncli.core.config_files import load_config
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_text
from attncli.training.resume_rules import check_resume_changes, check_resume_limits
from attncli.training.tensorboard import tensorboard_wanted

STEP_FOLDER = re.compile(r"step-(\d+)")


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

    @property
    def pointers(self) -> Path:
        """Which step folders are `last` and `best`: one small JSON file, replaced atomically."""
        return self.checkpoints / "pointers.json"

    def step_dir(self, step: int) -> Path:
        return self.checkpoints / f"step-{step}"

    @property
    def averaged(self) -> Path:
        return self.checkpoints / "averaged"

    def step_dirs(self) -> dict[int, Path]:
        """Every step-<N> folder by its step (temp leftovers of a killed save excluded)."""
        found = {}
        if self.checkpoints.is_dir():
            for item in self.checkpoints.iterdir():
                match = STEP_FOLDER.fullmatch(item.name)
                if match and item.is_dir():
                    found[int(match.group(1))] = item
        return dict(sorted(found.items()))

    def read_pointers(self) -> dict[str, str]:
        """{'last': 'step-N', 'best': 'step-M'}, or {} before the first checkpoint."""
        if not self.pointers.is_file():
            return {}
        try:
            pointers = json.loads(self.pointers.read_text("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise AttncliError(f"{self.pointers}: corrupt checkpoint pointer ({err})") from None
        if not (isinstance(pointers, dict) and "last" in pointers and all(
                isinstance(v, str) and STEP_FOLDER.fullmatch(v) for v in pointers.values())):
            raise AttncliError(f"{self.pointers}: corrupt checkpoint pointer (expected "
                               '{"last": "step-N", ...})')
        return pointers

    def pointed_steps(self) -> dict[str, int]:
        """{'last': N, 'best': M}: the steps the pointers name ({} before the first save)."""
        return {name: int(STEP_FOLDER.fullmatch(folder).group(1))
                for name, folder in self.read_pointers().items()}

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

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


@contextlib.contextmanager
def run_lock(paths: RunPaths) -> Iterator[None]:
    """Hold the run folder for this training process: a second `attncli train --resume` of a
    live run is refused (it loaded the other's older save, dropped its newer metrics, and
    collided with it at a save). An advisory lock, released when the process ends however it
    ends; where `fcntl` is missing (Windows), nothing is held."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(paths.root / ".train.lock", "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise AttncliError(f"{paths.root}: in use by another `attncli train` ({holder}); "
                               "resume it once that one has ended") from None
        f.seek(0)
        f.truncate()
        f.write(f"PID {os.getpid()} on {socket.gethostname()}")
        f.flush()
        yield


def check_run_name(name: str) -> None:
    """A run name is one folder under --runs-dir: a path in it would be made (or fail) after
    the data is prepared, and an empty one would name the runs folder itself."""
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name:
        raise AttncliError(f"--name {name!r}: a run name is one folder name (not empty, no '/' "
                           f"or '\\'); --runs-dir says where run folders go")
    if len(name.encode("utf-8")) > 240:  # file systems take 255 bytes; '-2' suffixes need room
        raise AttncliError(f"--name: {len(name.encode('utf-8'))} bytes; a run name is at most "
                           "240 (a folder name)")


def default_run_name(config_path: Path | None) -> str:
    stem = config_path.stem if config_path else "run"
    return f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def open_run(run_dir: Path) -> RunPaths:
    """Check that `run_dir` is a run folder (it has its config.yaml)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AttncliError(f"{run_dir}: run folder does not exist")
    paths = RunPaths(run_dir)
    if not paths.config.is_file():
        raise AttncliError(f"{run_dir}: not a run folder (no config.yaml); make one with "
                           "`attncli train CONFIG`")
    return paths


def find_latest_run(runs_dir: Path = Path("runs")) -> RunPaths:
    """The run under `runs_dir` whose last checkpoint was saved most recently."""
    candidates = [p for p in Path(runs_dir).glob("*/checkpoints/pointers.json") if p.is_file()]
    if not candidates:
        raise AttncliError(f"no trained run under {runs_dir}/ (train one with "
                           "`attncli train configs/small.yaml`, or pass --run RUN_DIR)")
    newest = max(candidates, key=lambda p: p.stat().st_mtime)
    return RunPaths(newest.parent.parent)


def check_writable(folder: Path, what: str = "run folders",
                   fix: str = "choose another with --runs-dir") -> None:
    """Make `folder` (if needed) and prove a file can be created there, before any work."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise AttncliError(f"{folder}: cannot write {what} here ({err.strerror or err}); {fix}"
                           ) from None


class MetricsLog:
    """Appends one JSON object per event to metrics.jsonl (flushed at once, so a crash keeps it).

    With no path it keeps nothing: what the training processes other than rank 0 write to.
    `mirror`, when set, gets every record too (the TensorBoard log).
    """

    def __init__(self, path: Path | None):
        self.path = Path(path) if path is not None else None
        self.mirror: Callable[[dict[str, Any]], None] | None = None

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        if self.mirror is not None:
            self.mirror(record)

    def read(self) -> list[dict[str, Any]]:
        """Every event; a last line cut short by a kill is left out."""
        if self.path is None or not self.path.is_file():
            return []
        text = self.path.read_text("utf-8")
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            lines.pop()
        records = []
        for number, line in enumerate(lines, 1):
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise AttncliError(f"{self.path}, line {number}: not a metrics event ({err}); "
                                   "mend or delete that line") from None
        return records

    def drop_after(self, step: int) -> int:
        """Forget events past `step` (a resumed run replays them); returns how many went."""
        records = self.read()
        kept = [r for r in records if r.get("step", 0) <= step]
        if self.path is not None and self.path.is_file():
            atomic_write_text(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                 for r in kept))
        return len(records) - len(kept)


def saved_state(folder: Path) -> dict[str, Any]:
    """A checkpoint's state.json as saved ({} if unreadable: loading it says what is wrong)."""
    try:
        state = json.loads((folder / "state.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def training_config(config_path: Path | None, overrides: list[str], resume: Path | None,
                    name: str | None = None) -> tuple[Config, RunPaths | None]:
    """The config `attncli train` will use, and the run folder when resuming (else None).

    Torch-free on purpose: the CLI calls it before loading the trainer, so a missing or mistyped
    config, a bad run name, a folder that is not a resumable run, or a change that resuming
    cannot honour is reported in a blink, before any data is prepared or folder made.
    """
    if resume is None and config_path is None:
        raise AttncliError("give a CONFIG file, or --resume RUN_DIR to continue a run")
    if resume is not None and config_path is not None:
        raise AttncliError(f"--resume {resume} continues with that run's own config.yaml: give "
                           f"no CONFIG ({config_path}); --set changes what a resume may change")
    if name is not None:
        check_run_name(name)
    if resume is None:
        config, paths = load_config(config_path, overrides), None
    else:
        paths = open_run(resume)  # with no checkpoint yet, it trains again from step 0
        config = load_config(paths.config, overrides)
        check_resume_changes(load_config(paths.config), config, str(resume))
        if (last := paths.pointed_steps().get("last")) is not None:
            check_resume_limits(saved_state(paths.step_dir(last)), config.train, resume)
    tensorboard_wanted(config.train.tensorboard)  # true without it installed: said now
    return config, paths
