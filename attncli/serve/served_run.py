"""A run as the server uses it: tokenize, decode batches, take attention, describe.

Built on the Python API's `runs.translator.Translator` (its `encode` and `search`), with either
engine, so a sentence gets the same translation from the server as from `attncli translate`
with the same settings. Attention is taken after decoding, for the best hypothesis, from one
teacher-forced pass (`model.attention_maps`): asking for it cannot change the translation.

Every torch operation happens in `run_batch` (the decoding thread) or at start-up, in the same
thread: the event loop's thread only tokenizes and writes JSON (see command.py for why).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import torch

from attncli.decoding.documents import DocumentPlan, plan_documents
from attncli.decoding.search import Hypothesis
from attncli.decoding.texts import piece_limits
from attncli.model.attention_maps import attention_maps
from attncli.model.build import build_model
from attncli.runs.metrics import MetricsLog
from attncli.runs.trained import TrainedModel, decode_precision
from attncli.runs.translator import Translator

# Decimal places of attention weights in responses: 0.1 % steps, a third of the bytes of full
# floats, and more than the page's colours or the terminal's percentages show.
WEIGHT_DECIMALS = 3


@dataclass(frozen=True)
class Settings:
    """Decoding settings: requests with equal settings are decoded in one batch."""

    beam: int
    n_best: int


@dataclass
class Work:
    """One request's part of a batch: its sources (ids ending in EOS), attention or not."""

    src_ids: list[list[int]]
    attention: bool


@dataclass
class Translation:
    """One sentence's answer: its n-best hypotheses and, when asked, the best one's attention
    (``cross``, ``encoder``, ``decoder``: nested lists by layer and head, as responses hold)."""

    hypotheses: list[Hypothesis]
    attention: dict[str, list] | None = None


# deliver(k, translations): work k of a batch is answered (see ServedRun.run_batch).
Deliver = Callable[[int, list[Translation]], None]


