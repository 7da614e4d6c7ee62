"""Validation while training scores the first `data.valid_limit` pairs, loss and BLEU alike."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from attncli.batching import Batch
from attncli.config import Config
from attncli.distributed import World
from attncli.training.validate import Validator


class _RecordingSplit:
    """A val token cache of `n` pairs that remembers which pairs were collated."""

    def __init__(self, n: int):
        rng = np.random.default_rng(0)
        self.src_lens = rng.integers(3, 30, n).astype(np.int32)
        self.tgt_lens = rng.integers(3, 30, n).astype(np.int32)
        self.seen: list[int] = []

    def collate(self, pairs: np.ndarray, multiple: int = 1) -> Batch:
        self.seen += pairs.tolist()
        width = int(self.tgt_lens[pairs].max()) + 1
        ids = torch.ones(len(pairs), width, dtype=torch.long)
        return Batch(src=ids, tgt_in=ids, tgt_out=ids)


class _ConstantLoss(torch.nn.Module):
    def summed_loss(self, src, tgt_in, tgt_out, smoothing, dtype):
        return torch.tensor(float(tgt_out.numel()))


def test_the_validation_loss_scores_only_the_first_valid_limit_pairs():
    config = Config.model_validate({"data": {"valid_limit": 40}})
    split = _RecordingSplit(300)
    data = SimpleNamespace(val=split, val_text=SimpleNamespace(src=["x"] * 300, tgt=["y"] * 300))
    validator = Validator(config, _ConstantLoss(), None, data, torch.device("cpu"), "fp32", 1,
                          World())
    assert validator.loss() == 1.0
    assert sorted(split.seen) == list(range(40))
    assert validator.src == ["x"] * 40
