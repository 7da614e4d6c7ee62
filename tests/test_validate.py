"""Validation while training scores the first `data.valid_limit` pairs, loss and BLEU alike
(the loss on those of them that fit data.max_len)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from attncli.core.config import Config
from attncli.data.batching import Batch
from attncli.training.distributed import World
from attncli.training.validate import ValidationSetup, Validator


class _RecordingSplit:
    """A val token cache of `n` pairs that remembers which pairs were collated."""

    def __init__(self, n: int, rows: np.ndarray | None = None):
        rng = np.random.default_rng(0)
        self.src_lens = rng.integers(3, 30, n).astype(np.int32)
        self.tgt_lens = rng.integers(3, 30, n).astype(np.int32)
        self.rows = np.arange(n) if rows is None else rows  # each pair's stored row
        self.seen: list[int] = []

    def collate(self, pairs: np.ndarray, multiple: int = 1) -> Batch:
        self.seen += pairs.tolist()
        width = int(self.tgt_lens[pairs].max()) + 1
        ids = torch.ones(len(pairs), width, dtype=torch.long)
        return Batch(src=ids, tgt_in=ids, tgt_out=ids)


CPU_FP32 = ValidationSetup(device=torch.device("cpu"), precision="fp32", pad_multiple=1,
                           world=World())


class _ConstantLoss(torch.nn.Module):
    def summed_loss(self, src, tgt_in, tgt_out, *, label_smoothing, compute_dtype):
        return torch.tensor(float(tgt_out.numel()))


def test_the_validation_loss_scores_only_the_first_valid_limit_pairs():
    config = Config.model_validate({"data": {"valid_limit": 40}})
    split = _RecordingSplit(300)
    data = SimpleNamespace(val=split, val_text=SimpleNamespace(
        src=["x"] * 300, tgt=["y"] * 300, rows=list(range(300))))
    validator = Validator(config, _ConstantLoss(), None, data, setup=CPU_FP32)
    assert validator.loss() == 1.0
    assert sorted(split.seen) == list(range(40))
    assert validator.src == ["x"] * 40
    assert validator.pairs == "first 40 of 300 val pairs"


def test_loss_and_bleu_score_the_same_first_pairs_when_long_ones_are_left_out():
    # Stored rows 3 and 10 are empty (not in the texts), rows 5, 12 and 60 too long for
    # data.max_len (not in the token cache): the first 40 texts span stored rows 0-41.
    text_rows = [r for r in range(302) if r not in (3, 10)]
    cache_rows = np.array([r for r in range(302) if r not in (3, 10, 5, 12, 60)])
    config = Config.model_validate({"data": {"valid_limit": 40}})
    split = _RecordingSplit(len(cache_rows), cache_rows)
    data = SimpleNamespace(val=split, val_text=SimpleNamespace(
        src=[f"s{r}" for r in text_rows], tgt=["y"] * 300, rows=text_rows))
    validator = Validator(config, _ConstantLoss(), None, data, setup=CPU_FP32)
    validator.loss()
    assert validator.src[-1] == "s41"
    assert sorted(split.rows[split.seen]) == [r for r in text_rows[:40] if r not in (5, 12)]
    assert validator.pairs == ("first 40 of 300 val pairs; loss on the 38 of them that fit "
                               "data.max_len=100")
