"""Averaged checkpoints: the element-wise mean of a run's newest step folders.

`attncli average` writes one on request; training writes one when it ends, if
`train.average_last` asks and the mean validates better than the best checkpoint
(`training/averaging.py`). Either way the result is `checkpoints/averaged/`, a weights-only
checkpoint in the step folders' format (see `checkpoints.py`), written like them through a temp
folder renamed when complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from attncli.core.errors import AttncliError
from attncli.core.files import (
    atomic_write_json,
    remove_folder,
    remove_temp_entries,
    replaced_folder,
)
from attncli.runs.checkpoints import FORMAT, io_reason, read_tensors
from attncli.runs.layout import MODEL_FILE, STATE_FILE, RunPaths, open_run, read_state


def newest_steps(paths: RunPaths, last: int) -> list[int]:
    """The steps of the newest `last` step folders up to `last` (fewer when fewer exist)."""
    newest = paths.pointed_steps().get("last")
    return [s for s in paths.step_dirs() if newest is not None and s <= newest][-last:]


def mean_weights(paths: RunPaths, steps: list[int]) -> tuple[dict[str, torch.Tensor], str]:
    """The element-wise mean (summed in float64) of the step folders' weights, and their
    model fingerprint; folders of different model configs are refused.

    Averaging the weights of the last few checkpoints smooths the noise of the final updates
    (Vaswani et al. 2017 averaged the last 5 or 20).
    """
    total: dict[str, torch.Tensor] = {}
    fingerprint = None
    for step in steps:
        tensors, meta = read_tensors(paths.step_dir(step) / MODEL_FILE)
        shapes = {name: tensor.shape for name, tensor in tensors.items()}
        if total and (meta.get("model_fingerprint") != fingerprint
                      or shapes != {name: t.shape for name, t in total.items()}):
            raise AttncliError(f"{paths.root}: step folders {steps} hold different model "
                               "configs")
        fingerprint = meta.get("model_fingerprint")
        for name, tensor in tensors.items():
            total[name] = total.get(name, 0) + tensor.double()
    mean = {name: (t / len(steps)).float().contiguous() for name, t in total.items()}
    return mean, fingerprint


def write_averaged(paths: RunPaths, mean: dict[str, torch.Tensor], steps: list[int], *,
                   fingerprint: str, record: dict[str, Any] | None = None) -> Path:
    """Replace `checkpoints/averaged/` with `mean`; `record` (its validation scores) goes to its
    state.json beside the averaged steps."""
    meta = {"format": FORMAT, "step": str(steps[-1]), "model_fingerprint": fingerprint,
            "averaged_steps": ",".join(map(str, steps))}
    remove_temp_entries(paths.checkpoints, f"{paths.averaged.name}.*")  # a killed write left
    try:
        with replaced_folder(paths.averaged) as folder:
            save_file(mean, folder / MODEL_FILE, metadata=meta)
            atomic_write_json(folder / STATE_FILE, {"format": FORMAT, "averaged_steps": steps,
                                                    "model_fingerprint": fingerprint,
                                                    **(record or {})})
    except (OSError, SafetensorError) as err:
        raise AttncliError(f"{paths.root}: could not write the averaged checkpoint "
                           f"({io_reason(err)}); the step folders are intact, and `attncli "
                           f"average {paths.root} --last {len(steps)}` writes it later") from None
    return paths.averaged


def averaged_facts(folder: Path) -> dict[str, Any]:
    """What an averaged checkpoint folder records: its steps and, when training wrote it, its
    validation scores and the best checkpoint's; {} for any other folder."""
    if folder.name != "averaged" or not (folder / STATE_FILE).is_file():
        return {}
    state = read_state(folder)
    keys = ("averaged_steps", "val_bleu", "best_step", "best_val_bleu")
    return {key: state[key] for key in keys if key in state}


def describe(folder: Path) -> str:
    """A checkpoint folder's name, with what an averaged one is the mean of and how it
    validated: 'averaged (mean of steps 4, 6; greedy val BLEU 12.00, best 10.00)'."""
    facts = averaged_facts(folder)
    if "averaged_steps" not in facts:
        return folder.name
    said = f"mean of steps {', '.join(map(str, facts['averaged_steps']))}"
    if "val_bleu" in facts:
        said += f"; greedy val BLEU {facts['val_bleu']:.2f}, best {facts['best_val_bleu']:.2f}"
    return f"{folder.name} ({said})"


def remove_averaged(paths: RunPaths) -> bool:
    """Remove `checkpoints/averaged/` (and what a killed write of it left); True if there was
    one."""
    remove_temp_entries(paths.checkpoints, f"{paths.averaged.name}.*")
    if not paths.averaged.exists():
        return False
    remove_folder(paths.averaged)
    return True


def average_checkpoints(paths: RunPaths, last: int) -> tuple[Path, list[int]]:
    """Write `checkpoints/averaged/`: the element-wise mean of the newest `last` step folders,
    a weights-only checkpoint for `eval` and `translate`, not a state to resume from."""
    steps = newest_steps(paths, last)
    if len(steps) < last:
        raise AttncliError(f"{paths.root}: --last {last} needs {last} step folders, the run has "
                           f"{len(steps)} (train.keep_checkpoints sets how many are kept)")
    mean, fingerprint = mean_weights(paths, steps)
    return write_averaged(paths, mean, steps, fingerprint=fingerprint), steps


def average_command(run_dir: Path, last: int) -> None:
    """`attncli average`: write checkpoints/averaged/ and say which steps went into it."""
    folder, steps = average_checkpoints(open_run(run_dir), last)
    print(f"wrote {folder} (mean of steps {', '.join(map(str, steps))}); `attncli eval "
          f"{run_dir}` and `translate` now use it by default (--checkpoint best for the best)")