class ServedRun:
    """One run loaded for the server: everything that touches its model or its tokenizer."""

    def __init__(self, translator: Translator):
        self.translator, self.trained = translator, translator.trained
        self.tokenizer, self.config = translator.tokenizer, translator.config
        self.languages = (self.config.data.src, self.config.data.tgt)
        self.beam = translator.beam
        self.attention = self.trained.engine is None  # CTranslate2 hands out no weights
        self.description = self._describe()

    def plan(self, texts: Sequence[str]) -> DocumentPlan:
        """The texts split into sentences in the run's source language, cut into pieces that
        fit its model: what a request decodes (see serve/documents.py)."""
        return plan_documents(texts, language=self.languages[0], tokenizer=self.tokenizer,
                              limits=piece_limits(self.config))

    def encode(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Source ids (ending in EOS) and, per text, whether it was cut to fit the model."""
        cut = [False] * len(texts)

        def mark(i: int, _length: int, _kept: int) -> None:
            cut[i] = True

        return self.translator.encode(texts, mark), cut

    def run_batch(self, settings: Settings, works: list[Work],
                  deliver: Deliver | None = None) -> list[list[Translation]]:
        """Decode every sentence of `works` together; per work, its sentences' translations.

        `deliver(k, translations)` hands work k over as soon as its last sentence's search
        ends, while longer sentences of the batch decode on (works that asked for attention
        wait for the end, where it is taken outside the search). Runs in the batcher's
        thread, the only one that uses the model.
        """
        flat = [ids for work in works for ids in work.src_ids]
        owner = [k for k, work in enumerate(works) for _ in work.src_ids]
        spans = [range(end - len(w.src_ids), end) for w, end in zip(
            works, accumulate(len(w.src_ids) for w in works), strict=True)]  # k -> its rows
        waiting = [len(work.src_ids) for work in works]
        found: list[list[Hypothesis]] = [[] for _ in flat]
        results: list[list[Translation] | None] = [None] * len(works)

        def sentence_done(i: int, hypotheses: list[Hypothesis]) -> None:
            k = owner[i]
            found[i], waiting[k] = hypotheses, waiting[k] - 1
            if not waiting[k] and not works[k].attention:
                results[k] = self._answer(works[k], [found[j] for j in spans[k]])
                if deliver is not None:
                    deliver(k, results[k])

        self.translator.search(flat, beam=settings.beam, nbest=settings.n_best,
                               done=sentence_done)
        return [answer if answer is not None else self._answer(work, [found[j] for j in span])
                for work, answer, span in zip(works, results, spans, strict=True)]

    def _answer(self, work: Work, found: list[list[Hypothesis]]) -> list[Translation]:
        """A work's translations from the hypotheses of its sentences, with the best one's
        attention when the work asked for it."""
        mine = [Translation(hypotheses) for hypotheses in found]
        if work.attention:
            for ids, translation in zip(work.src_ids, mine, strict=True):
                maps = attention_maps(self.trained.model, ids, translation.hypotheses[0].tokens)
                translation.attention = {kind: [_rounded(layer) for layer in layers]
                                         for kind, layers in vars(maps).items()}
        return mine

    def text(self, hypothesis: Hypothesis) -> str:
        return self.translator.detokenize(hypothesis)

    def sentence(self, text: str, src_ids: list[int], cut: bool,
                 translation: Translation) -> dict[str, Any]:
        """One sentence of a /v1/translate answer: hypotheses with scores, subword pieces of
        source and output (labelled as --show-attention labels them: each ends in </s>), and
        the attention when it was asked for."""
        hyps = [{"text": self.text(h), "score": round(h.score, 4),
                 "pieces": [*self.tokenizer.tgt_pieces(h.tokens), "</s>"]}
                for h in translation.hypotheses]
        answer = {"source": text, "source_pieces": self.tokenizer.src_pieces(src_ids),
                  "truncated": cut, "hypotheses": hyps}
        if translation.attention is not None:
            best = translation.hypotheses[0]
            answer["attention"] = {
                "decoder_input": ["<s>", *self.tokenizer.tgt_pieces(best.tokens)],
                **translation.attention}
        return answer

    def _describe(self) -> dict[str, Any]:
        """What GET /v1/model says about the run and how it is served (taken once)."""
        model_cfg, trained = self.config.model, self.trained
        return {
            "run": trained.paths.root.name,
            "languages": {"source": self.languages[0], "target": self.languages[1]},
            "parameters": _parameters(trained),
            "checkpoint": trained.checkpoint.name,
            "validation_bleu": _validation_bleu(trained),
            "engine": "torch" if trained.engine is None else "ctranslate2",
            "device": str(trained.device) if trained.engine is None else "cpu",
            "precision": decode_precision(trained),
            "beam": self.beam,
            "attention": self.attention,
            "layers": {"encoder": model_cfg.enc_layers, "decoder": model_cfg.dec_layers},
            "heads": model_cfg.heads,
        }


def _rounded(weights: torch.Tensor) -> list:
    """(heads, rows, cols) float weights -> nested lists of WEIGHT_DECIMALS-place numbers."""
    scale = 10**WEIGHT_DECIMALS
    return ((weights.double() * scale).round() / scale).tolist()


def _parameters(trained: TrainedModel) -> int:
    """The model's parameter count (built on the meta device when its weights are not loaded:
    the CTranslate2 engine keeps them itself)."""
    if trained.model is not None:
        return trained.model.num_parameters()
    with torch.device("meta"):
        return build_model(trained.config, trained.tokenizer).num_parameters()


def _validation_bleu(trained: TrainedModel) -> float | None:
    """The greedy validation BLEU logged at the checkpoint's step (None for an averaged one)."""
    name = trained.checkpoint.name
    if not name.startswith("step-"):
        return None
    step = int(name.removeprefix("step-"))
    scores = [r["val_bleu"] for r in MetricsLog(trained.paths.metrics).read()
              if r.get("event") == "val" and r.get("step") == step and "val_bleu" in r]
    return scores[-1] if scores else None
