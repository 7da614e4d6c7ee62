"""Subword regularization: training batches re-segmented by sampling (Kudo, ACL 2018).

Why: seeing a sentence cut into subwords in several plausible ways makes a model trained on
little data less brittle (`train.subword_alpha`; off by default). The token cache keeps one
segmentation per sentence, the best; here each training batch's ids are decoded back to text
and every sentence re-encoded as one of its `nbest` best segmentations, drawn with probability
proportional to P(segmentation)^alpha (the l-best sampling of the paper; needs a unigram model).

SentencePiece's own sampling is not used: its random generator is per thread, seeded once and
impossible to save, so a resumed run could not draw what the uninterrupted one would have. Here
a batch's draws come from a numpy generator seeded by (train.seed, the batch's place in the run:
epoch, the batch's pairs), so a resume samples exactly the same, and no state needs saving.
Validation and decoding never sample: only the training feed calls this.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import sentencepiece as spm

from attncli.core.errors import AttncliError
from attncli.core.text import EOS_ID, PAD_ID
from attncli.data.batching import Batch, collate
from attncli.data.tokenizer import Tokenizer


class SubwordSampler:
    """Draws a segmentation of every sentence of a batch; keeps the cached one where a draw
    would be longer than `max_len` (the limit the token cache applied)."""

    def __init__(self, tokenizer: Tokenizer, alpha: float, nbest: int, max_len: int, seed: int):
        self.src, self.tgt = tokenizer.src, tokenizer.tgt
        for proc in {id(self.src): self.src, id(self.tgt): self.tgt}.values():
            _check_can_sample(proc)
        self.alpha, self.nbest, self.max_len, self.seed = alpha, nbest, max_len, seed

    def resample(self, batch: Batch, epoch: int, batch_key: int, multiple: int) -> Batch:
        """`batch` with every sentence re-segmented; the same (epoch, batch_key) -> the same."""
        rng = np.random.default_rng([self.seed, epoch, batch_key])
        sources = [self._draw(self.src, ids[:-1], rng) + [EOS_ID]
                   for ids in _rows(batch.src)]
        targets = [self._draw(self.tgt, ids[:-1], rng) for ids in _rows(batch.tgt_out)]
        return collate(sources, targets, multiple)

    def _draw(self, proc: spm.SentencePieceProcessor, ids: list[int],
              rng: np.random.Generator) -> list[int]:
        """One of the n best segmentations of the text of `ids` (+1 for EOS must still fit)."""
        nbest = proc.nbest_encode_as_proto(proc.decode(ids), nbest_size=self.nbest).nbests
        if len(nbest) < 2:
            return ids
        scores = self.alpha * np.array([n.score for n in nbest])
        weights = np.exp(scores - scores.max())
        drawn = [p.id for p in nbest[rng.choice(len(nbest), p=weights / weights.sum())].pieces]
        return drawn if len(drawn) + 1 <= self.max_len else ids


def check_samplable(models: Iterable[bytes]) -> None:
    """Refuse, before a run folder exists, tokenizer models that `SubwordSampler` could not
    sample (BPE, given as tokenizer.model_file)."""
    for model in models:
        _check_can_sample(spm.SentencePieceProcessor(model_proto=model))


def _check_can_sample(proc: spm.SentencePieceProcessor) -> None:
    try:
        proc.nbest_encode_as_ids("a b", nbest_size=2)
    except RuntimeError:
        raise AttncliError("train.subword_alpha needs a unigram SentencePiece model "
                           "(tokenizer.type: unigram); this one cannot sample") from None


def _rows(ids) -> list[list[int]]:
    """Each row's ids up to and including its EOS (rows end in EOS, then PAD)."""
    return [row[row != PAD_ID].tolist() for row in ids.numpy()]
