"""Token-budget batches from length-sorted buckets, padding into tensors, and the DataLoader
that feeds them to the training step.

Sentences of similar length go together, so little of each batch is padding; the batch order
is shuffled per epoch (seeded), so training still sees the data in a random order. Every
example lands in exactly one batch per epoch.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from attncli.core.text import BOS_ID, EOS_ID, PAD_ID

# How batches are cut, saved with each checkpoint: a data position (epoch, batch index) only
# means the same batches when they are cut the same way.
BATCHING = "longer-side budget, numpy order v1"


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

    def pin_memory(self) -> Batch:
        """Page-locked copies, so `to(cuda, non_blocking=True)` overlaps with compute."""
        return Batch(*(t.pin_memory() for t in (self.src, self.tgt_in, self.tgt_out)))

    def to(self, device: torch.device) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in (self.src, self.tgt_in,
                                                                  self.tgt_out)))


def round_up(length, multiple: int):
    """`length` (an int or a numpy array) rounded up to a multiple of `multiple`."""
    return -(-length // multiple) * multiple


def _pad_rows(values: np.ndarray, lengths: np.ndarray, width: int, start: int = 0
              ) -> np.ndarray:
    """(rows, width) PAD-filled int64 array; row i holds its `lengths[i]` values from column
    `start` on. `values` is every row's values back to back (as Arrow stores a list column)."""
    out = np.full((len(lengths), width), PAD_ID, dtype=np.int64)
    columns = np.arange(width)
    out[(columns >= start) & (columns < (lengths + start)[:, None])] = values
    return out


def collate_flat(src_values: np.ndarray, src_lens: np.ndarray, tgt_values: np.ndarray,
                 tgt_lens: np.ndarray, multiple: int = 1) -> Batch:
    """Back-to-back source ids (each sentence ending in EOS) and bare target ids, with each
    sentence's length -> a padded `Batch`; `multiple` rounds both padded lengths up (see
    `token_batches`)."""
    rows = len(src_lens)
    src = _pad_rows(src_values, src_lens, round_up(int(src_lens.max()), multiple))
    tgt_width = round_up(int(tgt_lens.max()) + 1, multiple)
    tgt_in = _pad_rows(tgt_values, tgt_lens, tgt_width, start=1)
    tgt_in[:, 0] = BOS_ID
    tgt_out = _pad_rows(tgt_values, tgt_lens, tgt_width)
    tgt_out[np.arange(rows), tgt_lens] = EOS_ID
    return Batch(*(torch.from_numpy(a) for a in (src, tgt_in, tgt_out)))


