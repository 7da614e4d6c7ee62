"""Greedy and beam search: agreement between the paths, batching, n-best, lengths, attention."""

from __future__ import annotations

import pytest
import torch

from attncli.core.config import DecodeConfig, ModelConfig
from attncli.core.device import resolve_decode_precision
from attncli.core.errors import AttncliError
from attncli.core.text import BOS_ID, EOS_ID, PAD_ID
from attncli.decoding.search import (
    SearchSettings,
    beam_search,
    greedy_search,
    max_output_lengths,
    translate_ids,
)
from attncli.model import Seq2SeqTransformer

VOCAB = 40
A, B = 1.0, 4  # maximum output length a * src_len + b


def _model(eos_bias: float = 0.5) -> Seq2SeqTransformer:
    """A random tiny model whose outputs vary with the input and end at various lengths.

    Untied embeddings keep a random decoder from repeating its last token forever; a small bias
    on EOS makes hypotheses end before the length limit now and then.
    """
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=4, enc_layers=2, dec_layers=2, ff_dim=64, dropout=0.0,
                      max_positions=64, tie_embeddings=False)
    model = Seq2SeqTransformer(cfg, VOCAB, VOCAB).eval()
    with torch.no_grad():
        model.output_bias[EOS_ID] = eos_bias
    return model


def _sources() -> list[list[int]]:
    """Source id lists of different lengths, each ending in EOS."""
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, VOCAB, (n,), generator=g).tolist() + [EOS_ID]
            for n in (6, 2, 9, 4, 7, 3)]


def _padded(sources: list[list[int]]) -> torch.Tensor:
    longest = max(map(len, sources))
    return torch.tensor([s + [PAD_ID] * (longest - len(s)) for s in sources])


@pytest.fixture(scope="module")
def model() -> Seq2SeqTransformer:
    return _model()


def test_beam_of_one_equals_greedy(model):
    src = _padded(_sources())
    greedy = greedy_search(model, src, SearchSettings(A, B))
    beam = beam_search(model, src, SearchSettings(A, B, beam=1))
    assert [h.tokens for h in greedy] == [hyps[0].tokens for hyps in beam]
    for g, (b,) in zip(greedy, beam, strict=True):
        assert g.log_prob == pytest.approx(b.log_prob, abs=1e-5)
        assert g.score == pytest.approx(b.score, abs=1e-5)
    assert len({len(h.tokens) for h in greedy}) > 1, "outputs should end at different lengths"


@pytest.mark.parametrize("beam", [1, 3, 4, 5])
def test_search_with_cache_equals_search_without(model, beam):
    src = _padded(_sources())
    cached = beam_search(model, src, SearchSettings(A, B, beam=beam, nbest=beam))
    recomputed = beam_search(model, src,
                             SearchSettings(A, B, beam=beam, nbest=beam, use_cache=False))
    for with_cache, without in zip(cached, recomputed, strict=True):
        assert [h.tokens for h in with_cache] == [h.tokens for h in without]
        assert [h.score for h in with_cache] == pytest.approx([h.score for h in without],
                                                              abs=1e-5)
    greedy = greedy_search(model, src, SearchSettings(A, B))
    assert [h.tokens for h in greedy] == [
        h.tokens for h in greedy_search(model, src, SearchSettings(A, B, use_cache=False))]


def test_beam_search_finds_at_least_as_good_a_best_hypothesis_as_greedy(model):
    src = _padded(_sources())
    greedy = greedy_search(model, src, SearchSettings(A, B))
    beam = beam_search(model, src, SearchSettings(A, B, beam=5))
    assert sum(b[0].score >= g.score - 1e-6 for g, b in zip(greedy, beam, strict=True)) >= 5
    assert any(b[0].tokens != g.tokens for g, b in zip(greedy, beam, strict=True))


@pytest.mark.parametrize("beam", [1, 3])
def test_a_batch_decodes_like_each_sentence_alone(model, beam):
    sources = _sources()
    together = beam_search(model, _padded(sources), SearchSettings(A, B, beam=beam, nbest=beam))
    for src, hyps in zip(sources, together, strict=True):
        (alone,) = beam_search(model, torch.tensor([src]),
                               SearchSettings(A, B, beam=beam, nbest=beam))
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)


def test_nbest_lists_are_sorted_distinct_and_scored_by_normalised_log_prob(model):
    penalty = 0.6
    results = beam_search(model, _padded(_sources()),
                          SearchSettings(A, B, beam=5, length_penalty=penalty, nbest=5))
    for hyps in results:
        assert len(hyps) == 5
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 5
        for h in hyps:
            assert h.score == pytest.approx(h.log_prob / (len(h.tokens) + 1) ** penalty)
            assert h.log_prob <= 0
            assert not {BOS_ID, EOS_ID, PAD_ID} & set(h.tokens)


