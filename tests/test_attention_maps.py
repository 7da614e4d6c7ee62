"""Every layer's and head's attention from one teacher-forced pass (`model.attention_maps`):
the cross-attention the search reports, proper weights everywhere, and a model left as it was."""

from __future__ import annotations

import pytest
import torch

from attncli.core.config import DecodeConfig, ModelConfig
from attncli.core.text import EOS_ID
from attncli.decoding.search import SearchSettings, translate_ids
from attncli.model import Seq2SeqTransformer
from attncli.model.attention_maps import attention_maps

VOCAB = 40


def _model(scoring: str = "dot") -> Seq2SeqTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=4, enc_layers=2, dec_layers=3, ff_dim=64, dropout=0.0,
                      max_positions=64, tie_embeddings=False, scoring=scoring)
    return Seq2SeqTransformer(cfg, VOCAB, VOCAB).eval()


SOURCES = [[5, 9, 12, 7, 30, EOS_ID], [8, 8, 21, EOS_ID]]


@pytest.mark.parametrize("scoring", ["dot", "additive"])
def test_cross_attention_is_what_the_search_reports(scoring):
    model = _model(scoring)
    settings = SearchSettings.from_config(DecodeConfig(max_len_a=1.0, max_len_b=4), beam=1,
                                          nbest=1, need_attention=True)
    found = translate_ids(model, SOURCES, settings, device="cpu")
    for src, (best,) in zip(SOURCES, found, strict=True):
        maps = attention_maps(model, src, best.tokens)
        out, length = len(best.tokens) + 1, len(src)
        assert torch.stack(maps.cross).shape == (3, 4, out, length)
        assert torch.allclose(torch.stack(maps.cross), best.attention, atol=1e-5)
        assert torch.stack(maps.encoder).shape == (2, 4, length, length)
        assert torch.stack(maps.decoder).shape == (3, 4, out, out)
        for weights in (*maps.encoder, *maps.decoder, *maps.cross):
            assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
        for weights in maps.decoder:  # no output piece sees the ones after it
            assert torch.all(weights.triu(diagonal=1) == 0)


def test_the_model_is_left_as_it_was():
    model = _model()
    src, tgt = torch.tensor([SOURCES[0]]), torch.tensor([[2, 11, 17, 4]])
    before = model(src, tgt)
    attention_maps(model, SOURCES[0], [11, 17, 4])
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks
    assert torch.equal(model(src, tgt), before)  # the fused path, as before


def test_a_heatmap_of_chinese_pieces_draws_their_glyphs(tmp_path):
    """matplotlib's default font has no CJK glyphs: every Chinese label of an en-zh heatmap
    was an empty box (and the warnings saying so were silenced)."""

    import numpy as np

    from attncli.core.plots import plot_attention, wide_script_fonts

    if not wide_script_fonts(["猫"]):
        pytest.skip("no CJK font installed on this machine")
    assert wide_script_fonts(["a cat", "</s>", "🙂"]) == []  # looked for only where needed
    weights = np.full((2, 3, 2), 0.5, dtype=np.float32)
    drawn = []
    for src in (["▁我", "爱"], ["爱", "▁我"]):  # two empty boxes swapped are the same picture
        plot_attention(weights, src, ["▁I", "▁love", "</s>"], tmp_path / "zh.png", "zh")
        drawn.append((tmp_path / "zh.png").read_bytes())
    assert drawn[0] != drawn[1]


def test_glyphs_no_font_has_are_boxes_without_a_warning_each(tmp_path):
    """Thai (no font installed here) printed a two-line Python warning per character."""
    import warnings

    import numpy as np

    from attncli.core.plots import plot_attention

    weights = np.full((2, 2, 2), 0.5, dtype=np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_attention(weights, ["▁สวัสดี", "</s>"], ["▁Hallo", "</s>"], tmp_path / "th.png",
                       "th")
    assert not [w for w in caught if "missing from font" in str(w.message)]