def _flat(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    values = np.fromiter((i for s in seqs for i in s), dtype=np.int64, count=int(lengths.sum()))
    return values, lengths


def pad(seqs: Sequence[Sequence[int]], multiple: int = 1) -> Tensor:
    """Right-pad id lists with PAD into a (len(seqs), longest) LongTensor, longest rounded up
    to a multiple of `multiple`."""
    values, lengths = _flat(seqs)
    return torch.from_numpy(_pad_rows(values, lengths, round_up(int(lengths.max()), multiple)))


def collate(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
            multiple: int = 1) -> Batch:
    """Source lists (already ending in EOS) and bare target lists -> a padded `Batch`."""
    return collate_flat(*_flat(src_ids), *_flat(tgt_ids), multiple)


def padded_widths(src_lens: np.ndarray, tgt_lens: np.ndarray, multiple: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's padded source and target length (target + BOS/EOS), as `collate` pads."""
    return (round_up(np.asarray(src_lens, dtype=np.int32), multiple),
            round_up(np.asarray(tgt_lens, dtype=np.int32) + 1, multiple))


def _greedy_cuts(widths: np.ndarray, batch_tokens: int) -> list[int]:
    """End positions of batches over non-decreasing `widths`: each batch as long as
    (its count x its widest pair) stays within `batch_tokens` (at least one pair)."""
    ends, start = [], 0
    while start < len(widths):
        most = max(1, batch_tokens // int(widths[start]))  # widths only grow from here
        cost = widths[start : start + most] * np.arange(1, min(most, len(widths) - start) + 1)
        start += max(1, int(np.searchsorted(cost, batch_tokens, side="right")))
        ends.append(start)
    return ends


def token_batches(
    src_lens: Sequence[int] | np.ndarray,
    tgt_lens: Sequence[int] | np.ndarray,
    batch_tokens: int,
    seed: int,
    epoch: int,
    multiple: int = 1,
) -> list[np.ndarray]:
    """Split pair indices into batches of at most `batch_tokens` padded tokens on the longer
    side, source or target.

    `src_lens` count source ids with EOS, `tgt_lens` bare target ids (+1 for BOS/EOS here).
    Pairs are shuffled, sorted by (longer padded side, padded target, source length) — a stable
    sort, so equal lengths stay shuffled — cut greedily into batches, and the batch order is
    shuffled. The same seed and epoch give the same batches. A single pair longer than the
    budget gets a batch alone. Counting the longer side matters: a budget on the target alone let
    short targets with long sources make batches many times the budget.

    `multiple` > 1 counts lengths rounded up to that multiple (as `collate` pads them), so every
    full batch of a length bucket has the same shape. Why: CPU matrix kernels (oneDNN) are
    generated per tensor shape, at a cost each time a shape is new (benchmarks/MEASUREMENTS.md).
    """
    src_width, tgt_width = padded_widths(src_lens, tgt_lens, multiple)
    width = np.maximum(src_width, tgt_width)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(width))
    order = order[np.lexsort((np.asarray(src_lens)[order], tgt_width[order], width[order]))]
    batches = np.split(order, _greedy_cuts(width[order], batch_tokens)[:-1])
    return [batches[i] for i in rng.permutation(len(batches))]


def padding_share(batches: Sequence[np.ndarray], src_lens: np.ndarray, tgt_lens: np.ndarray,
                  multiple: int = 1) -> float:
    """Fraction of the padded (batch x longest) cells, source and target, that are padding."""
    if not batches:
        return 0.0
    src_width, tgt_width = padded_widths(src_lens, tgt_lens, multiple)
    flat = np.concatenate(batches)
    starts = np.cumsum([0] + [len(b) for b in batches[:-1]])
    sizes = np.diff(np.append(starts, len(flat)))
    cells = (sizes * (np.maximum.reduceat(src_width[flat], starts).astype(np.int64)
                      + np.maximum.reduceat(tgt_width[flat], starts))).sum()
    real = (np.asarray(src_lens)[flat].sum(dtype=np.int64)
            + np.asarray(tgt_lens)[flat].sum(dtype=np.int64) + len(flat))  # + BOS/EOS
    return 1.0 - real / cells


# -- feeding the training step -----------------------------------------------------------------


class Collates(Protocol):
    def collate(self, pairs: np.ndarray, multiple: int = 1) -> Batch: ...


def resolve_workers(setting: int | str, device: torch.device) -> int:
    """`train.workers: auto`: a few on CUDA, where collation would keep the GPU waiting; none on
    CPU, where a worker process takes a core from the training step's matrix kernels."""
    if setting != "auto":
        return int(setting)
    if device.type == "cuda":
        return max(1, min(4, (os.cpu_count() or 2) - 1))
    return 0


class _Collated(torch.utils.data.Dataset):
    """The batch of these pair positions, collated where it is asked for (a worker).

    Indexed by the positions themselves (the loader's sampler yields them), so one loader can
    serve a whole run, epoch after epoch, with the worker processes it started once.
    """

    def __init__(self, corpus: Collates, multiple: int):
        self.corpus, self.multiple = corpus, multiple

    def __getitem__(self, pairs: np.ndarray) -> Batch:
        return self.corpus.collate(pairs, self.multiple)


def batch_loader(corpus: Collates, batches: Iterable[np.ndarray], multiple: int, workers: int,
                 pin_memory: bool) -> torch.utils.data.DataLoader:
    """The batches in exactly this order, collated by `workers` processes a few batches ahead.

    `batches` may be endless (a run's batches over every epoch to come): it is read lazily,
    only as far ahead as the workers' prefetch. A generator of its own keeps the DataLoader
    from drawing on torch's global random state, which holds the dropout masks: a resume, which
    starts a loader mid-epoch, would shift them.
    """
    return torch.utils.data.DataLoader(
        _Collated(corpus, multiple), batch_size=None, sampler=batches,
        num_workers=workers, pin_memory=pin_memory, prefetch_factor=4 if workers else None,
        generator=torch.Generator(), worker_init_fn=_leave_stops_to_the_trainer)


def _leave_stops_to_the_trainer(_worker: int) -> None:
    """A terminal's Ctrl-C (and its closing, SIGHUP) reaches its whole process group, and
    torchrun signals each rank's group with SIGTERM, so the workers get them too: they ignore
    them, and the training process finishes its update and saves. (A worker that quit on one
    made the trainer's next batches fail before the save; the workers still end with the
    trainer, as torch ends them.)"""
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
