"""A fine-tuning run's start from its parent's weights (`attncli train CONFIG --init-from RUN`):
the weights checked against the child's model before its run folder exists, and loaded.

Every process loads the same file before DistributedDataParallel wraps the model, and DDP
sends rank 0's parameters to the others as it is made (`distributed.loss_module`), so every
process starts from rank 0's weights. What the parent is and what the child takes from it:
`parent.py`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from attncli.core.config import Config
from attncli.core.errors import AttncliError
from attncli.data.tokenizer import Tokenizer
from attncli.model.build import build_model, model_fingerprint
from attncli.runs.checkpoints import (
    load_state_dict_strictly,
    read_tensors,
    tensor_mismatch,
    weights_digest,
)
from attncli.runs.layout import MODEL_FILE, RunPaths, read_parent_record
from attncli.training.parent import Parent


def check_parent_weights(parent: Parent, config: Config, tokenizer: Tokenizer) -> str:
    """Refuse weights that do not fit a model of the child's `config` (one line naming the
    first tensor that differs, or the model config they were saved for); their SHA-256, which
    parent.json records."""
    source = parent.checkpoint / MODEL_FILE
    tensors, meta = read_tensors(source)
    with torch.device("meta"):  # names and shapes only: no memory, nothing drawn
        model = build_model(config, tokenizer)
    if problem := tensor_mismatch(model, tensors):
        raise AttncliError(f"--init-from {parent.given}: {source} does not fit the model of "
                           f"its run's config.yaml: {problem}")
    if meta.get("model_fingerprint") != model_fingerprint(config.model):
        raise AttncliError(f"--init-from {parent.given}: {source} was saved for another model "
                           f"config (fingerprint {meta.get('model_fingerprint')}, its run's "
                           f"config.yaml {model_fingerprint(config.model)})")
    return weights_digest(parent.checkpoint)


def check_same_parent_weights(parent: Parent, child: RunPaths) -> None:
    """A child stopped before its first checkpoint starts again from its parent's weights:
    refused where they are no longer those it started from (parent.json's SHA-256)."""
    recorded = read_parent_record(child)["weights_sha256"]
    if not (parent.checkpoint / MODEL_FILE).is_file() or \
            weights_digest(parent.checkpoint) != recorded:
        raise AttncliError(
            f"--resume {child.root}: it stopped before its first checkpoint, so it starts again "
            f"from its parent's weights, and {parent.checkpoint} no longer holds those it "
            f"started from (parent.json); start a new run with --init-from")


def load_parent_weights(model: nn.Module, checkpoint: Path) -> None:
    """The weights of the parent's checkpoint folder, loaded strictly into `model`."""
    tensors, _ = read_tensors(checkpoint / MODEL_FILE)
    load_state_dict_strictly(model, tensors, checkpoint / MODEL_FILE)
