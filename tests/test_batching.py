"""Token-budget batches: every example once per epoch, budget kept, shapes that repeat."""

import random
from collections import Counter

from attncli.batching import collate, padding_share, round_up, token_batches


def _lengths(n: int = 2000, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    tgt = [rng.randint(3, 40) for _ in range(n)]
    src = [max(2, t + rng.randint(-4, 4)) for t in tgt]
    return src, tgt


def test_each_example_once_within_the_padded_budget():
    src, tgt = _lengths()
    for multiple in (1, 8):
        batches = token_batches(src, tgt, 512, seed=1, epoch=0, multiple=multiple)
        assert sorted(i for b in batches for i in b) == list(range(len(tgt)))
        for b in batches:
            assert len(b) * round_up(max(tgt[i] for i in b) + 1, multiple) <= 512


def test_rounded_lengths_make_batch_shapes_repeat():
    src, tgt = _lengths()
    exact = token_batches(src, tgt, 512, seed=1, epoch=0, multiple=1)
    rounded = token_batches(src, tgt, 512, seed=1, epoch=0, multiple=8)

    def shapes(batches, multiple):
        return Counter(tuple(collate([[5] * src[i] for i in b], [[6] * tgt[i] for i in b],
                                     multiple).tgt_in.shape) for b in batches)

    assert len(shapes(rounded, 8)) <= 8  # one per length bucket, plus a few remainders
    assert len(shapes(exact, 1)) > 3 * len(shapes(rounded, 8))
    assert all(d % 8 == 0 for shape in shapes(rounded, 8) for d in shape[1:])
    assert padding_share(rounded, tgt, 8) > padding_share(exact, tgt, 1)


def test_same_seed_and_epoch_give_the_same_batches():
    src, tgt = _lengths(300)
    assert token_batches(src, tgt, 256, 3, 2, 8) == token_batches(src, tgt, 256, 3, 2, 8)
    assert token_batches(src, tgt, 256, 3, 2, 8) != token_batches(src, tgt, 256, 3, 3, 8)
