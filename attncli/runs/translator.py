"""attncli from Python: `Translator`, a trained run that translates texts.

    from attncli import Translator

    translator = Translator("runs/small-20261129-0741")
    print(translator.translate(["Hello, how are you?"])[0].text)

It puts together, with either engine, the run opened for decoding
(`runs.trained.load_for_decoding`), sources encoded to fit the model (`decoding.texts`), decoded
(`runs.trained.decode_ids`) and detokenized. Each text is a document by default: split into
sentences in the source language, every sentence of a call decoded in one batch (a sentence
met twice, once), and joined back in the text's layout the target language's way
(`decoding.documents`); `split=False` decodes each text whole, as one sentence. `attncli
translate`, `attncli eval` and `attncli serve` translate through it too (`encode` and `search`,
which leave the reporting of bad input to them), so a sentence gets the same translation here
as from the command line or the server with the same settings.

Threads: a Translator's model is one, so it decodes one call at a time; calls from several
threads take turns (a lock), which is safe but not faster. Decode in one thread, or give each
thread its own Translator (each holds its own copy of the weights).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attncli.core.config import Config
from attncli.core.errors import AttncliError
from attncli.data.sentences import Layout, sentence_joiner
from attncli.data.tokenizer import NO_TEXT, Tokenizer, text_problem
from attncli.decoding.documents import joined_score, plan_documents
from attncli.decoding.search import Hypothesis, SentenceDone
from attncli.decoding.texts import TruncateHook, encode_sources, piece_limits
from attncli.runs.trained import ENGINES, TrainedModel, decode_ids, load_for_decoding

# Sentences decoded together by `Translator.translate_iter` (as `attncli translate` reads them).
CHUNK_SENTENCES = 256


@dataclass(frozen=True)
class Candidate:
    """One translation of a sentence: its text, its score (log-probability per token, length
    penalty applied: what n-best lists are sorted by) and its target subword ids (no BOS/EOS)."""

    text: str
    score: float
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Translation:
    """A text's translations, best first (`nbest`), with the best one's parts at hand.

    `truncated`: the source was longer than the model's positions and only its start was
    translated (only without splitting: a split text's long sentences are cut into pieces that
    are each translated). `attention`: when asked for, the best translation's cross-attention, a
    float tensor (decoder layers, heads, target subwords + 1 for EOS, source subwords + 1 for
    EOS). `sentences`: a split text's sentences, each a `Translation` with its own n-best,
    attention and score; a text of several has one candidate, their translations joined in its
    layout, scored by the mean of theirs weighted by their tokens (EOS included), with their
    tokens in order, and no attention. A text of one sentence is that sentence's translation
    (its whitespace kept), with that sentence as its one item of `sentences`.
    """

    source: str
    nbest: tuple[Candidate, ...]
    truncated: bool = False
    attention: torch.Tensor | None = None
    sentences: tuple[Translation, ...] = ()

    @property
    def text(self) -> str:
        return self.nbest[0].text

    @property
    def score(self) -> float:
        return self.nbest[0].score

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.nbest[0].tokens


class Translator:
    """A trained run folder, loaded once, that translates lists of sentences.

    `checkpoint`: "auto" (the run's averaged or best one, as `attncli translate` picks), or a
    name such as "step-4000". `device`: "auto", "cpu", "cuda" or "cuda:N". `engine`: "torch"
    (attncli's decoder) or "ctranslate2" (the run's export, or the folder `exported` names).
    Bad arguments raise `AttncliError` with a one-line message.
    """

    def __init__(self, run: str | Path, checkpoint: str = "auto", device: str = "auto",
                 engine: str = "torch", exported: str | Path | None = None,
                 no_repeat_ngram: int | None = None):
        if engine not in ENGINES:
            raise AttncliError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
        self.trained: TrainedModel = load_for_decoding(
            Path(run), device, checkpoint, engine=engine,
            exported=None if exported is None else Path(exported),
            no_repeat_ngram=no_repeat_ngram)
        self._lock = threading.Lock()

    @property
    def source_language(self) -> str:
        return self.trained.config.data.src

    @property
    def target_language(self) -> str:
        return self.trained.config.data.tgt

    @property
    def checkpoint(self) -> str:
        """The checkpoint's folder name (e.g. "averaged" or "step-4000")."""
        return self.trained.checkpoint.name

    @property
    def beam(self) -> int:
        """The run's beam size, used when `translate` is given none."""
        return self.trained.config.decode.beam

    @property
    def config(self) -> Config:
        """The run's config, with `no_repeat_ngram` applied to its decode settings."""
        return self.trained.config

    @property
    def tokenizer(self) -> Tokenizer:
        return self.trained.tokenizer

    def translate(self, texts: Sequence[str], *, beam: int | None = None, nbest: int = 1,
                  attention: bool = False, split: bool = True) -> list[Translation]:
        """One `Translation` per text, in order; `[]` for `[]`.

        `split=True`: each text is a document of any length and any lines (blank lines
        kept); `nbest` and `attention` apply to each sentence. `split=False`:
        each text is decoded whole, as one sentence, cut to the model's positions."""
        texts = _checked_texts(texts)
        beam = self._checked_search(beam, nbest, attention)
        if not split:
            return self._translate_whole(texts, beam, nbest, attention)
        plan = plan_documents(texts, language=self.source_language, tokenizer=self.tokenizer,
                              limits=piece_limits(self.config))
        pieces = self._translate_pieces(plan.pieces, beam, nbest, attention)
        joiner = sentence_joiner(self.target_language)
        found = []
        for text, layout, per_sentence in zip(texts, plan.layouts, plan.sentence_pieces,
                                              strict=True):
            sentences = [_joined(sentence, [pieces[i] for i in indexes], joiner)
                         for sentence, indexes in zip(layout.sentences, per_sentence,
                                                      strict=True)]
            found.append(_document(text, layout, sentences, joiner))
        return found

    def _translate_whole(self, texts: list[str], beam: int, nbest: int, attention: bool
                         ) -> list[Translation]:
        if not texts:
            return []
        cut: set[int] = set()
        src_ids = self.encode(texts, lambda i, _length, _kept: cut.add(i))
        for number, ids in enumerate(src_ids, 1):
            if len(ids) == 1:  # EOS alone: nothing left once tokenized
                raise AttncliError(f"text {number}: {NO_TEXT}")
        found = self.search(src_ids, beam=beam, nbest=nbest, attention=attention)
        return [self._translation(text, hypotheses, i in cut, attention)
                for i, (text, hypotheses) in enumerate(zip(texts, found, strict=True))]

    def _translate_pieces(self, pieces: list[str], beam: int, nbest: int, attention: bool
                          ) -> list[Translation]:
        """Each piece's translation; a piece that leaves no subword once tokenized (nothing
        the model reads) stands for itself, so no text is lost."""
        src_ids = self.encode(pieces)
        readable = [i for i, ids in enumerate(src_ids) if len(ids) > 1]
        found = self.search([src_ids[i] for i in readable], beam=beam, nbest=nbest,
                            attention=attention) if readable else []
        translations = [Translation(piece, (Candidate(piece, 0.0, ()),)) for piece in pieces]
        for i, hypotheses in zip(readable, found, strict=True):
            translations[i] = self._translation(pieces[i], hypotheses, False, attention)
        return translations

    def encode(self, texts: Sequence[str], on_cut: TruncateHook | None = None
               ) -> list[list[int]]:
        """The texts' source ids as the model reads them (ending in EOS), each cut to fit its
        positions; `on_cut(i, subwords, kept)` for each text cut. For callers that report
        their own problems per text (`attncli translate`, eval, the server): no checks here."""
        return encode_sources(self.tokenizer, texts, self.config.model.max_positions, on_cut)

    def search(self, src_ids: list[list[int]], *, beam: int, nbest: int = 1,
               attention: bool = False, progress: Callable[[int], None] | None = None,
               done: SentenceDone | None = None) -> list[list[Hypothesis]]:
        """The `nbest` hypotheses of each encoded source, best first (`runs.trained.decode_ids`:
        `progress(n)` as n more are done, `done(i, hypotheses)` as soon as source i's are
        final). One call at a time: calls from other threads wait their turn."""
        with self._lock:
            return decode_ids(self.trained, src_ids, beam, nbest, need_attention=attention,
                              progress=progress, done=done)

    def detokenize(self, hypothesis: Hypothesis) -> str:
        """A hypothesis's text."""
        return self.tokenizer.decode_tgt(hypothesis.tokens)

    def translate_iter(self, texts: Iterable[str], *, beam: int | None = None, nbest: int = 1,
                       attention: bool = False, chunk: int = CHUNK_SENTENCES,
                       split: bool = True) -> Iterator[Translation]:
        """`translate` over any iterable (a file's lines, a generator), `chunk` texts at a
        time, so a large input streams through in bounded memory."""
        if chunk < 1:
            raise AttncliError(f"chunk {chunk}: expected 1 or more texts")
        iterator = iter(texts)
        while part := list(itertools.islice(iterator, chunk)):
            yield from self.translate(part, beam=beam, nbest=nbest, attention=attention,
                                      split=split)

    def _checked_search(self, beam: int | None, nbest: int, attention: bool) -> int:
        beam = self.beam if beam is None else beam
        if not isinstance(beam, int) or beam < 1:
            raise AttncliError(f"beam {beam!r}: expected a whole number of 1 or more")
        if not isinstance(nbest, int) or not 1 <= nbest <= beam:
            raise AttncliError(f"nbest {nbest!r}: expected 1 to the beam size ({beam})")
        if attention and self.trained.engine is not None:
            raise AttncliError("attention needs engine='torch' (CTranslate2 returns no "
                               "attention weights here)")
        return beam

    def _translation(self, text: str, hypotheses: list[Hypothesis], truncated: bool,
                     attention: bool) -> Translation:
        nbest = tuple(Candidate(self.detokenize(h), h.score, tuple(h.tokens))
                      for h in hypotheses)
        return Translation(text, nbest, truncated,
                           hypotheses[0].attention if attention else None)


def _joined(source: str, parts: list[Translation], joiner: str) -> Translation:
    """A sentence's translation from those of its pieces (one piece: that piece's)."""
    if len(parts) == 1:
        return replace(parts[0], source=source)
    return Translation(source, (_joined_candidate(joiner.join(p.text for p in parts), parts),))


def _document(text: str, layout: Layout, sentences: list[Translation], joiner: str
              ) -> Translation:
    """A document's translation from its sentences' (see `Translation`)."""
    if len(sentences) == 1:
        (only,) = sentences
        nbest = tuple(replace(c, text=layout.rebuild([c.text], joiner)) for c in only.nbest)
        return replace(only, source=text, nbest=nbest, sentences=(only,))
    joined = layout.rebuild([s.text for s in sentences], joiner)
    return Translation(text, (_joined_candidate(joined, sentences),),
                       sentences=tuple(sentences))


def _joined_candidate(text: str, parts: Sequence[Translation]) -> Candidate:
    """One candidate for translations joined: their tokens in order, their scores' mean
    weighted by each one's tokens and EOS (a score is a mean over those)."""
    score = joined_score([p.score for p in parts], [len(p.tokens) + 1 for p in parts])
    return Candidate(text, score, tuple(t for p in parts for t in p.tokens))


def _checked_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list, or an AttncliError naming the first that cannot be translated."""
    if isinstance(texts, str):
        raise AttncliError("texts: expected a list of strings, got one string (wrap it: "
                           "[text])")
    texts = list(texts)
    for number, text in enumerate(texts, 1):
        if not isinstance(text, str):
            raise AttncliError(f"text {number}: expected a string, got {type(text).__name__}")
        if problem := text_problem(text):
            raise AttncliError(f"text {number}: {problem}")
    return texts
