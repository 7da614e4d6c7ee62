"""How much of the training data a tokenizer cannot say: the share of `<unk>` among its tokens,
and the characters behind them.

A run fine-tuned from a parent keeps the parent's tokenizer (`attncli train --init-from`), so
characters its vocabulary lacks (another script, symbols, the new domain's signs) reach the
model as `<unk>`, which it can neither read nor write. Counted on the token cache (the pairs
training uses), each side apart; the characters are read back from the target text of the
rows that hold an `<unk>`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from attncli.core.config import Corpus
from attncli.core.text import UNK_ID
from attncli.data.corpus import TrainingData
from attncli.data.sources import split_source
from attncli.data.tokenizer import Tokenizer

# Target rows holding an <unk> whose text is read back for its characters, per corpus: enough
# to rank the frequent ones, bounded on a corpus where most rows hold one.
ROWS_READ = 2_000


@dataclass(frozen=True)
class UnknownTokens:
    """One training corpus's `<unk>` ids and all its ids, sources and targets apart, and the
    stored rows whose target holds one."""

    corpus: Corpus
    src: int
    src_total: int
    tgt: int
    tgt_total: int
    tgt_rows: np.ndarray

    def share(self, side: str) -> float:
        """The share of the side's ids (src or tgt) that are `<unk>`."""
        found, total = getattr(self, side), getattr(self, f"{side}_total")
        return found / total if total else 0.0


def unknown_tokens(data: TrainingData) -> list[UnknownTokens]:
    """The `<unk>` counts of each corpus's training pairs (one corpus: a list of one)."""
    found = []
    for part, corpus in zip(data.train.parts, data.corpora, strict=True):
        src, src_total, _ = part.split.occurrences("src_ids", UNK_ID)
        tgt, tgt_total, rows = part.split.occurrences("tgt_ids", UNK_ID)
        found.append(UnknownTokens(corpus=corpus, src=src, src_total=src_total, tgt=tgt,
                                   tgt_total=tgt_total, tgt_rows=rows))
    return found


def unknown_characters(counts: UnknownTokens, tokenizer: Tokenizer, most: int = 5
                       ) -> list[tuple[str, int]]:
    """The `most` characters seen most often in a corpus's target `<unk>` pieces (of the first
    `ROWS_READ` rows holding one), with their counts."""
    chars: Counter[str] = Counter()
    rows = counts.tgt_rows[:ROWS_READ].tolist()
    for text in split_source(counts.corpus.data, "train").rows.select(rows)["tgt"]:
        for piece in tokenizer.tgt.encode((text or "").strip(), out_type=str):
            if tokenizer.tgt.piece_to_id(piece) == UNK_ID:
                chars.update(piece.replace("\u2581", ""))  # not SentencePiece's space mark
    return chars.most_common(most)
