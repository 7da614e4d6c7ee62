"""Checkpoints a crash cannot spoil: one folder per save, and one pointer file naming them.

    checkpoints/
      step-2000/
        model.safetensors      weights; metadata: step and the model config's fingerprint
        optimizer.safetensors  AdamW's tensors; metadata: step
        state.json             step, epoch, data position, schedule, RNG, optimizer scalars
      pointers.json            {"last": "step-2000", "best": "step-1500"}
      averaged/                the mean of the last N step folders (`average.py`; written
                               when training ends if it validates better, see train.average_last)

A save writes a temp folder, fsyncs its files and itself, renames it to `step-<N>`, and only
then replaces pointers.json (one atomic rename). A kill at any moment leaves pointers that name
complete folders; what the killed save left (a temp folder, or a finished folder no pointer
names yet) is removed by the next save. Older folders beyond `train.keep_checkpoints` go after
the pointer has moved, the best one excepted. Loading cross-checks the step and the model
fingerprint of the three files, so a folder assembled from different saves is refused.
No pickle anywhere: tensors in safetensors, everything else in JSON (`checkpoint_state.py`).
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from torch import nn

from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_json, remove_folder, remove_temp_entries, staged_folder
from attncli.runs.checkpoint_state import (
    join_optimizer_state,
    load_state_dict_strictly,
    read_tensors,
    split_optimizer_state,
    unique_state_dict,
    with_implementation_of,
)
from attncli.runs.layout import STEP_FOLDER, RunPaths, saved_state

FORMAT = "attncli-checkpoint-2"
MODEL_FILE, OPTIMIZER_FILE, STATE_FILE = "model.safetensors", "optimizer.safetensors", "state.json"
# Test-only: `ATTNCLI_KILL_AT=<phase>@<step>` SIGKILLs the process at that point of that save,
# so the kill trials can hit every phase of a save (benchmarks/kill_trials.py).
KILL_AT_ENV = "ATTNCLI_KILL_AT"
SAVE_PHASES = ("started", "weights", "optimizer", "state", "renamed", "pointed", "pruned")


def _phase(name: str, step: int) -> None:
    if os.environ.get(KILL_AT_ENV) == f"{name}@{step}":
        os.kill(os.getpid(), signal.SIGKILL)


# --------------------------------------------------------------------------------------------
# Saving a step folder
# --------------------------------------------------------------------------------------------


def save_checkpoint(paths: RunPaths, model: nn.Module, optimizer: torch.optim.Optimizer,
                    state: dict[str, Any], fingerprint: str, best_step: int | None,
                    keep: int) -> Path:
    """Write `checkpoints/step-<state['step']>/`, point `last` (and `best`) at it, prune.

    A disk that is full, or a file-size limit, is a one-line error; the previous checkpoint
    stays what the pointers name.
    """
    step = state["step"]
    _clear_leftovers(paths)
    _phase("started", step)
    meta = {"format": FORMAT, "step": str(step), "model_fingerprint": fingerprint}
    try:
        with staged_folder(paths.step_dir(step)) as folder:
            save_file(unique_state_dict(model), folder / MODEL_FILE, metadata=meta)
            _phase("weights", step)
            opt_tensors, opt_meta = split_optimizer_state(optimizer)
            save_file(opt_tensors, folder / OPTIMIZER_FILE, metadata=meta)
            _phase("optimizer", step)
            atomic_write_json(folder / STATE_FILE, {
                **state, "format": FORMAT, "model_fingerprint": fingerprint,
                "optimizer": opt_meta})
            _phase("state", step)
        _phase("renamed", step)
        pointers = {"last": paths.step_dir(step).name}
        if best_step is not None:
            pointers["best"] = paths.step_dir(best_step).name
        atomic_write_json(paths.pointers, pointers)
    except (OSError, SafetensorError) as err:
        before = paths.read_pointers().get("last", "none")
        raise AttncliError(f"{paths.root}: could not save the checkpoint of step {step} "
                           f"({io_reason(err)}); the previous checkpoint ({before}) is intact"
                           ) from None
    _phase("pointed", step)
    _prune(paths, keep)
    _phase("pruned", step)
    return paths.step_dir(step)


def io_reason(err: Exception) -> str:
    """'File too large' from an OSError, or from safetensors' 'I/O error: ... (os error 27)'."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    found = re.search(r"I/O error: (.*?) \(os error \d+\)", str(err))
    return found.group(1) if found else str(err).splitlines()[0][:100]


