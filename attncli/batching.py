"""Token-budget batches from length-sorted buckets, and padding into tensors.

Sentences of similar length go together, so little of each batch is padding; the batch order
is shuffled per epoch (seeded), so training still sees the data in a random order. Every
example lands in exactly one batch per epoch.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attncli.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """One padded batch.

    src:     (batch, src_len)  source ids ending in EOS, right-padded with PAD
    tgt_in:  (batch, tgt_len)  BOS + target ids (decoder input, teacher forcing)
    tgt_out: (batch, tgt_len)  target ids + EOS (what the decoder must predict)
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor

    @property
    def num_tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    @property
    def num_src_tokens(self) -> int:
        return int((self.src != PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in (self.src, self.tgt_in,
                                                                  self.tgt_out)))


def pad(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> Tensor:
    """Right-pad id lists into a (len(seqs), longest) LongTensor."""
    longest = max(len(s) for s in seqs)
    out = torch.full((len(seqs), longest), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def collate(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]) -> Batch:
    """Source lists (already ending in EOS) and bare target lists -> a padded `Batch`."""
    return Batch(
        src=pad(src_ids),
        tgt_in=pad([[BOS_ID, *t] for t in tgt_ids]),
        tgt_out=pad([[*t, EOS_ID] for t in tgt_ids]),
    )


def token_batches(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    batch_tokens: int,
    seed: int,
    epoch: int,
) -> list[list[int]]:
    """Split example indices into batches of at most `batch_tokens` padded target tokens.

    Examples are shuffled, sorted by (target, source) length — a stable sort, so equal lengths
    stay shuffled — cut greedily into batches, and the batch order is shuffled. The same seed and
    epoch give the same batches. A single example longer than the budget gets a batch alone.
    """
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(tgt_lens)))
    rng.shuffle(order)
    order.sort(key=lambda i: (tgt_lens[i], src_lens[i]))
    batches, current, longest = [], [], 0
    for i in order:
        length = tgt_lens[i] + 1  # + EOS (or BOS on the input side)
        if current and max(longest, length) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def padding_share(batches: Sequence[list[int]], lens: Sequence[int]) -> float:
    """Fraction of the padded (batch x longest) target cells that are padding."""
    real = sum(lens[i] + 1 for b in batches for i in b)
    cells = sum(len(b) * (max(lens[i] for i in b) + 1) for b in batches)
    return 1.0 - real / cells if cells else 0.0
