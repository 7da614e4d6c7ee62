"""Subword regularization: batches re-segmented by seeded draws, the text unchanged, a resumed
run drawing what the uninterrupted one drew, and a BPE tokenizer refused."""

from __future__ import annotations

import io
import json
import shutil

import sentencepiece as spm
import torch
from conftest import toy_pairs
from helpers import SMALL, assert_one_line_error, losses, metrics, resume, train

from attncli.core.text import EOS_ID
from attncli.data.batching import collate
from attncli.data.subwords import SubwordSampler
from attncli.data.tokenizer import Tokenizer

SAMPLING = ["train.subword_alpha=0.2", "train.max_steps=4", "train.save_every=2"]


def _tokenizer() -> Tokenizer:
    texts = [pair[side] for pair in toy_pairs(300, seed=3) for side in ("en", "de")]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model,
                                   vocab_size=100, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                   minloglevel=2)
    proc = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return Tokenizer(proc, proc)


def _batch(tokenizer: Tokenizer, count: int = 24):
    pairs = toy_pairs(count, seed=5)
    sources = [ids + [EOS_ID] for ids in tokenizer.encode_src([p["en"] for p in pairs])]
    return collate(sources, tokenizer.encode_tgt([p["de"] for p in pairs]))


def _texts(tokenizer: Tokenizer, ids: torch.Tensor) -> list[str]:
    return [tokenizer.tgt.decode([i for i in row.tolist() if i > EOS_ID]) for row in ids]


def test_draws_new_segmentations_of_the_same_text_and_repeats_them_for_the_same_key():
    tokenizer = _tokenizer()
    batch = _batch(tokenizer)
    sampler = SubwordSampler(tokenizer, alpha=0.1, nbest=16, max_len=100, seed=1)
    first = sampler.resample(batch, epoch=0, batch_key=7, multiple=1)
    again = sampler.resample(batch, epoch=0, batch_key=7, multiple=1)
    other = sampler.resample(batch, epoch=1, batch_key=7, multiple=1)

    assert _texts(tokenizer, first.src) == _texts(tokenizer, batch.src)
    assert _texts(tokenizer, first.tgt_out) == _texts(tokenizer, batch.tgt_out)
    assert not torch.equal(first.src, batch.src) or not torch.equal(first.tgt_out, batch.tgt_out)
    assert torch.equal(first.src, again.src) and torch.equal(first.tgt_out, again.tgt_out)
    assert not torch.equal(first.tgt_out, other.tgt_out)
    assert (first.src == EOS_ID).sum(dim=1).eq(1).all()  # one EOS per source row


def test_a_draw_longer_than_max_len_keeps_the_cached_segmentation():
    tokenizer = _tokenizer()
    batch = _batch(tokenizer)
    longest = int((batch.src != 0).sum(dim=1).max())
    sampler = SubwordSampler(tokenizer, alpha=0.0, nbest=16, max_len=longest, seed=1)
    drawn = sampler.resample(batch, epoch=0, batch_key=1, multiple=1)
    assert int((drawn.src != 0).sum(dim=1).max()) <= longest


def test_a_resumed_sampling_run_draws_what_the_uninterrupted_one_drew(data_dir, tmp_path):
    assert train(data_dir, tmp_path, SMALL, "--name", "straight", sets=SAMPLING).returncode == 0
    assert train(data_dir, tmp_path, SMALL, "--name", "plain",
                 sets=SAMPLING[1:]).returncode == 0
    run = tmp_path / "resumed"
    shutil.copytree(tmp_path / "straight", run)
    (run / "checkpoints" / "pointers.json").write_text(json.dumps({"last": "step-2"}))
    result = resume(data_dir, run)

    assert result.returncode == 0, result.stderr
    assert losses(run) == losses(tmp_path / "straight")
    assert losses(tmp_path / "straight") != losses(tmp_path / "plain")  # it did sample


def test_a_bpe_tokenizer_cannot_sample(data_dir, tmp_path):
    result = train(data_dir, tmp_path, SMALL, "--name", "bpe",
                   sets=["tokenizer.type=bpe", *SAMPLING])
    assert_one_line_error(result, "needs a unigram SentencePiece model")
    assert list(tmp_path.iterdir()) == []  # refused before a run folder was made


def test_only_training_batches_are_sampled(data_dir, tmp_path, monkeypatch):
    """Four updates of one batch each, then a validation and the run's end: four draws."""
    calls = []
    draw = SubwordSampler.resample
    monkeypatch.setattr(SubwordSampler, "resample",
                        lambda self, *args: calls.append(args[1:]) or draw(self, *args))
    assert train(data_dir, tmp_path, SMALL, "--name", "counted", sets=SAMPLING).returncode == 0
    assert len(calls) == 4
    assert any(e.get("event") == "val" for e in metrics(tmp_path / "counted"))
