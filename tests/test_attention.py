"""Attention: masks, reference vs fused agreement, gradients, heads, additive scoring."""

from __future__ import annotations

import pytest
import torch

from attncli.model.attention import (
    AdditiveScore,
    MultiHeadAttention,
    additive_attention,
    causal_mask,
    combine_masks,
    fused_attention,
    masked_softmax,
    merge_heads,
    padding_mask,
    reference_attention,
    split_heads,
)
from attncli.model.kv_cache import KVCache


def _qkv(batch=3, heads=2, tgt=5, src=7, dim=8, dtype=torch.float32):
    return (torch.randn(batch, heads, tgt, dim, dtype=dtype),
            torch.randn(batch, heads, src, dim, dtype=dtype),
            torch.randn(batch, heads, src, dim, dtype=dtype))


def test_masked_softmax_gives_exact_zeros_to_padding_and_rows_sum_to_one():
    scores = torch.randn(3, 2, 4, 6)
    lengths = torch.tensor([6, 3, 1])
    w = masked_softmax(scores, key_mask=lengths)
    assert torch.all(w[1, :, :, 3:] == 0)
    assert torch.all(w[2, :, :, 1:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 2, 4))


def test_masked_softmax_accepts_boolean_key_mask_like_lengths():
    scores = torch.randn(2, 1, 3, 5)
    lengths = torch.tensor([5, 2])
    bool_mask = torch.arange(5)[None, :] < lengths[:, None]
    assert torch.equal(masked_softmax(scores, key_mask=lengths),
                       masked_softmax(scores, key_mask=bool_mask))


def test_masked_softmax_causal_hides_the_future():
    w = masked_softmax(torch.randn(1, 1, 4, 4), causal=True)
    assert torch.all(w.triu(diagonal=1) == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 1, 4))


def test_fully_masked_row_gives_zeros_not_nan():
    w = masked_softmax(torch.randn(2, 1, 3, 4), key_mask=torch.tensor([4, 0]))
    assert not torch.isnan(w).any()
    assert torch.all(w[1] == 0)


def test_causal_mask_with_cache_offset_lets_last_query_see_everything():
    m = causal_mask(2, 5)[0, 0]
    assert m[1].all() and m[0, :4].all() and not m[0, 4]


@pytest.mark.parametrize("causal", [False, True])
def test_reference_and_fused_agree_with_padding_and_causal_masks(causal):
    q, k, v = _qkv(tgt=6, src=6)
    lengths = torch.tensor([6, 4, 2])
    mask = combine_masks(padding_mask(lengths, 6), causal_mask(6, 6) if causal else None)
    ref, weights = reference_attention(q, k, v, mask)
    fused = fused_attention(q, k, v, mask)
    torch.testing.assert_close(fused, ref, atol=1e-5, rtol=1e-5)
    assert torch.all(weights[1, :, :, 4:] == 0)


def test_fused_is_causal_fast_path_matches_explicit_mask():
    q, k, v = _qkv(tgt=5, src=5)
    ref, _ = reference_attention(q, k, v, causal_mask(5, 5))
    torch.testing.assert_close(fused_attention(q, k, v, causal=True), ref, atol=1e-5, rtol=1e-5)


def test_gradcheck_passes_on_reference_path():
    q, k, v = (t.requires_grad_() for t in _qkv(batch=2, heads=1, tgt=3, src=4, dim=3,
                                                 dtype=torch.float64))
    mask = padding_mask(torch.tensor([4, 2]), 4)
    assert torch.autograd.gradcheck(lambda q, k, v: reference_attention(q, k, v, mask)[0],
                                    (q, k, v))


def test_split_and_merge_heads_round_trip_exactly():
    x = torch.randn(3, 7, 32)
    heads = split_heads(x, 4)
    assert heads.shape == (3, 4, 7, 8)
    assert torch.equal(merge_heads(heads), x)


def test_additive_attention_masks_and_normalises():
    q, k, v = _qkv()
    score = AdditiveScore(8)
    out, w = additive_attention(q, k, v, score, mask=padding_mask(torch.tensor([7, 3, 1]), 7))
    assert out.shape == (3, 2, 5, 8)
    assert torch.all(w[1, :, :, 3:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 2, 5))


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_multihead_fused_and_reference_agree(kind):
    fused = MultiHeadAttention(16, 4, kind, impl="fused").eval()
    ref = MultiHeadAttention(16, 4, kind, impl="reference").eval()
    ref.load_state_dict(fused.state_dict())
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    key_mask = padding_mask(torch.tensor([6, 3]) if kind == "cross" else torch.tensor([5, 2]),
                            6 if kind == "cross" else 5)
    memory = mem if kind == "cross" else None
    a, none = fused(x, memory, key_mask=key_mask)
    b, weights = ref(x, memory, key_mask=key_mask)
    assert none is None and weights is not None
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_multihead_self_attention_cache_matches_full_causal_pass():
    mha = MultiHeadAttention(16, 4, "self").eval()
    x = torch.randn(2, 6, 16)
    full, _ = mha(x, causal=True)
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.k.shape == (2, 4, 6, 4)


@pytest.mark.parametrize("impl", ["fused", "reference"])
@pytest.mark.parametrize("tgt_len", [1, 3])
def test_cross_attention_rows_sharing_a_sentence_equal_rows_with_their_own_copy(impl, tgt_len):
    """Beam search's layout: g consecutive query rows per memory row give what the memory
    repeated for each row gives (outputs and weights, row for row), and the rows stay apart."""
    mha = MultiHeadAttention(16, 4, "cross", impl=impl).eval()
    memory, g = torch.randn(2, 6, 16), 3
    key_mask = padding_mask(torch.tensor([6, 2]), 6)
    x = torch.randn(2 * g, tgt_len, 16)
    shared, shared_w = mha(x, memory, key_mask=key_mask, need_weights=impl == "reference")
    own, own_w = mha(x, memory.repeat_interleave(g, 0), key_mask=key_mask.repeat_interleave(g, 0),
                     need_weights=impl == "reference")
    torch.testing.assert_close(shared, own, atol=1e-6, rtol=1e-5)
    if impl == "reference":
        torch.testing.assert_close(shared_w, own_w, atol=1e-6, rtol=1e-5)
        assert shared_w.shape == (2 * g, 4, tgt_len, 6) and (shared_w[g:, :, :, 2:] == 0).all()
    with pytest.raises(ValueError, match="cannot share"):
        mha(torch.randn(5, 1, 16), memory, key_mask=key_mask)
