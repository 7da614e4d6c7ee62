"""`attncli export`: a checkpoint of the run written as a CTranslate2 model folder.

The conversion and the engine that decodes with the folder are `decoding/ctranslate2.py`'s;
this is the command: which checkpoint, where to write it (never over something that is not an
export), and what the folder records of the weights it was made from.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from attncli.core.errors import AttncliError
from attncli.core.files import entry_lock, output_folder_problem, replaced_folder
from attncli.decoding.ctranslate2 import (
    DEFAULT_FOLDER,
    METADATA,
    build_spec,
    check_exportable,
    import_ctranslate2,
    pieces,
    quantizations,
    write_spec,
)
from attncli.runs.checkpoints import weights_digest
from attncli.runs.trained import load_trained_model


def export_command(run_dir: Path, *, to: str, quantization: str, output: Path | None,
                   force: bool, checkpoint: str = "auto") -> Path:
    """`attncli export`: write the CTranslate2 folder; returns it."""
    if to != "ctranslate2":
        raise AttncliError(f"--to {to}: the one export target is ctranslate2")
    import_ctranslate2()
    if quantization not in quantizations():
        raise AttncliError(f"--quantization {quantization}: CTranslate2 stores one of "
                           f"{', '.join(quantizations())}")
    trained = load_trained_model(Path(run_dir), torch.device("cpu"), checkpoint)
    check_exportable(trained.config)
    target = _export_target(output or trained.paths.root / DEFAULT_FOLDER, trained.paths.root,
                            force)
    if problem := output_folder_problem(target.parent):  # before the conversion
        raise AttncliError(f"--output {target}: {problem}")
    spec = build_spec(trained.model, pieces(trained.tokenizer.src),
                      pieces(trained.tokenizer.tgt))
    with entry_lock(target, print), replaced_folder(target) as staging:
        write_spec(spec, staging, quantization)
        (staging / METADATA).write_text(json.dumps({
            "run": str(trained.paths.root.resolve()), "checkpoint": trained.checkpoint.name,
            "weights_sha256": weights_digest(trained.checkpoint),
            "quantization": quantization, "max_positions": trained.config.model.max_positions},
            indent=1))
    print(f"exported {trained.paths.root} ({trained.checkpoint.name}) to {target} "
          f"({quantization})")
    return target


def _export_target(target: Path, run_root: Path, force: bool) -> Path:
    """The folder to write, refused where replacing it could lose what is not an export: the
    run itself, a folder holding it, a file, or any folder without our metadata."""
    where = target.resolve()
    if where == run_root.resolve() or where in run_root.resolve().parents:
        raise AttncliError(f"--output {target}: that folder holds the run itself; export to a "
                           "folder of its own")
    if where.exists() and not (where / METADATA).is_file():
        raise AttncliError(f"{target} exists and is not a CTranslate2 export made by attncli; "
                           "it is left as it is: --output a new folder")
    if where.exists() and not force:
        raise AttncliError(f"{target} exists; give --force to replace it, or --output another "
                           "folder")
    return where