def test_maximum_length_is_respected_and_reached_when_eos_never_wins():
    model = _model(eos_bias=-100.0)
    sources = _sources()
    src = _padded(sources)
    limits = [int(1.5 * len(s) + 2) for s in sources]
    assert max_output_lengths(src, model, 1.5, 2).tolist() == limits
    for hyps in (greedy_search(model, src, SearchSettings(1.5, 2)),
                 [h[0] for h in beam_search(model, src, SearchSettings(1.5, 2, beam=3))]):
        assert [len(h.tokens) for h in hyps] == limits
    # and never beyond the positions the model has (one is kept for the EOS step)
    assert max_output_lengths(src, model, 100.0, 0).max().item() == model.cfg.max_positions - 1


@pytest.mark.parametrize("beam", [1, 3])
def test_attention_rows_sum_to_one_and_padding_gets_none(model, beam):
    sources = _sources()
    src = _padded(sources)
    results = beam_search(model, src,
                          SearchSettings(A, B, beam=beam, nbest=beam, need_attention=True))
    plain = beam_search(model, src, SearchSettings(A, B, beam=beam, nbest=beam))
    for source, hyps, plain_hyps in zip(sources, results, plain, strict=True):
        # the reference path (which returns weights) decodes the same as the fused one
        assert [h.tokens for h in hyps] == [h.tokens for h in plain_hyps]
        for h in hyps:
            layers, heads = len(model.decoder_layers), model.cfg.heads
            assert h.attention.shape == (layers, heads, len(h.tokens) + 1, src.size(1))
            torch.testing.assert_close(h.attention.sum(-1), torch.ones(h.attention.shape[:-1]))
            assert (h.attention[..., len(source):] == 0).all()


def test_translate_ids_sorts_batches_returns_input_order_and_trims_attention(model):
    sources = _sources()
    cfg = DecodeConfig(max_len_a=A, max_len_b=B, batch_size=2, length_penalty=1.0,
                       no_repeat_ngram_size=0)
    found = translate_ids(model, sources, SearchSettings.from_config(
        cfg, beam=3, nbest=2, need_attention=True), device="cpu")
    for source, hyps in zip(sources, found, strict=True):
        alone = beam_search(model, torch.tensor([source]), SearchSettings(A, B, beam=3, nbest=2))[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert all(h.attention.shape[-1] == len(source) for h in hyps)
    greedy = translate_ids(model, sources, SearchSettings.from_config(cfg, beam=1, nbest=1),
                           device="cpu")
    assert [h[0].tokens for h in greedy] == [h.tokens for h in greedy_search(
        model, _padded(sources), SearchSettings(A, B))]
    assert translate_ids(model, [], SearchSettings.from_config(cfg, beam=2, nbest=1),
                         device="cpu") == []


@pytest.mark.parametrize("beam", [1, 3])
def test_each_sentence_is_handed_over_once_as_soon_as_its_search_ends(model, beam):
    steps = [0]
    hook = model.decoder_norm.register_forward_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))
    handed: dict[int, tuple[int, list]] = {}

    def done(i, hypotheses):
        assert i not in handed, "handed over twice"
        handed[i] = (steps[0], hypotheses)

    sources = _sources()
    cfg = DecodeConfig(max_len_a=A, max_len_b=B, batch_size=4, no_repeat_ngram_size=0)
    try:
        found = translate_ids(model, sources,
                              SearchSettings.from_config(cfg, beam=beam, nbest=beam),
                              device="cpu", done=done)
    finally:
        hook.remove()
    assert sorted(handed) == list(range(len(sources)))
    assert [handed[i][1] for i in range(len(sources))] == found
    at_step = [step for step, _ in handed.values()]
    assert len(set(at_step)) > 2, "sentences of one batch should end at different steps"
    if beam == 1:  # each row is over at the step that chose its EOS
        first_batch = sorted(range(len(sources)), key=lambda i: len(sources[i]))[:4]
        for i in first_batch:
            assert handed[i][0] == len(found[i][0].tokens) + 1


def test_translate_ids_leaves_training_mode_as_it_was(model):
    model.train()
    try:
        translate_ids(model, _sources()[:2],
                      SearchSettings.from_config(DecodeConfig(), beam=1, nbest=1), device="cpu")
        assert model.training
    finally:
        model.eval()


def test_nbest_larger_than_beam_is_a_user_error(model):
    with pytest.raises(AttncliError, match="--nbest 3"):
        translate_ids(model, _sources(),
                      SearchSettings.from_config(DecodeConfig(), beam=2, nbest=3), device="cpu")


@pytest.mark.parametrize("train_precision", ["auto", "bf16", "fp32"])
def test_cpu_decodes_in_fp32_whatever_the_run_trained_in(train_precision):
    # bf16 kernels are built per shape on CPU and decoding changes shape every step.
    assert resolve_decode_precision(train_precision, torch.device("cpu")) == "fp32"
