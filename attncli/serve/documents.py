"""A request's texts as documents: what each route answers once their sentences are decoded.

Every text of a request is split into sentences and cut into pieces that fit the model
(`decoding.documents.plan_documents`); the pieces of the whole request go to the queue as one
job (`ServedRun.run_batch` decodes them with other requests'), and what comes back is put
together here: LibreTranslate's `/translate` gets each text's translation joined in its layout
(and its alternatives as Argos Translate builds them: the i-th of a text joins the i-th
hypothesis of each of its sentences, then LibreTranslate drops those equal to the translation
or to an earlier one); `/v1/translate` gets today's object for the joined translation (one
hypothesis, no attention) with `sentences`, one such object per sentence with its n-best and
attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncli.data.sentences import sentence_joiner
from attncli.decoding.documents import DocumentPlan
from attncli.serve.translator import ServedRun, Translation

END = "</s>"


@dataclass(frozen=True)
class DecodedRequest:
    """A request decoded: its plan, each piece's source ids and translation (None for a piece
    that leaves no subword once tokenized: nothing the model reads, given back as it is)."""

    plan: DocumentPlan
    src_ids: list[list[int]]
    found: list[Translation | None]


def translated_texts(run: ServedRun, decoded: DecodedRequest, n_best: int
                     ) -> tuple[list[str], list[list[str]]]:
    """Each text's translation and its alternatives (see the module doc), for /translate."""
    joiner = sentence_joiner(run.languages[1])
    texts, alternatives = [], []
    for layout, per_sentence in zip(decoded.plan.layouts, decoded.plan.sentence_pieces,
                                    strict=True):
        ranked = [layout.rebuild([joiner.join(_piece_text(run, decoded, i, rank)
                                              for i in pieces) for pieces in per_sentence],
                                 joiner)
                  for rank in range(n_best)]
        texts.append(ranked[0])
        alternatives.append(_unique(ranked[1:], ranked[0]))
    return texts, alternatives


def _piece_text(run: ServedRun, decoded: DecodedRequest, piece: int, rank: int) -> str:
    found = decoded.found[piece]
    if found is None:
        return decoded.plan.pieces[piece]
    return run.text(found.hypotheses[min(rank, len(found.hypotheses) - 1)])


def _unique(alternatives: list[str], best: str) -> list[str]:
    """LibreTranslate's filter: no alternative equal to the translation or said twice."""
    kept: list[str] = []
    for text in alternatives:
        if text != best and text not in kept:
            kept.append(text)
    return kept


def native_answers(run: ServedRun, texts: list[str], decoded: DecodedRequest
                   ) -> list[dict[str, Any]]:
    """Each text's /v1/translate object: the joined translation, and `sentences`."""
    joiner = sentence_joiner(run.languages[1])
    plan, answers = decoded.plan, []
    for text, layout, per_sentence in zip(texts, plan.layouts, plan.sentence_pieces,
                                          strict=True):
        sentences = [_joined([_piece_answer(run, decoded, i) for i in pieces], sentence,
                             joiner)
                     for sentence, pieces in zip(layout.sentences, per_sentence, strict=True)]
        if len(sentences) == 1:
            whole = dict(sentences[0], source=text, hypotheses=[
                dict(h, text=layout.rebuild([h["text"]], joiner))
                for h in sentences[0]["hypotheses"]])
        else:
            whole = _joined(sentences, text, joiner)
            whole["hypotheses"][0]["text"] = layout.rebuild(
                [s["hypotheses"][0]["text"] for s in sentences], joiner)
        answers.append({**whole, "sentences": sentences})
    return answers


def _piece_answer(run: ServedRun, decoded: DecodedRequest, piece: int) -> dict[str, Any]:
    source, found = decoded.plan.pieces[piece], decoded.found[piece]
    if found is None:
        return {"source": source, "source_pieces": [END], "truncated": False,
                "hypotheses": [{"text": source, "score": 0.0, "pieces": [END]}]}
    return run.sentence(source, decoded.src_ids[piece], False, found)


def _joined(parts: list[dict[str, Any]], source: str, joiner: str) -> dict[str, Any]:
    """One object for several decoded parts (a sentence's pieces, a text's sentences): their
    best hypotheses joined, scored by the mean of theirs weighted by their pieces (EOS
    included); subword pieces in order, with one final </s>."""
    if len(parts) == 1:
        return dict(parts[0], source=source)
    best = [part["hypotheses"][0] for part in parts]
    weights = [len(h["pieces"]) for h in best]
    score = sum(h["score"] * w for h, w in zip(best, weights, strict=True)) / sum(weights)
    return {"source": source,
            "source_pieces": [*_without_end(p["source_pieces"] for p in parts), END],
            "truncated": False,
            "hypotheses": [{"text": joiner.join(h["text"] for h in best),
                            "score": round(score, 4),
                            "pieces": [*_without_end(h["pieces"] for h in best), END]}]}


def _without_end(lists: Any) -> list[str]:
    return [piece for pieces in lists for piece in pieces[:-1]]
