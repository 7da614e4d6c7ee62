"""Documents in, the sentences to decode out, and each document's translation put back together.

A chunk of documents (a `Translator` call, `attncli translate`'s lines, a server request) is
decoded as one batch of sentences: each document split into lines and sentences
(`data.sentences`), each sentence longer than the model learned from cut into pieces
(`texts.fitting_pieces`), and every distinct piece decoded once however often it occurs.
`DocumentPlan` remembers which pieces make which sentence of which document, so the caller can
join the pieces' translations into sentences and the sentences into the document's layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attncli.data.sentences import Layout, split_text
from attncli.data.tokenizer import Tokenizer
from attncli.decoding.texts import PieceLimits, fitting_pieces


@dataclass(frozen=True)
class DocumentPlan:
    """What a chunk of documents decodes as.

    layouts:  each document taken apart (its lines, sentences and whitespace)
    pieces:   the distinct pieces to decode, in the order first met
    sentence_pieces: per document, per sentence, the indexes of its pieces in `pieces`
    """

    layouts: list[Layout]
    pieces: list[str]
    sentence_pieces: list[list[tuple[int, ...]]]


def plan_documents(texts: Sequence[str], *, language: str, tokenizer: Tokenizer,
                   limits: PieceLimits) -> DocumentPlan:
    """Split each text in `language` (the source's), cut its sentences longer than the model
    learned from (`limits`), and number the distinct pieces (see the module doc)."""
    layouts = [split_text(text, language) for text in texts]
    index: dict[str, int] = {}
    cuts: dict[str, list[str]] = {}  # a sentence met again is not cut again
    sentence_pieces = []
    for layout in layouts:
        per_sentence = []
        for sentence in layout.sentences:
            if sentence not in cuts:
                cuts[sentence] = fitting_pieces(sentence, tokenizer, limits)
            per_sentence.append(tuple(index.setdefault(piece, len(index))
                                      for piece in cuts[sentence]))
        sentence_pieces.append(per_sentence)
    return DocumentPlan(layouts, list(index), sentence_pieces)


def joined_score(scores: Sequence[float], lengths: Sequence[int]) -> float:
    """The score of translations joined: their scores' mean weighted by their lengths (tokens
    with EOS), since each score is a mean over its own tokens."""
    return sum(s * n for s, n in zip(scores, lengths, strict=True)) / sum(lengths)
