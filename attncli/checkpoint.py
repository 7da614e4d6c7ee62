"""Checkpoints a crash cannot spoil: one folder per save, and one pointer file naming them.

    checkpoints/
      step-2000/
        model.safetensors      weights; metadata: step and the model config's fingerprint
        optimizer.safetensors  AdamW's tensors; metadata: step
        state.json             step, epoch, data position, schedule, RNG, optimizer scalars
      pointers.json            {"last": "step-2000", "best": "step-1500"}
      averaged/                the mean of the last N step folders (`attncli average`)

A save writes a temp folder, fsyncs its files and itself, renames it to `step-<N>`, and only
then replaces pointers.json (one atomic rename). A kill at any moment leaves pointers that name
complete folders; what the killed save left (a temp folder, or a finished folder no pointer
names yet) is removed by the next save. Older folders beyond `train.keep_checkpoints` go after
the pointer has moved, the best one excepted. Loading cross-checks the step and the model
fingerprint of the three files, so a folder assembled from different saves is refused.
No pickle anywhere: tensors in safetensors, everything else in JSON.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import signal
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from attncli.atomic import (
    atomic_write_json,
    remove_folder,
    remove_temp_entries,
    staged_folder,
)
from attncli.errors import AttncliError
from attncli.model.build import build_model
from attncli.runs import RunPaths

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
# Tensors in and out
# --------------------------------------------------------------------------------------------


def unique_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict with tied tensors stored once (safetensors refuses shared storage)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous().cpu()
    return out


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a safetensors file; anything else is a one-line error."""
    if not path.is_file():
        raise AttncliError(f"{path}: checkpoint file missing")
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
            return tensors, dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as err:
        raise AttncliError(
            f"{path}: not a valid safetensors checkpoint (truncated, corrupt or a pickle?): "
            f"{str(err).splitlines()[0][:120]}"
        ) from None


def load_state_dict_strictly(model: nn.Module, tensors: dict[str, torch.Tensor],
                             source: Path) -> None:
    """Every parameter present with its shape, nothing extra (tied copies come from their twin)."""
    expected = model.state_dict()
    owners = {t.data_ptr(): name for name, t in expected.items() if name in tensors}
    missing = [k for k in expected if k not in tensors and expected[k].data_ptr() not in owners]
    extra = [k for k in tensors if k not in expected]
    if missing or extra:
        raise AttncliError(f"{source}: checkpoint does not match the run's model config "
                           f"(missing {missing[:3]}, unexpected {extra[:3]})")
    try:
        model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:
        raise AttncliError(f"{source}: checkpoint does not match the model: "
                           f"{str(err).splitlines()[-1].strip()[:160]}") from None


def _split_optimizer_state(optimizer: torch.optim.Optimizer):
    """Optimizer state_dict -> (tensors for safetensors, everything else for JSON)."""
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, pstate in sd["state"].items():
        scalars[str(pid)] = {}
        for key, value in pstate.items():
            if torch.is_tensor(value) and value.dim() > 0:
                tensors[f"{pid}.{key}"] = value.contiguous().cpu()
            elif torch.is_tensor(value):
                scalars[str(pid)][key] = {"tensor": value.item(), "dtype": str(value.dtype)}
            else:
                scalars[str(pid)][key] = value
    return tensors, {"state": scalars, "param_groups": sd["param_groups"]}


def _join_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for pid, entries in meta["state"].items():
        state[int(pid)] = {
            k: (torch.tensor(v["tensor"], dtype=getattr(torch, v["dtype"].split(".")[-1]))
                if isinstance(v, dict) and "tensor" in v else v)
            for k, v in entries.items()
        }
    for name, tensor in tensors.items():
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = tensor
    return {"state": state, "param_groups": meta["param_groups"]}


# --------------------------------------------------------------------------------------------
# RNG state as JSON
# --------------------------------------------------------------------------------------------


