"""Token-budget batches: every pair once per epoch, the longer side within the budget, shapes
that repeat, exact padding."""

import multiprocessing
import os
import random
import signal
from collections import Counter

import numpy as np
import pytest

from attncli.core.text import BOS_ID, EOS_ID, PAD_ID
from attncli.data.batching import batch_loader, collate, padding_share, round_up, token_batches


def _lengths(n: int = 2000, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    tgt = [rng.randint(3, 40) for _ in range(n)]
    src = [max(2, t + rng.randint(-4, 4)) for t in tgt]
    return src, tgt


def _padded_cells(batch, src, tgt, multiple):
    """(rows x padded source length, rows x padded target length) of one batch."""
    rows = len(batch)
    return (rows * round_up(max(src[i] for i in batch), multiple),
            rows * round_up(max(tgt[i] for i in batch) + 1, multiple))


@pytest.mark.parametrize("multiple", [1, 8])
def test_each_pair_once_with_both_sides_within_the_budget(multiple):
    src, tgt = _lengths()
    batches = token_batches(src, tgt, 512, seed=1, epoch=0, multiple=multiple)
    assert sorted(i for b in batches for i in b) == list(range(len(tgt)))
    for b in batches:
        assert max(_padded_cells(b, src, tgt, multiple)) <= 512


def test_long_sources_with_short_targets_stay_within_the_budget():
    """The budget counts the longer side: a target-only budget of 512 would put 85 of these
    pairs (6 target tokens each) in a batch, 5,100 padded source tokens."""
    rng = random.Random(0)
    tgt = [5] * 1000
    src = [rng.randint(50, 60) for _ in tgt]
    batches = token_batches(src, tgt, 512, seed=0, epoch=0)
    assert max(_padded_cells(b, src, tgt, 1)[0] for b in batches) <= 512
    assert max(len(b) for b in batches) <= 512 // 50
    # and the other way round: long targets, short sources
    swapped = token_batches(tgt, src, 512, seed=0, epoch=0)
    assert max(_padded_cells(b, tgt, src, 1)[1] for b in swapped) <= 512


def test_a_pair_longer_than_the_budget_gets_a_batch_alone():
    batches = token_batches([300, 4, 5], [2, 3, 4], 100, seed=0, epoch=0)
    assert sorted(len(b) for b in batches) == [1, 2]


def test_rounded_lengths_make_batch_shapes_repeat():
    src, tgt = _lengths()
    exact = token_batches(src, tgt, 512, seed=1, epoch=0, multiple=1)
    rounded = token_batches(src, tgt, 512, seed=1, epoch=0, multiple=8)

    def shapes(batches, multiple):
        return Counter((tuple(batch.src.shape), tuple(batch.tgt_in.shape)) for batch in (
            collate([[5] * (src[i] - 1) + [EOS_ID] for i in b], [[6] * tgt[i] for i in b],
                    multiple) for b in batches))

    assert len(shapes(exact, 1)) > 3 * len(shapes(rounded, 8))
    assert all(d % 8 == 0 for pair in shapes(rounded, 8) for shape in pair for d in shape[1:])
    assert padding_share(rounded, src, tgt, 8) > padding_share(exact, src, tgt, 1)


def test_same_seed_and_epoch_give_the_same_batches():
    src, tgt = _lengths(300)

    def cut(epoch):
        return [b.tolist() for b in token_batches(src, tgt, 256, 3, epoch, 8)]

    assert cut(2) == cut(2)
    assert cut(2) != cut(3)


def test_collate_pads_both_sides_and_adds_bos_and_eos():
    batch = collate([[5, 6, EOS_ID], [7, EOS_ID]], [[8, 9], [10]], multiple=4)
    P = PAD_ID
    assert batch.src.tolist() == [[5, 6, EOS_ID, P], [7, EOS_ID, P, P]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, 9, P], [BOS_ID, 10, P, P]]
    assert batch.tgt_out.tolist() == [[8, 9, EOS_ID, P], [10, EOS_ID, P, P]]
    assert batch.num_tgt_tokens == 5 and batch.num_src_tokens == 5


def test_padding_share_counts_both_sides():
    # one batch: sources of 3 and 1 ids, targets of 2 and 1 (+1 each): 9 real of 2 x (3 + 3)
    share = padding_share([np.array([0, 1])], np.array([3, 1]), np.array([2, 1]))
    assert share == pytest.approx(1 - 9 / 12)


class _Numbered:
    """A corpus stand-in: pair i is the source [i + 4, EOS] and the target [i + 4]."""

    def collate(self, pairs: np.ndarray, multiple: int = 1):
        return collate([[int(i) + 4, EOS_ID] for i in pairs], [[int(i) + 4] for i in pairs],
                       multiple)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_at_a_collating_worker_leaves_it_collating(stop):
    """Ctrl-C reaches the terminal's whole process group, torchrun's SIGTERM each rank's, the
    loader's workers too: one that quit on it made the trainer's next batches fail (an error,
    before the trainer's save)."""
    loader = iter(batch_loader(_Numbered(), (np.array([i]) for i in range(40)), 1, workers=1,
                               pin_memory=False))
    first = next(loader)
    (worker,) = multiprocessing.active_children()
    os.kill(worker.pid, stop)
    batches = [first, *loader]
    assert [batch.src[0, 0].item() for batch in batches] == [i + 4 for i in range(40)]
