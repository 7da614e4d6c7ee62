"""`attncli export`: a checkpoint of the run written as a CTranslate2 model folder, or as an
Argos Translate package (`--to argos`), each with the run's model card.

The conversion and the engine that decodes with the folder are `decoding/ctranslate2.py`'s, the
package format `decoding/argos.py`'s, the card `runs/card.py`'s; this is the command: which
checkpoint, where to write it (never over something that is not an export made by attncli),
and what the export records of the weights it was made from.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from attncli.core.errors import AttncliError
from attncli.core.files import (
    entry_lock,
    output_file_problem,
    output_folder_problem,
    replaced_folder,
)
from attncli.core.version import __version__
from attncli.decoding import argos
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
from attncli.runs.card import Export, card_text
from attncli.runs.checkpoints import weights_digest
from attncli.runs.trained import TrainedModel, load_trained_model

TARGETS = ("ctranslate2", "argos")
CARD = "README.md"


def export_command(run_dir: Path, *, to: str, quantization: str, output: Path | None,
                   force: bool, checkpoint: str = "auto") -> Path:
    """`attncli export`: write the CTranslate2 folder or the Argos package; returns it."""
    if to not in TARGETS:
        raise AttncliError(f"--to {to}: the export targets are {' and '.join(TARGETS)}")
    import_ctranslate2()
    if quantization not in quantizations():
        raise AttncliError(f"--quantization {quantization}: CTranslate2 stores one of "
                           f"{', '.join(quantizations())}")
    trained = load_trained_model(Path(run_dir), torch.device("cpu"), checkpoint)
    check_exportable(trained.config)
    if to == "argos":
        argos.check_servable(trained.config)
        target = _export_argos(trained, quantization, output, force)
    else:
        target = _export_ctranslate2(trained, quantization, output, force)
    print(f"exported {trained.paths.root} ({trained.checkpoint.name}) to {target} "
          f"({quantization})")
    return target


def _made_from(trained: TrainedModel, quantization: str) -> dict:
    """attncli.json: the checkpoint, its weights' SHA-256 and the stored type."""
    return {"checkpoint": trained.checkpoint.name,
            "weights_sha256": weights_digest(trained.checkpoint),
            "quantization": quantization, "max_positions": trained.config.model.max_positions}


def _export_ctranslate2(trained: TrainedModel, quantization: str, output: Path | None,
                        force: bool) -> Path:
    """The CTranslate2 folder (its model files as before), attncli.json and the card."""
    target = _export_target(output or trained.paths.root / DEFAULT_FOLDER, trained.paths.root,
                            force)
    if problem := output_folder_problem(target.parent):  # before the conversion
        raise AttncliError(f"--output {target}: {problem}")
    spec = build_spec(trained.model, pieces(trained.tokenizer.src),
                      pieces(trained.tokenizer.tgt))
    card = card_text(trained, Export("CTranslate2 model folder", quantization))
    with entry_lock(target, print), replaced_folder(target) as staging:
        write_spec(spec, staging, quantization)
        # the run's path: `runs.trained` tells the run's own export from another run's by it
        (staging / METADATA).write_text(json.dumps(
            {"run": str(trained.paths.root.resolve()), **_made_from(trained, quantization)},
            indent=1))
        (staging / CARD).write_text(card, encoding="utf-8")
    return target


def _export_argos(trained: TrainedModel, quantization: str, output: Path | None,
                  force: bool) -> Path:
    """The Argos package: one zip, written whole or not at all."""
    config = trained.config
    target = _package_target(output or trained.paths.root / argos.default_name(
        config.data.src, config.data.tgt), force)
    spec = build_spec(trained.model, pieces(trained.tokenizer.src),
                      pieces(trained.tokenizer.tgt))
    argos.configure_for_argos(spec, trained.tokenizer, config.model.d_model)
    export = Export("Argos Translate package", quantization, [
        "Argos decodes with its own search (beam 4, length penalty 0.2, no n-gram "
        "blocking) and sentence splitter (MiniSBD), so its output can differ from `attncli "
        "translate` where those settings matter",
        f"the package's position signals cover {argos.ARGOS_POSITIONS:,} positions (the "
        "sinusoid made longer: Argos cuts no source)"])
    metadata = argos.package_metadata(config, __version__)
    files = {"metadata.json": argos.metadata_bytes(metadata),
             "sentencepiece.model": trained.paths.spm_model().read_bytes(),
             CARD: card_text(trained, export).encode("utf-8"),
             METADATA: argos.metadata_bytes({"run": trained.paths.root.name,
                                             **_made_from(trained, quantization)})}
    with entry_lock(target, print):
        argos.write_package(target, spec, quantization, files)
    return target


def _package_target(target: Path, force: bool) -> Path:
    """The package file to write, refused where it would replace what attncli did not write
    (a folder, any other file) or, without --force, a package it wrote."""
    if target.is_dir():
        raise AttncliError(f"{target} is a folder; --output names the package file to write "
                           f"(e.g. {target / 'model.argosmodel'})")
    if target.exists() and not argos.is_attncli_package(target):
        raise AttncliError(f"{target} exists and is not an Argos package made by attncli; it "
                           "is left as it is: --output another file")
    if target.exists() and not force:
        raise AttncliError(f"{target} exists; give --force to replace it, or --output another "
                           "file")
    if problem := output_file_problem(target):  # before the conversion
        raise AttncliError(f"--output {target}: {problem}")
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
