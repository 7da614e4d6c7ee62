"""The run folder: the one description of its layout, the one reader of state.json,
finding runs again, and their checkpoints by the names `--checkpoint` takes.

    runs/<name>/
      config.yaml                  fully resolved config (every key)
      corpora.json                 what each training corpus gave (pairs read, dropped by each
                                   filter, kept, weight, share), its licence and attribution
                                   (every run from attncli 0.6; before, a mix's only)
      machine.json                 what each training session ran on: device, CPU, cores, bf16,
                                   processes, torch, from which step (from attncli 0.6); the
                                   CPU's family/model/stepping, threads per core, usable CPUs,
                                   kernel flags, torch's threads and a matmul calibration
                                   (issue 63; older entries lack them)
      README.md                    the model card (runs/card.py): written when training ends
                                   and by `attncli card RUN`
      spm.model                    SentencePiece model (joint) — or spm.src.model + spm.tgt.model
      parent.json                  a run fine-tuned from another (`train --init-from`): the parent
                                   as given, its checkpoint's name, weights SHA-256 and updates,
                                   and the parent's own parent.json (training/parent.py)
      checkpoints/
        step-<N>/                  one folder per save, written whole (see checkpoints.py):
          model.safetensors          weights; metadata: step and the model config's fingerprint
          optimizer.safetensors      AdamW's tensors; metadata: step
          state.json                 step, epoch, data position, schedule, RNG, optimizer scalars
        pointers.json              {"last": "step-<N>", "best": "step-<M>"}, replaced atomically
        averaged/                  the mean of the last step folders (`attncli average`, or
                                   train.average_last when training ends; see average.py):
                                   model.safetensors and a state.json of its steps and scores
      metrics.jsonl                one JSON object per log, validation or examples event
                                   (metrics.py)
      train.log                    the plain-text log
      curves.png                   training/validation loss and BLEU against steps
      tensorboard/                 the same events for TensorBoard (train.tensorboard)
      eval/<split>.hyp.txt, eval/<split>.json   written by `attncli eval` (--data: <split>-<data>.*;
                                   a mix: <split>-<corpus>.* for each corpus)
      ctranslate2/                 `attncli export`'s CTranslate2 model folder (its default),
                                   with attncli.json and the model card README.md
      <from>_<to>.argosmodel       `attncli export --to argos`: an Argos Translate package (a
                                   zip of one folder: metadata.json, model/, sentencepiece.model,
                                   README.md, attncli.json; decoding/argos.py)
      .train.lock                  held by the `attncli train` using the run (`run_lock`)

Torch-free, so that `attncli train` can check a run to resume before torch loads.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import filelock

from attncli.core.errors import AttncliError
from attncli.data.tokenizer import model_file

STEP_FOLDER = re.compile(r"step-(\d+)")
# The files of a step folder (and of checkpoints/averaged/, which has no optimizer file).
MODEL_FILE, OPTIMIZER_FILE, STATE_FILE = "model.safetensors", "optimizer.safetensors", "state.json"


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
    def corpora(self) -> Path:
        return self.root / "corpora.json"

    @property
    def parent_record(self) -> Path:
        """parent.json: the run this one was fine-tuned from (absent: trained from scratch)."""
        return self.root / "parent.json"

    @property
    def machine(self) -> Path:
        """What the run trained on, one entry per training session (from attncli 0.6)."""
        return self.root / "machine.json"

    @property
    def card(self) -> Path:
        """The model card, written when training ends and by `attncli card`."""
        return self.root / "README.md"

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
        """side None -> the joint model; 'src'/'tgt' -> a separate model (`model_file`)."""
        return model_file(self.root, side)


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
    collided with it at a save). `filelock`'s lock on RUN/.train.lock: the operating system
    releases it when the process ends however it ends, so a killed run never leaves it held,
    and it holds on Windows too."""
    lock = filelock.FileLock(paths.root / ".train.lock", timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise AttncliError(
            f"{paths.root}: in use by another `attncli train` (it holds "
            f"{paths.root / '.train.lock'}; `lsof` on that file names the process); resume "
            "it once that one has ended") from None
    try:
        yield
    finally:
        lock.release()


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


def read_parent_record(paths: RunPaths) -> dict[str, Any] | None:
    """A run's parent.json (None: the run was trained from scratch)."""
    if not paths.parent_record.is_file():
        return None
    try:
        record = json.loads(paths.parent_record.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AttncliError(f"{paths.parent_record}: not readable ({err})") from None
    if not isinstance(record, dict) or not {"run", "checkpoint", "weights_sha256"} <= set(record):
        raise AttncliError(f"{paths.parent_record}: not a parent record (expected run, "
                           f"checkpoint, weights_sha256)")
    return record


def find_latest_run(runs_dir: Path = Path("runs")) -> RunPaths:
    """The run under `runs_dir` whose last checkpoint was saved most recently."""
    candidates = [p for p in Path(runs_dir).glob("*/checkpoints/pointers.json") if p.is_file()]
    if not candidates:
        raise AttncliError(f"no trained run under {runs_dir}/ (train one with "
                           "`attncli train configs/small.yaml`, or pass --run RUN_DIR)")
    newest = max(candidates, key=lambda p: p.stat().st_mtime)
    return RunPaths(newest.parent.parent)


def checkpoint_names(paths: RunPaths) -> list[str]:
    """What `--checkpoint` can name in this run."""
    names = list(paths.read_pointers())
    if paths.averaged.is_dir():
        names.append("averaged")
    return names + [folder.name for folder in paths.step_dirs().values()]


def checkpoint_dir(paths: RunPaths, name: str) -> Path:
    """The folder `name` means: 'auto' (the default of eval, translate and export: averaged
    when the run has one of its newest saves, else best), 'last', 'best' (falls back to last),
    'averaged' or 'step-N'."""
    pointers = paths.read_pointers()
    if not pointers and (paths.checkpoints / "last.safetensors").is_file():
        raise AttncliError(f"{paths.root}: checkpoints in attncli 0.1's layout "
                           "(checkpoints/last.*), which this version no longer reads; train the "
                           "run again, or use attncli 0.1 for it")
    if not pointers:
        raise AttncliError(f"{paths.root}: no checkpoint yet")
    if name == "auto":
        name = "averaged" if _current_average(paths, pointers["last"]) else "best"
    if name in ("last", "best"):
        return paths.checkpoints / pointers.get(name, pointers["last"])
    folder = paths.averaged if name == "averaged" else paths.checkpoints / name
    if not (folder.is_dir() and (name == "averaged" or folder.name.startswith("step-"))):
        hint = ", ".join(checkpoint_names(paths))
        raise AttncliError(f"{paths.root}: no checkpoint {name!r} (this run has: {hint})")
    return folder


def _current_average(paths: RunPaths, last: str) -> bool:
    """Whether the run has an averaged checkpoint of saves up to its last one. A run resumed
    after averaging and stopped without averaging again (a signal, `average_last: 0`) keeps
    an older mean, which 'auto' must not prefer to the newer best; 'averaged' still names it.
    An unreadable averaged state counts as current, so that loading it says what is wrong.
    `last`: the run's last step folder's name, as its pointers say."""
    if not paths.averaged.is_dir():
        return False
    try:
        newest = max(int(step) for step in read_state(paths.averaged)["averaged_steps"])
    except (AttncliError, KeyError, TypeError, ValueError):
        return True
    return newest >= int(STEP_FOLDER.fullmatch(last).group(1))


def read_state(folder: Path) -> dict[str, Any]:
    """A checkpoint folder's state.json; missing or unreadable is a one-line error, not a
    traceback (loading a checkpoint, an averaged one's facts)."""
    path = folder / STATE_FILE
    if not path.is_file():
        raise AttncliError(f"{path}: checkpoint state missing")
    try:
        return json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AttncliError(f"{path}: corrupt checkpoint state ({err})") from None


def saved_state(folder: Path) -> dict[str, Any]:
    """`read_state`, or {} where it is missing or unreadable, or not an object: for the
    decisions a damaged save must not block (pruning, the resume limits), as loading it says
    what is wrong."""
    try:
        state = read_state(folder)
    except (AttncliError, OSError):
        return {}
    return state if isinstance(state, dict) else {}


def read_machines(paths: RunPaths) -> list[dict[str, Any]]:
    """machine.json's sessions; [] for a run made before it was written, or one whose file is
    damaged (the card then says nothing of the machine rather than something wrong)."""
    try:
        sessions = json.loads(paths.machine.read_text("utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(sessions, list):
        return []
    return [entry for entry in sessions if isinstance(entry, dict)]
