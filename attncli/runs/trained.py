"""A trained run, ready to translate: its config, tokenizer and (loaded) model, or its
CTranslate2 export, and decoding with whichever it is.

What eval, translate, export and serve open; training itself builds its model in
`attncli.training`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from attncli.core.config import Config
from attncli.core.config_files import load_config
from attncli.core.device import resolve_decode_precision, resolve_device
from attncli.core.errors import AttncliError
from attncli.core.text import converted_sides
from attncli.data.chinese_script import simplifier
from attncli.data.tokenizer import Tokenizer, load_tokenizer
from attncli.decoding.ctranslate2 import CTranslate2Engine, open_engine
from attncli.decoding.search import Hypothesis, SearchSettings, SentenceDone, translate_ids
from attncli.model.build import build_model, model_fingerprint
from attncli.runs.checkpoints import load_weights, weights_digest
from attncli.runs.layout import MODEL_FILE, RunPaths, checkpoint_dir, open_run


class TrainedModel:
    """What eval, translate, export and serve need from a run: its config, tokenizer and model.

    `engine` is another engine's exported copy of the model (`decoding.ctranslate2`'s
    `CTranslate2Engine`) when decoding goes there instead; `model` is then None.
    """

    def __init__(self, paths: RunPaths, config: Config, tokenizer: Tokenizer,
                 model: nn.Module | None, *, device: torch.device, checkpoint: Path,
                 engine: CTranslate2Engine | None = None):
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
    tokenizer = load_tokenizer(paths.root, config.tokenizer.joint)
    data = config.data
    if sides := converted_sides(data.chinese_script, data.src, data.tgt):
        convert = simplifier()  # this run reads Chinese through OpenCC: installed, or one line
        if "src" in sides:  # sources in the script the model learnt from
            tokenizer.prepare_src = convert
    if not weights:
        return TrainedModel(paths, config, tokenizer, None, device=device, checkpoint=folder)
    model = build_model(config, tokenizer)
    load_weights(model, folder, model_fingerprint(config.model))
    return TrainedModel(paths, config, tokenizer, model.to(device).eval(), device=device,
                        checkpoint=folder)


ENGINES = ("torch", "ctranslate2")


def load_for_decoding(run_dir: Path, device: str, checkpoint: str, engine: str = "torch",
                      exported: Path | None = None,
                      no_repeat_ngram: int | None = None) -> TrainedModel:
    """The run, ready to translate with attncli's own decoder (`torch`) or with its
    CTranslate2 export (`ctranslate2`, from `exported` or the run's `ctranslate2/` folder).

    ``no_repeat_ngram`` (``--no-repeat-ngram``) replaces the run's
    ``decode.no_repeat_ngram_size`` before either engine reads its decode settings."""
    if exported is not None and engine == "torch":  # it would be ignored: torch scored instead
        raise AttncliError(f"--exported {exported} needs --engine ctranslate2")
    if engine == "torch":
        trained = load_trained_model(Path(run_dir), resolve_device(device), checkpoint)
    elif device not in ("auto", "cpu"):
        raise AttncliError(f"--device {device}: attncli runs CTranslate2 on the CPU only")
    else:
        trained = load_trained_model(Path(run_dir), torch.device("cpu"), checkpoint,
                                     weights=False)
    if no_repeat_ngram is not None:
        trained.config.decode.no_repeat_ngram_size = no_repeat_ngram
    if engine == "torch":
        return trained
    trained.engine = open_engine(trained.paths.root, exported, trained.tokenizer,
                                 trained.config.decode)
    made_from = trained.engine.metadata["checkpoint"]
    if checkpoint != "auto" and made_from != trained.checkpoint.name:
        raise AttncliError(
            f"--checkpoint {checkpoint} is {trained.checkpoint.name}, but the CTranslate2 "
            f"export was made from {made_from}: export it again (`attncli export {run_dir} "
            f"--to ctranslate2 --checkpoint {checkpoint}`), or leave --checkpoint out to use "
            f"the export as it is")
    check_made_from(trained.engine, Path(run_dir), trained.paths.checkpoints / made_from)
    trained.checkpoint = Path(made_from)
    return trained


def decode_ids(trained: TrainedModel, src_ids: list[list[int]], beam: int, nbest: int, *,
               need_attention: bool = False, progress: Callable[[int], None] | None = None,
               done: SentenceDone | None = None) -> list[list[Hypothesis]]:
    """`search.translate_ids` on the run's model, or the same through its exported engine;
    ``done(i, hypotheses)`` as soon as sentence i's are final."""
    if trained.engine is None:
        settings = SearchSettings.from_config(trained.config.decode, beam=beam, nbest=nbest,
                                              need_attention=need_attention)
        return translate_ids(trained.model, src_ids, settings, device=trained.device,
                             precision=decode_precision(trained), progress=progress, done=done)
    if need_attention:
        raise AttncliError("attention views need --engine torch (CTranslate2 returns no "
                           "attention weights here)")
    found = trained.engine.translate_ids(src_ids, beam=beam, nbest=nbest, done=done)
    if progress is not None:
        progress(len(src_ids))
    return found


def decode_precision(trained: TrainedModel) -> str:
    """The precision eval and translate decode in (see ``core.device.resolve_decode_precision``);
    with CTranslate2, the type it computes in (float16 weights compute in float32 on a CPU
    without float16 kernels: the stored type would not say what ran)."""
    if trained.engine is not None:
        return trained.engine.translator.compute_type
    return resolve_decode_precision(trained.config.train.precision, trained.device)


def check_made_from(engine: CTranslate2Engine, run_dir: Path, checkpoint: Path) -> None:
    """Refuse an export whose recorded weights are not those of `checkpoint` (the folder of
    the checkpoint it names, in `run_dir`). Not checked: exports made before attncli 0.5
    (no digest) are checked by the run they record, and the run's own export of a checkpoint
    since pruned is not checked."""
    recorded, made_by = engine.metadata.get("weights_sha256"), engine.metadata.get("run")
    own = _made_by(engine, run_dir)
    if recorded is None and own:
        return  # nothing recorded to compare
    if recorded is not None and (checkpoint / MODEL_FILE).is_file():
        if weights_digest(checkpoint) == recorded:
            return
    elif own:
        return  # the run's own export of a checkpoint since pruned: nothing to compare
    if not (checkpoint / MODEL_FILE).is_file():
        raise AttncliError(f"{engine.folder}: this export was made from another run's weights "
                           f"({made_by}, its {checkpoint.name}); export this run: `attncli "
                           f"export {run_dir}`")
    raise AttncliError(
        f"{engine.folder}: this export was made from other weights than {run_dir}'s "
        f"{checkpoint.name} (another run's, or {checkpoint.name} before it was written "
        f"again); export this run: `attncli export {run_dir} --checkpoint {checkpoint.name}`")


def _made_by(engine: CTranslate2Engine, run_dir: Path) -> bool:
    """Whether the export is `run_dir`'s own: inside it (its ctranslate2/ folder), or recording
    it. Exports before this check recorded the run as given, relative to a working folder no
    longer known: those are taken as the run's own (nothing to tell them apart by)."""
    run = Path(run_dir).resolve()
    made_by = engine.metadata.get("run")
    if made_by is None or engine.folder.resolve().is_relative_to(run):
        return True
    return not Path(made_by).is_absolute() or Path(made_by).resolve() == run
