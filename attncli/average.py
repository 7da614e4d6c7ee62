"""`attncli average`: the element-wise mean of a run's newest step folders, as a checkpoint.

The result is `checkpoints/averaged/`, a weights-only checkpoint in the step folders' format
(see `checkpoint.py`), written like them through a temp folder renamed when complete.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from attncli.atomic import atomic_write_json, remove_folder, remove_temp_entries, staged_folder
from attncli.checkpoint import FORMAT, MODEL_FILE, STATE_FILE
from attncli.checkpoint_state import read_tensors
from attncli.errors import AttncliError
from attncli.runs import RunPaths, open_run


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
    folder, steps = average_checkpoints(open_run(run_dir), last)
    print(f"wrote {folder} (mean of steps {', '.join(map(str, steps))}); use it with "
          f"`attncli eval {run_dir} --checkpoint averaged`")
