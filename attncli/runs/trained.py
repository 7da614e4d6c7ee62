"""A trained run, ready to translate: its config, tokenizer and (loaded) model.

What eval, translate, export and bench open; training itself builds its model in
`attncli.training`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from attncli.core.config import Config
from attncli.core.config_files import load_config
from attncli.core.text import converted_sides
from attncli.data.chinese_script import simplifier
from attncli.data.tokenizer import Tokenizer, load_tokenizer
from attncli.model.build import build_model
from attncli.runs.checkpoints import checkpoint_dir, load_weights
from attncli.runs.layout import RunPaths, open_run
from attncli.training.resume_rules import model_fingerprint


class TrainedModel:
    """What eval, translate and bench need from a run: its config, tokenizer and model.

    `engine` is another engine's exported copy of the model (`export.CTranslate2Engine`) when
    decoding goes there instead; `model` is then None.
    """

    def __init__(self, paths: RunPaths, config: Config, tokenizer: Tokenizer,
                 model: nn.Module | None, device: torch.device, checkpoint: Path,
                 engine: Any = None):
        self.paths, self.config, self.tokenizer = paths, config, tokenizer
        self.model, self.device, self.checkpoint = model, device, checkpoint
        self.engine = engine


def load_trained_model(run_dir: Path, device: torch.device, checkpoint: str = "auto",
                       weights: bool = True) -> TrainedModel:
    """Open a run folder and load its tokenizer and (unless `weights` is False) the named
    checkpoint's weights."""
    paths = open_run(run_dir)
    folder = checkpoint_dir(paths, checkpoint)
    config = load_config(paths.config)
    tokenizer = load_tokenizer(paths, config.tokenizer.joint)
    data = config.data
    if sides := converted_sides(data.chinese_script, data.src, data.tgt):
        convert = simplifier()  # this run reads Chinese through OpenCC: installed, or one line
        if "src" in sides:  # sources in the script the model learnt from
            tokenizer.prepare_src = convert
    if not weights:
        return TrainedModel(paths, config, tokenizer, None, device, folder)
    model = build_model(config, tokenizer)
    load_weights(model, folder, model_fingerprint(config.model))
    return TrainedModel(paths, config, tokenizer, model.to(device).eval(), device, folder)
