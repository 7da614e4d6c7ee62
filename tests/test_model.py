"""The Transformer: causality, padding independence, cache equivalence, size, positions."""

from __future__ import annotations

import pytest
import torch

from attncli.core.config import ModelConfig
from attncli.model import Seq2SeqTransformer

PAD = 0


def _model(cfg: ModelConfig, **changes) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(cfg.model_copy(update=changes), 50, 50, pad_id=PAD).eval()


def test_future_target_tokens_do_not_change_earlier_outputs(tiny_model_config):
    model = _model(tiny_model_config)
    src = torch.randint(3, 50, (2, 7))
    tgt = torch.randint(3, 50, (2, 6))
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(3, 50, (2, 2))
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_output_for_a_sentence_ignores_longer_padded_neighbour(tiny_model_config):
    for impl in ("fused", "reference"):
        model = _model(tiny_model_config, attention=impl)
        short_src = torch.randint(3, 50, (1, 4))
        long_src = torch.randint(3, 50, (1, 11))
        tgt = torch.randint(3, 50, (1, 5))
        alone = model(short_src, tgt)
        padded = torch.full((2, 11), PAD)
        padded[0, :4], padded[1] = short_src[0], long_src[0]
        together = model(padded, torch.cat([tgt, torch.randint(3, 50, (1, 5))]))
        torch.testing.assert_close(together[:1], alone, atol=1e-5, rtol=1e-5)


def test_incremental_decoding_with_cache_matches_full_forward(tiny_model_config):
    for impl in ("fused", "reference"):
        model = _model(tiny_model_config, attention=impl)
        src = torch.randint(3, 50, (3, 8))
        src[1, 5:] = PAD
        tgt = torch.randint(3, 50, (3, 7))
        full = model(src, tgt)
        memory, src_mask = model.encode(src)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache).logits
                 for t in range(tgt.size(1))]
        torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
        assert cache.length == 7


def test_cross_attention_weights_returned_on_request(tiny_model_config):
    model = _model(tiny_model_config)
    src = torch.tensor([[5, 6, 7, PAD], [5, 6, 7, 8]])
    memory, mask = model.encode(src)
    out = model.decode(torch.tensor([[1, 9], [1, 9]]), memory, mask, need_weights=True)
    assert len(out.cross_attention) == 2
    w = out.cross_attention[-1]
    assert w.shape == (2, 4, 2, 4)
    assert torch.all(w[0, :, :, 3] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 2))


def test_parameter_count_of_small_config_is_about_7_6_million():
    model = Seq2SeqTransformer(ModelConfig(), 8000, 8000)
    assert 7_400_000 < model.num_parameters() < 7_800_000


def test_tied_embeddings_share_one_matrix(tiny_model_config):
    model = _model(tiny_model_config)
    assert model.src_embed.weight is model.tgt_embed.weight
    untied = Seq2SeqTransformer(tiny_model_config.model_copy(update={"tie_embeddings": False}),
                                40, 50)
    assert untied.project(torch.zeros(1, 1, 32)).shape == (1, 1, 50)


def test_decoder_tying_shares_the_target_embedding_with_the_output_only(tiny_model_config):
    """tie_embeddings: decoder (separate vocabularies): source and target embeddings apart,
    the output projection is the target embedding: a step on the output moves the embedding."""
    cfg = tiny_model_config.model_copy(update={"tie_embeddings": "decoder"})
    model = Seq2SeqTransformer(cfg, 40, 50)
    untied = Seq2SeqTransformer(cfg.model_copy(update={"tie_embeddings": False}), 40, 50)
    assert model.src_embed.weight is not model.tgt_embed.weight and model.output is None
    assert untied.num_parameters() - model.num_parameters() == 50 * 32
    before = model.tgt_embed.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model.project(torch.ones(1, 1, 32)).logsumexp(-1).sum().backward()
    opt.step()
    assert not torch.equal(model.tgt_embed.weight, before)
    with pytest.raises(ValueError, match="joint vocabulary"):
        Seq2SeqTransformer(tiny_model_config, 40, 50)


def test_post_norm_and_additive_variants_run_and_learn(tiny_model_config):
    for changes in ({"norm": "post"}, {"scoring": "additive"}):
        model = _model(tiny_model_config, **changes).train()
        src, tgt = torch.randint(3, 50, (4, 6)), torch.randint(3, 50, (4, 5))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(5):
            loss = torch.nn.functional.cross_entropy(model(src, tgt).flatten(0, 1), tgt.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0]
