"""The in-place decoding cache: buffers written in place, rows moved only where they change,
and searches that decode exactly as a straightforward one does."""

from __future__ import annotations

import pytest
import torch

from attncli.core.text import BOS_ID, EOS_ID, PAD_ID
from attncli.decoding.search import (
    SearchSettings,
    _in_place_order,
    beam_search,
    compaction,
    max_output_lengths,
)
from attncli.model.attention import MultiHeadAttention
from attncli.model.kv_cache import KVCache, changed_rows
from tests.test_search import A, B, _model, _padded, _sources


def _repeat_completions(tokens: list[int], n: int) -> set[int]:
    """The ids that would complete an ``n``-gram already in ``tokens`` (none when n is 0)."""
    ngrams = {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)} if n else set()
    return {g[-1] for g in ngrams if list(g[:-1]) == tokens[len(tokens) - n + 1 :]}


@torch.no_grad()
def _plain_beam_search(model, source: list[int], beam: int, penalty: float,
                       no_repeat: int = 0):
    """One sentence, no cache, Python lists: the conventions of ``search`` written plainly.

    Each step ranks the 2 * beam best extensions of all beams; EOS among the best ``beam``
    ends a hypothesis (while fewer than ``beam`` have ended), the best ``beam`` others go on.
    With ``no_repeat`` n, each beam's repeat completions (see above) are forbidden.
    """
    src = torch.tensor([source])
    memory, mask = model.encode(src)
    max_len = int(max_output_lengths(src, model, A, B))
    beams, finished = [([], 0.0)], []
    for step in range(max_len + 1):
        prefixes = torch.tensor([[BOS_ID, *tokens] for tokens, _ in beams])
        logits = model.decode(prefixes, memory.expand(len(beams), -1, -1),
                              mask.expand(len(beams), -1, -1, -1)).logits[:, -1].double()
        log_probs = logits - logits.logsumexp(-1, keepdim=True)
        log_probs[:, [PAD_ID, BOS_ID]] = -torch.inf
        if step >= max_len:
            log_probs[:, torch.arange(log_probs.size(1)) != EOS_ID] = -torch.inf
        for row, (tokens, _) in zip(log_probs, beams, strict=True):
            row[sorted(_repeat_completions(tokens, no_repeat))] = -torch.inf
        table = log_probs.tolist()  # (beams, vocab)
        candidates = sorted(((lp + row[t], tokens + [t])
                             for row, (tokens, lp) in zip(table, beams, strict=True)
                             for t in range(len(row))), key=lambda c: -c[0])
        candidates = candidates[: 2 * beam]
        ended_before = len(finished)
        for log_prob, tokens in candidates[:beam]:
            if tokens[-1] == EOS_ID and log_prob > -torch.inf and len(finished) < beam:
                finished.append((tokens[:-1], log_prob))
        if len(finished) >= beam or step >= max_len:
            break
        assert len(finished) >= ended_before
        beams = [(tokens, lp) for lp, tokens in candidates if tokens[-1] != EOS_ID][:beam]
    finished.sort(key=lambda h: -h[1] / (len(h[0]) + 1) ** penalty)
    return finished


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.mark.parametrize("beam", [1, 4])
def test_batched_in_place_search_equals_a_plain_one_with_beams_ending_at_different_steps(
        model, beam):
    sources = _sources()
    found = beam_search(model, _padded(sources),
                        SearchSettings(A, B, beam=beam, length_penalty=0.8, nbest=beam))
    for source, hyps in zip(sources, found, strict=True):
        plain = _plain_beam_search(model, source, beam, 0.8)
        assert [h.tokens for h in hyps] == [tokens for tokens, _ in plain]
        assert [h.log_prob for h in hyps] == pytest.approx([lp for _, lp in plain], abs=1e-4)
    lengths = {len(h.tokens) for hyps in found for h in hyps}
    assert len(lengths) > 2, "hypotheses should end at different steps"


def test_kv_cache_select_is_index_select_and_moves_only_changed_rows():
    cache = KVCache(rows=6, positions=8)
    k, v = torch.randn(6, 2, 3, 4), torch.randn(6, 2, 3, 4)
    cache.append(k, v)
    index = torch.tensor([0, 0, 2, 1, 4])  # row 1 copies row 0, row 3 takes row 1, 5 leaves
    assert changed_rows(index).tolist() == [1, 3]
    cache.select(index)
    assert torch.equal(cache.k, k.index_select(0, index))
    assert torch.equal(cache.v, v.index_select(0, index))


def test_kv_cache_is_allocated_once_and_written_in_place():
    mha = MultiHeadAttention(16, 4, "self").eval()
    x = torch.randn(3, 6, 16)
    full, _ = mha(x, causal=True)
    cache = KVCache(rows=3, positions=6)
    steps = [mha(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(6)]
    first = cache.k_buffer.data_ptr()
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.k.shape == (3, 4, 6, 4) and cache.k_buffer.data_ptr() == first
    small = KVCache(rows=1, positions=2)  # asked for too little: grows, keeping what it held
    grown = [mha(x[:, t : t + 1], causal=True, cache=small)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(grown, 1), full, atol=1e-5, rtol=1e-5)


def test_in_place_order_keeps_each_parents_best_child_in_its_slot():
    parent = torch.tensor([[2, 2, 0, 3], [1, 1, 1, 1], [0, 1, 2, 3]])  # survivors, best first
    order = _in_place_order(parent)  # survivor placed in each slot
    assert order.tolist() == [[2, 1, 0, 3], [1, 0, 2, 3], [0, 1, 2, 3]]
    placed = parent.gather(1, order)  # the parent of the survivor in each slot
    assert (placed == torch.arange(4)).sum().item() == 3 + 1 + 4  # one stays per parent


def test_compaction_keeps_going_rows_in_place_and_fills_the_gaps_from_the_end():
    going = torch.tensor([True, False, True, True, False, True])
    assert compaction(going).tolist() == [0, 5, 2, 3]
    assert compaction(torch.tensor([True, True])).tolist() == [0, 1]