def _clear_leftovers(paths: RunPaths) -> None:
    """Remove what a killed save left: temp folders, and step folders newer than `last`.

    Only a save's own temp names: an `attncli average` may be writing beside a running training.
    """
    paths.checkpoints.mkdir(parents=True, exist_ok=True)
    for name in ("step-*", f"{paths.pointers.name}.*"):
        remove_temp_entries(paths.checkpoints, name)
    last = paths.pointed_steps().get("last")
    for step, folder in paths.step_dirs().items():
        if last is None or step > last:
            remove_folder(folder)


def _prune(paths: RunPaths, keep: int) -> None:
    """Keep the newest `keep` step folders up to `last`, and the best one.

    A save between the run's own saves (state.json `interrupted`: a signal asked for it;
    `off_schedule`: the run ended at a limit there) is there for a resume: once a newer save
    exists it goes first, so that the saves kept, and those the end of the run averages, are
    the ones an uninterrupted run would have. The best save as the scheduled validations left
    it (the last save's `before_end`) stays while an extension may go on from it."""
    pointed = paths.pointed_steps()
    last = pointed["last"]
    keep_too = {pointed.get("best"),
                saved_state(paths.step_dir(last)).get("before_end", {}).get("best_step")}
    for step in [s for s in paths.step_dirs() if s < last and s not in keep_too]:
        state = saved_state(paths.step_dir(step))
        if state.get("interrupted") or state.get("off_schedule"):
            remove_folder(paths.step_dir(step))
    steps = [s for s in paths.step_dirs() if s <= last]
    for step in steps[:-keep]:
        if step not in keep_too:
            remove_folder(paths.step_dir(step))


# --------------------------------------------------------------------------------------------
# Finding and loading a checkpoint
# --------------------------------------------------------------------------------------------


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


def load_weights(model: nn.Module, folder: Path, fingerprint: str | None = None) -> dict:
    """Load a checkpoint folder's weights strictly; returns their metadata.

    With `fingerprint`, weights saved for another model config are refused.
    """
    tensors, meta = read_tensors(folder / MODEL_FILE)
    if fingerprint is not None and meta.get("model_fingerprint") != fingerprint:
        raise AttncliError(f"{folder}: weights were saved for another model config "
                           f"(fingerprint {meta.get('model_fingerprint')}, run {fingerprint})")
    load_state_dict_strictly(model, tensors, folder / MODEL_FILE)
    return meta


def read_state(folder: Path) -> dict[str, Any]:
    """A step folder's state.json; missing or unreadable is a one-line error, not a traceback."""
    path = folder / STATE_FILE
    if not path.is_file():
        raise AttncliError(f"{path}: checkpoint state missing")
    try:
        return json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AttncliError(f"{path}: corrupt checkpoint state ({err})") from None


def load_checkpoint(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    fingerprint: str) -> dict[str, Any]:
    """Restore model and optimizer from a step folder; returns its state (RNG not yet applied).

    The three files must agree on the step and on the model fingerprint, and the fingerprint
    must be the run's: anything else is refused with the reason, never half-loaded.
    """
    state = read_state(folder)
    weights_meta = load_weights(model, folder, fingerprint)
    opt_tensors, opt_meta = read_tensors(folder / OPTIMIZER_FILE)
    steps = {str(state.get("step")), weights_meta.get("step"), opt_meta.get("step")}
    if len(steps) != 1 or state.get("model_fingerprint") != fingerprint:
        raise AttncliError(f"{folder}: files from different saves (steps {sorted(map(str, steps))})"
                           f"; choose another checkpoint")
    try:
        saved = join_optimizer_state(opt_tensors, state["optimizer"])
        optimizer.load_state_dict(with_implementation_of(saved, optimizer))
    except (KeyError, ValueError, RuntimeError) as err:
        raise AttncliError(f"{folder / OPTIMIZER_FILE}: does not match the model's parameters "
                           f"({str(err).splitlines()[0][:120]})") from None
    return state
