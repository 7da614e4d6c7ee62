"""A request's texts as documents: what each route answers once their sentences are decoded.

Every text of a request is split into sentences and cut into pieces that fit the model
(`decoding.documents.plan_documents`); the pieces of the whole request go to the queue as one
job (`ServedRun.run_batch` decodes them with other requests'), and what comes back is put
together here: LibreTranslate's `/translate` gets each text's translation joined in its layout
(and its alternatives as Argos Translate builds them: the i-th of a text joins the i-th
hypothesis of each of its sentences, then LibreTranslate drops those equal to the translation
or to an earlier one); `/v1/translate` gets today's object for the joined translation (one
hypothesis, no attention) with `sentences`, one such object per sentence with its n-best and
attention. A request in HTML (`"format": "html"`) is translated block by block (serve/markup.py):
each page's blocks of text are the texts above, and the page is rebuilt around their
translations, its inline tags placed by the model's cross-attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncli.data.sentences import sentence_joiner
from attncli.decoding.documents import DocumentPlan, joined_score
from attncli.serve.markup import (
    BlockTranslation,
    HtmlDocument,
    char_alignment,
    head_mean,
    join_alignments,
)
from attncli.serve.served_run import ServedRun, Translation

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
    score = joined_score([h["score"] for h in best], [len(h["pieces"]) for h in best])
    return {"source": source,
            "source_pieces": [*_without_end(p["source_pieces"] for p in parts), END],
            "truncated": False,
            "hypotheses": [{"text": joiner.join(h["text"] for h in best),
                            "score": round(score, 4),
                            "pieces": [*_without_end(h["pieces"] for h in best), END]}]}


def _without_end(lists: Any) -> list[str]:
    return [piece for pieces in lists for piece in pieces[:-1]]


def translated_pages(run: ServedRun, pages: list[HtmlDocument], decoded: DecodedRequest
                     ) -> list[str]:
    """Each page rebuilt around its blocks' translations (`decoded` holds the blocks of every
    page, in order), inline tags placed by the model's cross-attention where it was taken."""
    texts, _ = translated_texts(run, decoded, 1)
    rebuilt, block = [], 0
    for page in pages:
        translations = []
        for source in page.blocks:
            alignment = _block_alignment(run, decoded, block, source=source.text,
                                         target=texts[block])
            translations.append(BlockTranslation(texts[block], alignment))
            block += 1
        rebuilt.append(page.rebuild(translations))
    return rebuilt


def _block_alignment(run: ServedRun, decoded: DecodedRequest, block: int, *, source: str,
                     target: str) -> list[tuple[int, int]]:
    """A block's character alignment from its pieces' cross-attention (none without it)."""
    parts = []
    for pieces in decoded.plan.sentence_pieces[block]:
        for i in pieces:
            found = decoded.found[i]
            if found is None or found.attention is None:
                continue
            best, piece = found.hypotheses[0], decoded.plan.pieces[i]
            text = run.text(best)
            pairs = char_alignment(piece, run.tokenizer.src_pieces(decoded.src_ids[i]), text,
                                   run.tokenizer.tgt_pieces(best.tokens),
                                   attention=head_mean(found.attention["cross"]))
            parts.append((piece, text, pairs))
    return join_alignments(source, target, parts)


def native_pages(run: ServedRun, pages: list[HtmlDocument], html: list[str],
                 decoded: DecodedRequest, *, attention: bool) -> list[dict[str, Any]]:
    """Each page's /v1/translate object: the page translated (one hypothesis), and the
    sentences of its blocks (their attention only when the request asked for it)."""
    blocks = native_answers(run, [b.text for page in pages for b in page.blocks], decoded)
    joiner = sentence_joiner(run.languages[1])
    answers, taken = [], 0
    for source, page, translated in zip(html, pages, translated_pages(run, pages, decoded),
                                        strict=True):
        mine = blocks[taken:taken + len(page.blocks)]
        taken += len(page.blocks)
        sentences = [s if attention else {k: v for k, v in s.items() if k != "attention"}
                     for block in mine for s in block["sentences"]]
        whole = _joined(sentences, source, joiner) if sentences else {
            "source": source, "source_pieces": [END], "truncated": False,
            "hypotheses": [{"text": translated, "score": 0.0, "pieces": [END]}]}
        whole = {k: v for k, v in whole.items() if k != "attention"}
        whole["hypotheses"] = [dict(whole["hypotheses"][0], text=translated)]
        answers.append({**whole, "sentences": sentences})
    return answers
