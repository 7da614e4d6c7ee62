"""SentencePiece normalization: Chinese keeps its full-width punctuation, Latin text is NFKC'd."""

from __future__ import annotations

import pytest
from helpers import train_tokenizer

from attncli.core.config import TokenizerConfig
from attncli.data.tokenizer import normalization_rule

ZH = ["你好，你好嗎？", "我很好！謝謝。", "你叫什麼名字？", "我們走吧！",
      "他在看書，她在寫字。"] * 20
EN = ["Hello, how are you?", "I am fine! Thanks.", "What is your name?", "Let's go!",
      "He reads, she writes."] * 20


@pytest.mark.parametrize("languages, rule", [
    (("en", "zh"), "identity"), (("zh-Hant", "en"), "identity"), (("en", "ja"), "identity"),
    (("en", "de"), "nmt_nfkc"), (("fr", "pt_BR"), "nmt_nfkc"),
])
def test_auto_keeps_full_width_punctuation_where_a_language_writes_it(languages, rule):
    assert normalization_rule("auto", languages) == rule
    assert normalization_rule("nfkc", languages) == "nfkc"


def _round_trip(tmp_path, normalization: str, languages: tuple[str, str], text: str) -> str:
    cfg = TokenizerConfig(vocab_size=120, normalization=normalization)
    tokenizer = train_tokenizer(cfg, EN, ZH, tmp_path, languages)
    return tokenizer.decode_tgt(tokenizer.encode_tgt([text])[0])


def test_a_chinese_target_keeps_its_punctuation(tmp_path):
    assert _round_trip(tmp_path, "auto", ("en", "zh"), "你好，你好嗎？") == "你好，你好嗎？"


def test_an_unknown_piece_in_an_output_shows_and_special_ids_do_not(tmp_path):
    cfg = TokenizerConfig(vocab_size=120)
    tokenizer = train_tokenizer(cfg, EN, ZH, tmp_path, ("en", "zh"))
    ids = tokenizer.encode_tgt(["我很好"])[0]
    out = [tokenizer.bos_id, *ids[:-1], tokenizer.unk_id, ids[-1], tokenizer.eos_id,
           tokenizer.pad_id]
    text = tokenizer.decode_tgt(out)
    assert text.count("⁇") == 1
    assert text.replace("⁇", "").replace(" ", "") == "我很好"


def test_nmt_nfkc_turns_it_into_ascii(tmp_path):
    assert _round_trip(tmp_path, "nmt_nfkc", ("en", "zh"), "你好，你好嗎？") == "你好,你好嗎?"


def test_short_and_long_lists_encode_alike(tmp_path, monkeypatch):
    """A short list is encoded text by text, a long one through SentencePiece's pool: the ids
    of a text are the same either way, and each list keeps its order."""
    from attncli.data import tokenizer as tokenizer_module

    cfg = TokenizerConfig(vocab_size=120)
    tokenizer = train_tokenizer(cfg, EN, ZH, tmp_path, ("en", "zh"))
    texts = [f"{text} {i}" for i, text in enumerate(EN * 3)]  # 300 texts, each one different
    assert len(texts) >= tokenizer_module.POOLED_ENCODE_MIN
    pooled = tokenizer.encode_src(texts)
    monkeypatch.setattr(tokenizer_module, "POOLED_ENCODE_MIN", len(texts) + 1)
    one_by_one = tokenizer.encode_src(texts)
    assert one_by_one == pooled
    assert [tokenizer.encode_src([text])[0] for text in texts[:5]] == pooled[:5]
    assert all(ids[-1] == tokenizer.eos_id for ids in pooled)


def test_the_log_says_the_pieces_a_small_text_gave_not_the_ones_asked():
    """vocab_size is a soft limit in SentencePiece: 8,000 asked of this text gives far fewer,
    and the log said 8,000."""
    from attncli.data.corpus import _pieces_said
    from attncli.data.tokenizer import train_models

    texts = {"src": EN, "tgt": ZH}
    models = train_models(TokenizerConfig(vocab_size=8000), texts.__getitem__, ("en", "zh"))
    got = models.tokenizer().src.get_piece_size()
    assert got < 8000
    assert _pieces_said(models, 8000) == (f"{got:,} pieces: fewer than "
                                          "tokenizer.vocab_size=8,000, all this text gives")
    assert _pieces_said(models, got) == f"{got:,} pieces"
    # separate models: each side said, and one side short is said too (was hidden)
    both = train_models(TokenizerConfig(vocab_size=got, joint=False), texts.__getitem__,
                        ("en", "zh"))
    sides = both.tokenizer()
    src, tgt = sides.src.get_piece_size(), sides.tgt.get_piece_size()
    assert min(src, tgt) < got
    assert _pieces_said(both, got) == (f"src {src:,} and tgt {tgt:,} pieces: fewer than "
                                       f"tokenizer.vocab_size={got:,}, all this text gives")


def test_the_models_travel_as_their_bytes_and_keep_their_files_and_digests(tmp_path):
    """`TokenizerModels` pickles as its bytes alone (into `datasets.map`'s processes), writes
    the files run folders have always had, and digests as the dict of sides it replaced did,
    so token caches and run folders made before it stay valid."""
    import hashlib
    import pickle

    from attncli.data.tokenizer import TokenizerModels, train_models

    texts = {"src": EN, "tgt": ZH}.__getitem__
    joint = train_models(TokenizerConfig(vocab_size=120), texts, ("en", "zh"))
    separate = train_models(TokenizerConfig(vocab_size=120, joint=False), texts, ("en", "zh"))
    for models, names in ((joint, {None: "spm.model"}),
                          (separate, {"src": "spm.src.model", "tgt": "spm.tgt.model"})):
        folder = tmp_path / ("joint" if models.joint else "separate")
        folder.mkdir()
        models.install(folder)
        assert sorted(path.name for path in folder.iterdir()) == sorted(names.values())
        files = {side: (folder / name).read_bytes() for side, name in names.items()}
        assert models.sides() == files
        assert TokenizerModels.read(folder, models.joint) == models
        assert models.digests() == {side or "joint": hashlib.sha256(data).hexdigest()
                                    for side, data in files.items()}
        pickled = pickle.dumps(models)
        assert pickle.loads(pickled) == models
        assert len(pickled) < sum(map(len, files.values())) + 200  # each model once, no more
    assert joint.tokenizer().joint and not separate.tokenizer().joint
    assert len(repr(joint)) < 80  # sizes, not megabytes of bytes
    with pytest.raises(ValueError, match="same bytes"):
        TokenizerModels(separate.src, separate.tgt, joint=True)


def test_other_codes_for_chinese_japanese_and_korean_are_those_languages():
    """Tatoeba writes Mandarin as cmn: it got NFKC (，？！ turned ASCII) and whitespace BLEU
    (0.00 for near-perfect output)."""
    from attncli.core.text import base_language
    from attncli.data.tokenizer import normalization_rule
    from attncli.decoding.scoring import bleu_tokenizer

    assert [base_language(c) for c in ("cmn", "zho", "yue", "jpn", "kor", "zh-Hant")] == [
        "zh", "zh", "zh", "ja", "ko", "zh"]
    assert normalization_rule("auto", ("en", "cmn")) == "identity"
    assert bleu_tokenizer("cmn") == "zh"
