"""Checkpoints a crash cannot spoil: the step folders and their files, saved and loaded.

A save writes a temp folder, fsyncs its files and itself, renames it to `step-<N>`, and only
then replaces pointers.json (one atomic rename). A kill at any moment leaves pointers that name
complete folders; what the killed save left (a temp folder, or a finished folder no pointer
names yet) is removed by the next save. Older folders beyond `train.keep_checkpoints` go after
the pointer has moved, the best one excepted. Loading cross-checks the step and the model
fingerprint of the three files, so a folder assembled from different saves is refused.

What the files hold: the weights and AdamW's per-parameter tensors in safetensors; the
optimizer's scalars (its `step` counts and hyper-parameters) and the Python and torch RNG
states in state.json. No pickle anywhere, so opening a checkpoint never runs code. Where the
files lie in the run folder, which folder a `--checkpoint` name means, and the one reader
of state.json: `layout.py`.
"""

from __future__ import annotations

import base64
import hashlib
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

from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_json, remove_folder, remove_temp_entries, staged_folder
from attncli.runs.layout import (
    MODEL_FILE,
    OPTIMIZER_FILE,
    STATE_FILE,
    RunPaths,
    read_state,
    saved_state,
)

FORMAT = "attncli-checkpoint-2"
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
                    state: dict[str, Any], *, fingerprint: str, best_step: int | None,
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
# Loading a checkpoint (found by name: `layout.checkpoint_dir`)
# --------------------------------------------------------------------------------------------


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


def weights_digest(checkpoint: Path) -> str:
    """SHA-256 of a checkpoint folder's weights file: what an export records of the weights it
    was made from, so that another run's export, or one older than a checkpoint written again
    (`averaged`), is told apart from a current one."""
    digest = hashlib.sha256()
    with open(checkpoint / MODEL_FILE, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Weights
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
    """Every parameter present with its shape, nothing extra (tied copies come from their twin);
    else one line naming the first tensor that differs (`tensor_mismatch`)."""
    if problem := tensor_mismatch(model, tensors):
        raise AttncliError(f"{source}: checkpoint does not match the run's model config: "
                           f"{problem}")
    try:
        model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:
        raise AttncliError(f"{source}: checkpoint does not match the model: "
                           f"{str(err).splitlines()[-1].strip()[:160]}") from None


def tensor_mismatch(model: nn.Module, tensors: dict[str, torch.Tensor]) -> str | None:
    """The first of the model's tensors (in its order) that `tensors` lacks or holds in another
    shape, else the first tensor of `tensors` the model has not; None when they fit. Tied
    tensors are stored once (`unique_state_dict`): a name is present when a twin is. Twins are
    told by parameter identity, so a model on the meta device (no storage) is checked too."""
    twins: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        twins.setdefault(id(param), []).append(name)
    tied = {name: names for names in twins.values() for name in names}
    expected = model.state_dict()
    for name, tensor in expected.items():
        given = next((tensors[twin] for twin in tied.get(name, [name]) if twin in tensors), None)
        if given is None:
            return f"{name} is missing"
        if given.shape != tensor.shape:
            return (f"{name} has shape {list(given.shape)}, the config's model "
                    f"{list(tensor.shape)}")
    extra = next((name for name in tensors if name not in expected), None)
    return None if extra is None else f"{extra} is not a tensor of the config's model"


# --------------------------------------------------------------------------------------------
# Optimizer
# --------------------------------------------------------------------------------------------


def split_optimizer_state(optimizer: torch.optim.Optimizer
                          ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Optimizer state_dict -> (tensors for safetensors, everything else for JSON).

    The 0-dim tensors (AdamW's `step` of every parameter, possibly on the GPU) become JSON
    numbers read in one host transfer: reading them one by one cost a device sync each, a few
    hundred per save for a Transformer.
    """
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    zero_dim: list[tuple[dict[str, Any], str, torch.Tensor]] = []  # (entries, key, tensor)
    for pid, pstate in sd["state"].items():
        scalars[str(pid)] = entries = {}
        for key, value in pstate.items():
            if torch.is_tensor(value) and value.dim() > 0:
                tensors[f"{pid}.{key}"] = value.contiguous().cpu()
            elif torch.is_tensor(value):
                entries[key] = None  # holds the key's place; filled below
                zero_dim.append((entries, key, value))
            else:
                entries[key] = value
    numbers = _host_values([value for _, _, value in zero_dim])
    for (entries, key, value), number in zip(zero_dim, numbers, strict=True):
        entries[key] = {"tensor": number, "dtype": str(value.dtype)}
    return tensors, {"state": scalars, "param_groups": sd["param_groups"]}


def _host_values(values: list[torch.Tensor]) -> list[int | float | bool]:
    """`[v.item() for v in values]` with one transfer per (device, dtype), not one per value.

    Grouping keeps each number exactly what `.item()` gives: stacking never mixes dtypes, so
    an int64 count stays an int and a float32 step is widened from float32 as `.item()` does.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, value in enumerate(values):
        groups.setdefault((value.device, value.dtype), []).append(i)
    out: list[int | float | bool] = [0] * len(values)
    for indices in groups.values():
        for i, number in zip(indices, torch.stack([values[i] for i in indices]).tolist(),
                             strict=True):
            out[i] = number
    return out


def join_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]
                         ) -> dict[str, Any]:
    """The optimizer state_dict that `split_optimizer_state` took apart, for `load_state_dict`."""
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


# The flags that choose how an optimizer runs, not what it computes: they follow the device a
# run is on now, never the one a checkpoint was saved on.
IMPLEMENTATION_FLAGS = ("fused", "foreach", "capturable", "differentiable")


def with_implementation_of(saved: dict[str, Any], optimizer: torch.optim.Optimizer
                           ) -> dict[str, Any]:
    """A saved optimizer state_dict whose groups take `optimizer`'s implementation flags.

    `load_state_dict` replaces the groups with the saved ones, flags included: a CPU run
    (foreach) resumed on CUDA would load `fused=None` into a fused optimizer, whose step then
    hands `found_inf` to the foreach path, which refuses it. The flags also decide where
    `load_state_dict` puts each `step` tensor (the fused kernel wants them on the device), so
    they must be right before loading, not patched after.
    """
    groups = [{**group, **{flag: current[flag] for flag in IMPLEMENTATION_FLAGS
                           if flag in current}}
              for group, current in zip(saved["param_groups"], optimizer.param_groups,
                                        strict=True)]
    return {**saved, "param_groups": groups}


# --------------------------------------------------------------------------------------------
# RNG state
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
