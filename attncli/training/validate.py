"""Scoring the model on the validation split(s) while training: loss and greedy BLEU (a mix of
corpora: each corpus's val split, one of which decides best and patience)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attncli.core.config import deciding_corpus
from attncli.core.device import autocast, compute_dtype, resolve_decode_precision
from attncli.core.text import PAD_ID
from attncli.data.batching import token_batches
from attncli.decoding.scoring import corpus_scores
from attncli.decoding.search import SearchSettings
from attncli.decoding.texts import translate_texts
from attncli.model.build import build_model
from attncli.runs.checkpoints import load_state_dict_strictly, read_tensors
from attncli.runs.layout import MODEL_FILE
from attncli.training.distributed import World


@dataclass
class ValScores:
    """Both on the first `data.valid_limit` pairs of the val split (the loss on those of them
    that fit `data.max_len`: training's own filter)."""

    loss: float           # mean loss per target token, no label smoothing
    bleu: float           # greedy BLEU
    loss_seconds: float   # what each took
    bleu_seconds: float


@dataclass(frozen=True)
class ValidationSetup:
    """How this process scores: the trainer's device and precision, the padding multiple its
    batches are cut with, and its place among the run's processes. One object from the trainer
    to each `Validator`, so that the four never travel by position."""

    device: torch.device
    precision: str
    pad_multiple: int
    world: World


class Validator:
    """Scores one val split; with several processes each scores its share and they sum."""

    def __init__(self, config, model: nn.Module, tokenizer, data, *, setup: ValidationSetup):
        """`data`: a `corpus.ValSet` (val token cache and val texts)."""
        self.config, self.model, self.tokenizer = config, model, tokenizer
        self.device, self.precision = setup.device, setup.precision
        self.pad_multiple, self.world, self.corpus = setup.pad_multiple, setup.world, data.val
        limit = config.data.valid_limit or len(data.val_text)
        self.src, self.ref = data.val_text.src[:limit], data.val_text.tgt[:limit]
        # The loss reads the token cache, whose val pairs are those that fit data.max_len:
        # it scores the ones among the same first pairs (a prefix of the cache's).
        end = data.val_text.rows[len(self.src) - 1] + 1  # stored rows the BLEU pairs span
        self.limit = int(np.searchsorted(self.corpus.rows, end))
        total = len(data.val_text.src)
        # what the scores are on, for the log: the figures are not the whole split's
        self.pairs = (f"all {total:,} val pairs" if len(self.src) == total
                      else f"first {len(self.src):,} of {total:,} val pairs")
        if self.limit < len(self.src):
            self.pairs += (f"; loss on the {self.limit:,} of them that fit "
                           f"data.max_len={config.data.max_len}")

    def score(self) -> ValScores:
        started = time.perf_counter()
        loss = self.loss()
        halfway = time.perf_counter()
        bleu = self.bleu()
        return ValScores(loss, bleu, halfway - started, time.perf_counter() - halfway)

    @torch.inference_mode()
    def loss(self) -> float:
        """Mean loss per target token on the BLEU pairs that fit data.max_len (the first
        `limit` of the val cache); each process scores its share."""
        self.model.eval()
        corpus, multiple, limit = self.corpus, self.pad_multiple, self.limit
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, tokens
        batches = token_batches(corpus.src_lens[:limit], corpus.tgt_lens[:limit],
                                self.config.train.batch_tokens, seed=0, epoch=0,
                                multiple=multiple)
        for pairs in self.world.share(batches):
            batch = corpus.collate(pairs, multiple).to(self.device)
            with autocast(self.device, self.precision):
                sums[0] += self.model.summed_loss(
                    batch.src, batch.tgt_in, batch.tgt_out, label_smoothing=0.0,
                    compute_dtype=compute_dtype(self.precision)).double()
            sums[1] += (batch.tgt_out != PAD_ID).sum()
        loss, tokens = self.world.sum(sums).tolist()
        return loss / max(tokens, 1)

    def bleu(self) -> float:
        """Greedy BLEU on the val sentences, decoded at eval's precision and with its decode
        settings (``decode.no_repeat_ngram_size`` included), so that `best` is chosen as it is
        scored: blocking changes which checkpoint's outputs read best, most of all early on,
        when a model still repeats itself; each process decodes its share."""
        self.model.eval()
        precision = resolve_decode_precision(self.config.train.precision, self.device)
        greedy = SearchSettings.from_config(self.config.decode, beam=1, nbest=1)
        results = translate_texts(self.model, self.tokenizer, self.world.share(self.src), greedy,
                                  device=self.device, precision=precision)
        shares = self.world.gather([self.tokenizer.decode_tgt(r[0].tokens) for r in results])
        hyps = [None] * len(self.src)
        for rank, share in enumerate(shares):
            hyps[rank :: self.world.size] = share
        return corpus_scores(hyps, self.ref, self.config.data.tgt)["bleu"]


class Validators:
    """A run's val sets (`corpus.TrainingData.vals`), each with its `Validator`; `deciding`
    names the one whose BLEU chooses best and counts patience (None: the run's one set)."""

    def __init__(self, config, model: nn.Module, tokenizer, data, *, setup: ValidationSetup):
        self.deciding = deciding_val_set(config, data).name
        self.by_name = {val_set.name: Validator(config, model, tokenizer, val_set, setup=setup)
                        for val_set in data.vals}

    def score(self) -> dict[str | None, ValScores]:
        """Every set's scores, the deciding one first."""
        names = sorted(self.by_name, key=lambda name: name != self.deciding)
        return {name: self.by_name[name].score() for name in names}


def deciding_val_set(config, data):
    """The `corpus.ValSet` that decides best and patience (the run's only one, or the mix's
    deciding corpus's)."""
    if len(data.vals) == 1:
        return data.vals[0]
    deciding = deciding_corpus(config.data)
    return next(val_set for val_set in data.vals if val_set.name == deciding)


def translate_examples(config, model: nn.Module, tokenizer, device: torch.device) -> list[str]:
    """`train.examples` translated as `attncli translate` would (decode.beam and the decode
    settings, eval's precision). No random number is drawn (the model is in eval mode and the
    search is deterministic), so a run's loss curve is the same with and without examples."""
    model.eval()
    precision = resolve_decode_precision(config.train.precision, device)
    settings = SearchSettings.from_config(config.decode, beam=config.decode.beam, nbest=1)
    found = translate_texts(model, tokenizer, config.train.examples, settings, device=device,
                            precision=precision)
    return [tokenizer.decode_tgt(hypotheses[0].tokens) for hypotheses in found]


def score_weights(trainer: Any, weights: dict[str, torch.Tensor],
                  source: Path | None = None) -> ValScores:
    """Validation loss and greedy BLEU of `weights` (read from `source`, which errors name) in
    a model of the run's config, scored by this process alone on the trainer's device.

    Building the model draws its initial weights from torch's generator, which a resumed run
    has just restored: forked, so that scoring leaves the run's random numbers as they were."""
    with torch.random.fork_rng(devices=[]):
        model = build_model(trainer.config, trainer.tokenizer)
    load_state_dict_strictly(model, weights, source or trainer.paths.averaged)
    setup = ValidationSetup(device=trainer.device, precision=trainer.precision,
                            pad_multiple=trainer.state.pad_multiple, world=World())
    validator = Validator(trainer.config, model.to(trainer.device), trainer.tokenizer,
                          deciding_val_set(trainer.config, trainer.data), setup=setup)
    return validator.score()


def rescore_best(trainer: Any, changes: list[str]) -> str:
    """After a resume that changed what validation scores (`changes`), the best checkpoint so
    far is scored again the new way, so the next validations are compared with a figure of
    their own kind (else `best`, patience and the end's averaging would compare BLEU on
    different pairs); the log line saying so."""
    state = trainer.state
    state.bad_validations = 0
    event = {"event": "validation_changed", "step": state.step, "changes": changes}
    if state.best_step is None:
        trainer.metrics.write(event)
        return f"validation changed ({'; '.join(changes)}); no best checkpoint yet"
    weights_file = trainer.paths.step_dir(state.best_step) / MODEL_FILE
    weights, _ = read_tensors(weights_file)
    before, state.best_bleu = state.best_bleu, score_weights(trainer, weights,
                                                            weights_file).bleu
    trainer.metrics.write({**event, "best_val_bleu": round(state.best_bleu, 3)})
    return (f"validation changed ({'; '.join(changes)}): the best checkpoint so far, "
            f"step-{state.best_step}, scored again: greedy BLEU {state.best_bleu:.2f} (was "
            f"{before:.2f} the old way)")
