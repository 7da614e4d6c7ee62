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


def round_up(length: int, multiple: int) -> int:
    """`length` rounded up to a multiple of `multiple`."""
    return -(-length // multiple) * multiple


def pad(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID, multiple: int = 1) -> Tensor:
    """Right-pad id lists into a (len(seqs), longest) LongTensor, longest rounded up to
    a multiple of `multiple`."""
    longest = round_up(max(len(s) for s in seqs), multiple)
    out = torch.full((len(seqs), longest), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def collate(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
            multiple: int = 1) -> Batch:
    """Source lists (already ending in EOS) and bare target lists -> a padded `Batch`.

    `multiple` rounds both padded lengths up (see `token_batches`)."""
    return Batch(
        src=pad(src_ids, multiple=multiple),
        tgt_in=pad([[BOS_ID, *t] for t in tgt_ids], multiple=multiple),
        tgt_out=pad([[*t, EOS_ID] for t in tgt_ids], multiple=multiple),
    )


def token_batches(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    batch_tokens: int,
    seed: int,
    epoch: int,
    multiple: int = 1,
) -> list[list[int]]:
    """Split example indices into batches of at most `batch_tokens` padded target tokens.

    Examples are shuffled, sorted by (padded target, source) length — a stable sort, so equal
    lengths stay shuffled — cut greedily into batches, and the batch order is shuffled. The same
    seed and epoch give the same batches. A single example longer than the budget gets a batch
    alone.

    `multiple` > 1 counts lengths rounded up to that multiple (as `collate` pads them), so every
    full batch of a length bucket has the same shape. Why: CPU matrix kernels (oneDNN) are
    generated per tensor shape, costing milliseconds each time a shape is new; with exact
    lengths nearly every batch was new and a step took several times longer.
    """
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(tgt_lens)))
    rng.shuffle(order)
    order.sort(key=lambda i: (round_up(tgt_lens[i] + 1, multiple), src_lens[i]))
    batches, current, longest = [], [], 0
    for i in order:
        length = round_up(tgt_lens[i] + 1, multiple)  # + EOS (or BOS on the input side)
        if current and max(longest, length) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def padding_share(batches: Sequence[list[int]], lens: Sequence[int], multiple: int = 1) -> float:
    """Fraction of the padded (batch x longest) target cells that are padding."""
    real = sum(lens[i] + 1 for b in batches for i in b)
    cells = sum(len(b) * round_up(max(lens[i] for i in b) + 1, multiple) for b in batches)
    return 1.0 - real / cells if cells else 0.0
