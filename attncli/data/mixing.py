"""Several training corpora as one: the pairs of each, one after the other, and the pairs an
epoch trains on, by each corpus's weight (`data.corpora`).

A weight is how many times per epoch each pair of its corpus is seen: w gives floor(w) whole
passes, plus a seeded share w - floor(w) of its pairs once more, another share each epoch
(drawn from the seed, the epoch and the corpus's place, never from a running stream, so a
resumed run draws the same). An epoch's pairs are then cut into batches as one corpus's are
(`batching.token_batches`), so a batch may hold pairs of several corpora. With one corpus of
weight 1 the epoch's pairs are all of them, once, and batches are cut exactly as before mixing
existed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attncli.data.batching import Batch, collate_flat, token_batches
from attncli.data.cache import TokenizedSplit

# Keeps the draws of the weights' fractional shares apart from batching's (seed, epoch) stream.
_SHARE_STREAM = 0x6D6978


@dataclass(frozen=True)
class MixPart:
    """One corpus of a mix: its name, tokenized training split and weight."""

    name: str
    split: TokenizedSplit
    weight: float


class MixedCorpus:
    """The training pairs of every corpus; position p < len(first) is the first corpus's pair
    p, the next ones the second's, and so on. Has what training reads of a `TokenizedSplit`
    (lengths, `collate`, drop counts) and cuts each epoch's batches by the weights."""

    def __init__(self, parts: Sequence[MixPart]):
        self.parts = list(parts)
        sizes = [len(part.split) for part in self.parts]
        self.starts = np.cumsum([0, *sizes])
        self.src_lens = _joined([part.split.src_lens for part in self.parts])
        self.tgt_lens = _joined([part.split.tgt_lens for part in self.parts])
        self.dropped_empty = sum(part.split.dropped_empty for part in self.parts)
        self.dropped_long = sum(part.split.dropped_long for part in self.parts)

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def weighted(self) -> bool:
        """Whether an epoch is other than each pair once."""
        return any(part.weight != 1 for part in self.parts)

    def epoch_pairs(self, seed: int, epoch: int) -> np.ndarray | None:
        """The positions an epoch trains on, a pair as often as its weight says (None: every
        pair once)."""
        if not self.weighted:
            return None
        chosen = []
        for index, part in enumerate(self.parts):
            size, start = len(part.split), int(self.starts[index])
            whole, share = int(part.weight), part.weight - int(part.weight)
            chosen += [np.arange(start, start + size)] * whole
            if share:
                rng = np.random.default_rng([seed, epoch, index, _SHARE_STREAM])
                extra = rng.choice(size, round(share * size), replace=False)
                chosen.append(start + np.sort(extra))
        return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)

    def epoch_batches(self, batch_tokens: int, seed: int, epoch: int, multiple: int
                      ) -> list[np.ndarray]:
        """The batches of `epoch` in training order (positions, see the class)."""
        picked = self.epoch_pairs(seed, epoch)
        if picked is None:
            return token_batches(self.src_lens, self.tgt_lens, batch_tokens, seed=seed,
                                 epoch=epoch, multiple=multiple)
        batches = token_batches(self.src_lens[picked], self.tgt_lens[picked], batch_tokens,
                                seed=seed, epoch=epoch, multiple=multiple)
        return [picked[batch] for batch in batches]

    def collate(self, pairs: np.ndarray, multiple: int = 1) -> Batch:
        """The padded batch of `pairs`; a batch of several corpora lists its pairs corpus by
        corpus (the same pairs: the loss is a sum over them)."""
        if len(self.parts) == 1:
            return self.parts[0].split.collate(pairs, multiple)
        which = np.searchsorted(self.starts, pairs, side="right") - 1
        order = np.argsort(which, kind="stable")
        pairs, which = pairs[order], which[order]
        src_ids, tgt_ids = [], []
        for index in np.unique(which).tolist():
            part = self.parts[index].split
            src, tgt = part.token_ids(pairs[which == index] - self.starts[index])
            src_ids.append(src)
            tgt_ids.append(tgt)
            part.mapped.release_pages()
        return collate_flat(np.concatenate(src_ids), self.src_lens[pairs],
                            np.concatenate(tgt_ids), self.tgt_lens[pairs], multiple=multiple)

    def describe(self) -> str:
        """For a run's data fingerprint: the weights (a mix only; nothing for one corpus)."""
        if len(self.parts) == 1 and not self.weighted:
            return ""
        return "; " + ", ".join(f"{part.name} x{part.weight:g}" for part in self.parts)

    def shares(self) -> dict[str, float]:
        """Each corpus's share of an epoch's pairs (its weighted pairs over all)."""
        weighted = [part.weight * len(part.split) for part in self.parts]
        total = sum(weighted) or 1.0
        return {part.name: w / total for part, w in zip(self.parts, weighted, strict=True)}


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """One array of them (the very array when there is one: a one-corpus run keeps its own)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