def rng_state(device: torch.device) -> dict[str, Any]:
    """Python and torch RNG states as JSON-friendly data (torch state as base64 bytes), and
    the state of the CUDA device the run uses: not every visible GPU's, so a CPU run saves none
    and a run resumes on a machine with fewer GPUs."""
    state = {
        "python": _jsonable(random.getstate()),
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
    }
    if device.type == "cuda":
        state["cuda"] = base64.b64encode(torch.cuda.get_rng_state(device).numpy().tobytes()
                                         ).decode()
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Restore what `rng_state` saved; a CUDA state is restored only when training on CUDA."""
    random.setstate(_tupled(state["python"]))
    torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["torch"])),
                                         dtype=torch.uint8))
    saved = state.get("cuda")
    if isinstance(saved, list):  # attncli 0.2 saved every visible GPU's state
        saved = saved[0] if saved else None
    if saved is not None and device.type == "cuda":
        torch.cuda.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(saved)),
                                                  dtype=torch.uint8), device)


def _jsonable(x: Any) -> Any:
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x


def _tupled(x: Any) -> Any:
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x


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
            opt_tensors, opt_meta = _split_optimizer_state(optimizer)
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
                           f"({_io_reason(err)}); the previous checkpoint ({before}) is intact"
                           ) from None
    _phase("pointed", step)
    _prune(paths, keep)
    _phase("pruned", step)
    return paths.step_dir(step)


def _io_reason(err: Exception) -> str:
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
    """Keep the newest `keep` step folders up to `last`, and the best one."""
    pointed = paths.pointed_steps()
    last, best = pointed["last"], pointed.get("best")
    steps = [s for s in paths.step_dirs() if s <= last]
    for step in steps[:-keep]:
        if step != best:
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
    """The folder `name` means: 'last', 'best' (falls back to last), 'averaged' or 'step-N'."""
    pointers = paths.read_pointers()
    if not pointers and (paths.checkpoints / "last.safetensors").is_file():
        raise AttncliError(f"{paths.root}: checkpoints in attncli 0.1's layout "
                           "(checkpoints/last.*), which this version no longer reads; train the "
                           "run again, or use attncli 0.1 for it")
    if not pointers:
        raise AttncliError(f"{paths.root}: no checkpoint yet")
    if name in ("last", "best"):
        return paths.checkpoints / pointers.get(name, pointers["last"])
    folder = paths.averaged if name == "averaged" else paths.checkpoints / name
    if not (folder.is_dir() and (name == "averaged" or folder.name.startswith("step-"))):
        hint = ", ".join(checkpoint_names(paths))
        raise AttncliError(f"{paths.root}: no checkpoint {name!r} (this run has: {hint})")
    return folder


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
        optimizer.load_state_dict(_join_optimizer_state(opt_tensors, state["optimizer"]))
    except (KeyError, ValueError, RuntimeError) as err:
        raise AttncliError(f"{folder / OPTIMIZER_FILE}: does not match the model's parameters "
                           f"({str(err).splitlines()[0][:120]})") from None
    return state


# --------------------------------------------------------------------------------------------
# Averaging
# --------------------------------------------------------------------------------------------


def average_checkpoints(paths: RunPaths, last: int) -> tuple[Path, list[int]]:
    """Write `checkpoints/averaged/`: the element-wise mean of the newest `last` step folders.

    Averaging the weights of the last few checkpoints smooths the noise of the final updates
    (Vaswani et al. 2017 averaged the last 5 or 20); the result is a weights-only checkpoint for
    `eval` and `translate`, not a state to resume from.
    """
    newest = paths.pointed_steps().get("last")
    steps = [s for s in paths.step_dirs() if newest is not None and s <= newest][-last:]
    if len(steps) < last:
        raise AttncliError(f"{paths.root}: --last {last} needs {last} step folders, the run has "
                           f"{len(steps)} (train.keep_checkpoints sets how many are kept)")
    total: dict[str, torch.Tensor] = {}
    fingerprints = set()
    for step in steps:
        tensors, meta = read_tensors(paths.step_dir(step) / MODEL_FILE)
        fingerprints.add(meta.get("model_fingerprint"))
        for name, tensor in tensors.items():
            total[name] = total.get(name, 0) + tensor.double()
    if len(fingerprints) != 1:
        raise AttncliError(f"{paths.root}: step folders {steps} hold different model configs")
    mean = {name: (t / len(steps)).float().contiguous() for name, t in total.items()}
    remove_temp_entries(paths.checkpoints, f"{paths.averaged.name}.*")  # a killed average left
    meta = {"format": FORMAT, "step": str(steps[-1]), "model_fingerprint": fingerprints.pop(),
            "averaged_steps": ",".join(map(str, steps))}
    if paths.averaged.exists():
        remove_folder(paths.averaged)
    with staged_folder(paths.averaged) as folder:
        save_file(mean, folder / MODEL_FILE, metadata=meta)
        atomic_write_json(folder / STATE_FILE, {"format": FORMAT, "averaged_steps": steps,
                                                "model_fingerprint": meta["model_fingerprint"]})
    return paths.averaged, steps


def average_command(run_dir: Path, last: int) -> None:
    """`attncli average`: write checkpoints/averaged/ and say which steps went into it."""
    from attncli.runs import open_run

    folder, steps = average_checkpoints(open_run(run_dir), last)
    print(f"wrote {folder} (mean of steps {', '.join(map(str, steps))}); use it with "
          f"`attncli eval {run_dir} --checkpoint averaged`")


# --------------------------------------------------------------------------------------------
# A trained run, ready to translate
# --------------------------------------------------------------------------------------------


class TrainedModel:
    """What eval, translate and bench need from a run: its config, tokenizer and model.

    `engine` is another engine's exported copy of the model (`export.CTranslate2Engine`) when
    decoding goes there instead; `model` is then None.
    """

    def __init__(self, paths: RunPaths, config, tokenizer, model: nn.Module | None,
                 device: torch.device, checkpoint: Path, engine: Any = None):
        self.paths, self.config, self.tokenizer = paths, config, tokenizer
        self.model, self.device, self.checkpoint = model, device, checkpoint
        self.engine = engine


def load_trained_model(run_dir: Path, device: torch.device, checkpoint: str = "best",
                       weights: bool = True) -> TrainedModel:
    """Open a run folder and load its tokenizer and (unless `weights` is False) the named
    checkpoint's weights."""
    from attncli.config import load_config, model_fingerprint
    from attncli.runs import open_run
    from attncli.tokenizer import load_tokenizer

    paths = open_run(run_dir)
    folder = checkpoint_dir(paths, checkpoint)
    config = load_config(paths.config)
    tokenizer = load_tokenizer(paths, config.tokenizer.joint)
    if not weights:
        return TrainedModel(paths, config, tokenizer, None, device, folder)
    model = build_model(config, tokenizer)
    load_weights(model, folder, model_fingerprint(config.model))
    return TrainedModel(paths, config, tokenizer, model.to(device).eval(), device, folder)
