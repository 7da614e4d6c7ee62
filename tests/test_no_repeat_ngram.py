"""``decode.no_repeat_ngram_size``: no n-gram of output ids twice in a hypothesis, greedy and
beam, while rows move; 0 decodes exactly as a search without the option."""

from __future__ import annotations

import pytest
import torch

from attncli.core.config import DecodeConfig
from attncli.decoding.search import (
    SearchSettings,
    beam_search,
    block_repeated_ngrams,
    greedy_search,
    translate_ids,
)
from attncli.model import Seq2SeqTransformer
from tests.test_decoding_cache import _plain_beam_search
from tests.test_search import VOCAB, A, B, _model, _padded, _sources

NEG = -torch.inf


def repeats_an_ngram(tokens: list[int], n: int) -> bool:
    """Whether some n-gram occurs twice in ``tokens``."""
    ngrams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(ngrams) != len(set(ngrams))


@pytest.fixture(scope="module")
def model() -> Seq2SeqTransformer:
    """The random tiny model of test_search, pushed towards two ids (7 and 8), so that its
    outputs repeat n-grams the way an undertrained model's do."""
    model = _model()
    with torch.no_grad():
        model.output_bias[7] += 3.0
        model.output_bias[8] += 2.5
    return model


def _blocked(prefixes: list[list[int]], n: int) -> list[set[int]]:
    """The ids each prefix's row gets -inf for, from logits of zeros (the rest stay 0)."""
    logits = torch.zeros(len(prefixes), VOCAB)
    block_repeated_ngrams(logits, torch.tensor(prefixes), n)
    assert not logits.isnan().any() and set(logits.unique().tolist()) <= {0.0, NEG}
    return [set((row == NEG).nonzero().squeeze(1).tolist()) for row in logits]


@pytest.mark.parametrize(("n", "prefixes", "expected"), [
    (2, [[5, 6, 5], [5, 6, 7], [5, 5, 5], [9, 5, 9]], [{6}, set(), {5}, {5}]),
    (3, [[4, 5, 6, 4, 5], [4, 5, 6, 5, 4], [4, 5, 4, 5, 4], [6, 4, 5, 9, 4]],
     [{6}, set(), {5}, set()]),
    (3, [[4, 5, 6, 4, 5, 7, 4, 5]], [{6, 7}]),  # one prefix, two earlier completions
    (1, [[4, 5, 4], [9, 9, 9]], [{4, 5}, {9}]),
    (3, [[4, 4], [5, 6]], [set(), set()]),  # shorter than n: nothing to repeat yet
    (0, [[4, 4, 4, 4]], [set()]),  # off
])
def test_banned_ids_on_hand_made_prefixes(n, prefixes, expected):
    assert _blocked(prefixes, n) == expected


def test_blocking_keeps_other_logits_and_forbidden_ones():
    logits = torch.randn(2, VOCAB)
    logits[:, 3] = NEG
    before = logits.clone()
    block_repeated_ngrams(logits, torch.tensor([[3, 6, 3], [7, 8, 9]]), 2)
    assert logits[0, 6] == NEG and logits[:, 3].eq(NEG).all()
    before[0, 6] = NEG
    assert torch.equal(logits, before)


def _hypotheses(model, beam: int, n: int, **kwargs) -> list[list[int]]:
    src = _padded(_sources())
    if beam == 1:
        settings = SearchSettings(A, B, no_repeat_ngram_size=n, **kwargs)
        return [h.tokens for h in greedy_search(model, src, settings)]
    settings = SearchSettings(A, B, beam=beam, nbest=beam, no_repeat_ngram_size=n, **kwargs)
    return [h.tokens for hyps in beam_search(model, src, settings) for h in hyps]


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("n", [2, 3])
def test_no_hypothesis_repeats_an_ngram_when_blocked(model, beam, n):
    assert any(repeats_an_ngram(t, n) for t in _hypotheses(model, beam, 0)), "model too tame"
    blocked = _hypotheses(model, beam, n)
    assert not [t for t in blocked if repeats_an_ngram(t, n)]
    assert blocked == _hypotheses(model, beam, n, use_cache=False)


@pytest.mark.parametrize("n", [2, 3])
def test_greedy_outputs_without_repeats_stay_as_they_were(model, n):
    """Greedy bans only tokens that would repeat an n-gram, so an output that repeats none
    is the same token for token, log-probability included (to float error: rows leave the
    batch at other steps when others are blocked, and matrix products of other shapes may sum
    in another order; on an AMD EPYC they differed in the 7th digit)."""
    src = _padded(_sources())
    free = greedy_search(model, src, SearchSettings(A, B))
    blocked = greedy_search(model, src, SearchSettings(A, B, no_repeat_ngram_size=n))
    for before, after in zip(free, blocked, strict=True):
        if not repeats_an_ngram(before.tokens, n):
            assert after.tokens == before.tokens
            assert after.log_prob == pytest.approx(before.log_prob, abs=1e-4)
        else:
            assert after.tokens != before.tokens
    assert {repeats_an_ngram(h.tokens, n) for h in free} == {True, False}


@pytest.mark.parametrize(("beam", "n"), [(1, 2), (4, 0), (4, 2), (4, 3)])
def test_batched_blocked_search_equals_a_plain_one(model, beam, n):
    """The batched search blocks on each row's own prefix while beams reorder and finished
    sentences leave (rows move); n = 0 is the search as it was without the option."""
    sources = _sources()
    found = beam_search(model, _padded(sources), SearchSettings(
        A, B, beam=beam, length_penalty=0.8, nbest=beam, no_repeat_ngram_size=n))
    for source, hyps in zip(sources, found, strict=True):
        plain = _plain_beam_search(model, source, beam, 0.8, no_repeat=n)
        assert [h.tokens for h in hyps] == [tokens for tokens, _ in plain]
        assert [h.log_prob for h in hyps] == pytest.approx([lp for _, lp in plain], abs=1e-4)


def test_translate_ids_takes_the_size_from_the_decode_config(model):
    cfg = DecodeConfig(max_len_a=A, max_len_b=B, batch_size=4, no_repeat_ngram_size=2)
    found = translate_ids(model, _sources(), SearchSettings.from_config(cfg, beam=3, nbest=3),
                          device="cpu")
    assert [[h.tokens for h in hyps] for hyps in found] == [
        [h.tokens for h in hyps] for hyps in
        beam_search(model, _padded(_sources()),
                    SearchSettings(A, B, beam=3, nbest=3, no_repeat_ngram_size=2))]
    assert not any(repeats_an_ngram(h.tokens, 2) for hyps in found for h in hyps)
