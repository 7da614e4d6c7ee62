"""The updates in training order, from a saved position on, epoch after epoch.

An update is `accum_steps` consecutive batches of the epoch's batch order; each process trains
on its share of them (`World.share`), and on a zero-weight stand-in when the epoch's last
update has fewer batches than processes. The position (epoch, batch index) counts global
batches, so a run resumes exactly on any number of processes.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from attncli.core.config import TrainConfig
from attncli.data.batching import Batch, batch_loader
from attncli.data.subwords import SubwordSampler
from attncli.training.distributed import World


@dataclass
class Update:
    """One update's batches for this process, and where training continues after it."""

    batches: list[Batch]   # this process's share, collated (a stand-in when `counted` is False)
    tokens: int            # target tokens of the whole update (every process's batches, + EOS)
    counted: bool          # False: this process's share is empty; it joins with zero weight
    epoch: int             # the position after this update
    batch_index: int
    trained_epoch: int     # the epoch its batches belong to (what logs label it with)


class UpdateFeed:
    """Cuts each epoch's batches and feeds this process's share through one DataLoader, whose
    worker processes (if any) serve the whole run."""

    def __init__(self, corpus, cfg: TrainConfig, world: World, *, pad_multiple: int,
                 workers: int, device: torch.device, sampler: SubwordSampler | None = None):
        """`corpus`: the training pairs' `mixing.MixedCorpus` (length columns, each epoch's
        batches, `collate`);
        `sampler`: re-segments each batch (subword regularization), None to keep the cache's."""
        self.corpus, self.cfg, self.world = corpus, cfg, world
        self.pad_multiple, self.workers, self.device = pad_multiple, workers, device
        self.sampler = sampler
        self._epoch_order: tuple[int, list[np.ndarray]] = (-1, [])

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """The batches of `epoch` in training order (pair positions).

        Kept for the epoch last asked for: the start-up banner and the loop share one cut,
        which takes seconds on millions of pairs.
        """
        if self._epoch_order[0] != epoch:
            self._epoch_order = (epoch, self.corpus.epoch_batches(
                self.cfg.batch_tokens, self.cfg.seed, epoch, self.pad_multiple))
        return self._epoch_order[1]

    def _schedule(self, epoch: int, batch_index: int
                  ) -> Iterator[tuple[int, tuple[int, int], list[np.ndarray]]]:
        """Each update's epoch, (epoch, batch index) after it, and its batches, endlessly."""
        accum = self.cfg.accum_steps
        while True:
            order = self.epoch_batches(epoch)
            for start in range(batch_index, len(order), accum):
                update = order[start : start + accum]
                end = start + len(update)
                yield epoch, (epoch, end) if end < len(order) else (epoch + 1, 0), update
            epoch, batch_index = epoch + 1, 0

    def updates(self, epoch: int, batch_index: int) -> Iterator[Update]:
        """The updates from position (epoch, batch_index) on; stops only when not asked on."""
        share, corpus = self.world.share, self.corpus
        schedule, ahead = itertools.tee(self._schedule(epoch, batch_index))
        mine_ahead = (pairs for _, _, update in ahead for pairs in share(update))
        loader = iter(batch_loader(corpus, mine_ahead, multiple=self.pad_multiple,
                                   workers=self.workers, pin_memory=self.device.type == "cuda"))
        for trained_epoch, (epoch, batch_index), update in schedule:
            rows = sum(len(pairs) for pairs in update)
            tokens = rows + sum(int(corpus.tgt_lens[pairs].sum()) for pairs in update)
            mine = [next(loader) for _ in share(update)]
            if self.sampler is not None:
                mine, tokens = self._resampled(mine, share(update), epoch)
            counted = bool(mine)
            if not counted:
                mine = [corpus.collate(update[0], self.pad_multiple)]
            yield Update(mine, tokens, counted=counted, epoch=epoch, batch_index=batch_index,
                         trained_epoch=trained_epoch)

    def _resampled(self, batches: list[Batch], pairs: list[np.ndarray], epoch: int
                   ) -> tuple[list[Batch], int]:
        """The batches re-segmented, and the update's target tokens counted anew (over every
        process). A batch's draws are keyed by its pairs, which no other batch of the epoch
        holds, so they do not depend on the number of processes or on a resume."""
        sampled = [self.sampler.resample(batch, epoch, zlib.crc32(rows.tobytes()),
                                         self.pad_multiple)
                   for batch, rows in zip(batches, pairs, strict=True)]
        return sampled, sum(self.world.gather(sum(b.num_tgt_tokens for b in sampled)))
