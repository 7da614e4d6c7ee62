"""Chinese in one script: `data.chinese_script: simplified` converts Chinese text to simplified
characters with OpenCC when it is read (training pairs, validation and test references alike),
never a language marked traditional, and nothing unless a config asks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, SMALL, assert_one_line_error, resume, run_cli, train

from attncli.core.config import DataConfig
from attncli.core.config_files import load_config
from attncli.core.errors import AttncliError
from attncli.data.chinese_script import simplifier
from attncli.data.sources import load_split, split_source
from attncli.runs.trained import load_trained_model

pytest.importorskip("opencc")
EN_ZH = str(REPO / "configs" / "en-zh.yaml")
# (English, traditional, simplified): OpenCC's t2s turns the second into the third
SENTENCES = [("We have {n} apples.", "我們有{n}個蘋果。", "我们有{n}个苹果。"),
             ("How are you, {n}?", "{n}，你好嗎？", "{n}，你好吗？"),
             ("He speaks {n} languages.", "他說{n}種語言。", "他说{n}种语言。"),
             ("Are these {n} books yours?", "這{n}本書是你的嗎？", "这{n}本书是你的吗？")]


def _pairs(count: int, offset: int, script: int = 1) -> list[dict[str, str]]:
    """`count` en/zh pairs; `script` 1 writes the Chinese traditional, 2 simplified."""
    return [{"en": SENTENCES[i % 4][0].format(n=offset + i),
             "zh": SENTENCES[i % 4][script].format(n=offset + i)} for i in range(count)]


def _write(folder: Path, key: str = "zh") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for offset, (split, count) in enumerate({"train": 200, "val": 12, "test": 12}.items()):
        lines = [json.dumps({"en": p["en"], key: p["zh"]}, ensure_ascii=False) + "\n"
                 for p in _pairs(count, 1000 * offset)]
        (folder / f"{split}.jsonl").write_text("".join(lines), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("zh") / "en-zh")


def _zh(cfg: DataConfig, split: str) -> list[str]:
    return load_split(cfg, split).tgt


def test_traditional_in_simplified_out(corpus):
    cfg = DataConfig(dataset=str(corpus), tgt="zh", chinese_script="simplified")
    for split, offset in (("val", 1000), ("test", 2000)):
        assert _zh(cfg, split) == [p["zh"] for p in _pairs(12, offset, script=2)]
    assert list(split_source(cfg, "train").rows["tgt"]) == [p["zh"] for p in
                                                           _pairs(200, 0, script=2)]


def test_without_the_key_the_text_is_as_stored(corpus):
    assert _zh(DataConfig(dataset=str(corpus), tgt="zh"), "test") == [
        p["zh"] for p in _pairs(12, 2000)]


def test_a_language_marked_traditional_is_never_converted(tmp_path):
    folder = tmp_path / "tw"
    folder.mkdir()
    row = {"zh-TW": "我們說話。", "zh": "我們說話。"}
    for split in ("train", "val", "test"):
        (folder / f"{split}.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n",
                                               "utf-8")
    pair = load_split(DataConfig(dataset=str(folder), src="zh-TW", tgt="zh",
                                 chinese_script="simplified"), "test")
    assert (pair.src, pair.tgt) == (["我們說話。"], ["我们说话。"])
    for target in ("zh-Hant", "zh_TW", "zh-HK", "cmn-Hant"):
        with pytest.raises(AttncliError, match=f"{target} is marked traditional"):
            load_config(SMALL, [f"data.tgt={target}", "data.chinese_script=simplified"])


def test_a_data_set_without_chinese_is_untouched_and_cannot_ask(data_dir):
    cfg = load_config(SMALL).data
    assert cfg.chinese_script is None
    source = split_source(DataConfig(dataset=str(data_dir / "tatoeba-en-de")), "train")
    assert source.simplified == () and len(source.identity()) == 1  # the file alone, as before
    with pytest.raises(AttncliError, match="neither en nor de is Chinese"):
        load_config(SMALL, ["data.chinese_script=simplified"])


def test_only_en_zh_yaml_converts():
    assert load_config(EN_ZH).data.chinese_script == "simplified"
    for name in ("small", "multi30k", "base", "wmt14-base"):
        assert load_config(REPO / "configs" / f"{name}.yaml").data.chinese_script is None


def _cache_lines(result) -> list[str]:
    return [line.split(" -> ")[-1] for line in result.stdout.splitlines()
            if line.startswith(("tokenizer: trained", "cache: tokenized"))]


def test_the_conversion_is_part_of_the_cache_keys(corpus, tmp_path):
    """Converted and as stored are two tokenizers and two token caches: neither is reused
    for the other."""
    made = []
    for sets in (["data.chinese_script=null"], []):  # en-zh.yaml converts
        result = run_cli("prepare", EN_ZH, "--set", f"data.dataset={corpus}",
                         "--set", "tokenizer.vocab_size=100",
                         *(arg for item in sets for arg in ("--set", item)))
        assert result.returncode == 0, result.stderr
        made.append(_cache_lines(result))
    assert len(made[0]) == len(made[1]) == 3  # a tokenizer, train and val, each made anew
    assert not set(made[0]) & set(made[1])


def test_a_run_reads_and_translates_in_simplified_script(corpus, tmp_path):
    result = train(corpus.parent, tmp_path, EN_ZH, "--name", "zh",
                   sets=[f"data.dataset={corpus}", "train.max_steps=4"])
    assert result.returncode == 0, result.stderr
    pieces = (tmp_path / "zh" / "spm.model").read_bytes()
    assert "们".encode() in pieces and "們".encode() not in pieces


def test_a_chinese_source_is_converted_at_translation_too(corpus, tmp_path):
    """A zh -> en model learnt from simplified sources: a traditional input is converted as
    its training sources were, so it reads the same."""
    result = train(corpus.parent, tmp_path, EN_ZH, "--name", "zh-en",
                   sets=[f"data.dataset={corpus}", "data.src=zh", "data.tgt=en",
                         "train.max_steps=2"])
    assert result.returncode == 0, result.stderr
    trained = load_trained_model(tmp_path / "zh-en", torch.device("cpu"))
    assert trained.tokenizer.encode_src(["我們有3個蘋果。"]) == \
        trained.tokenizer.encode_src(["我们有3个苹果。"])


@pytest.fixture
def no_opencc(monkeypatch):
    simplifier.cache_clear()
    monkeypatch.setitem(sys.modules, "opencc", None)
    yield
    simplifier.cache_clear()


def test_without_opencc_train_is_one_line_naming_the_package(corpus, tmp_path, no_opencc):
    result = train(corpus.parent, tmp_path / "runs", EN_ZH, sets=[f"data.dataset={corpus}"])
    assert_one_line_error(result, "pip install opencc")
    assert not list(tmp_path.glob("runs/*"))


def test_without_opencc_eval_and_translate_are_one_line(corpus, tmp_path, monkeypatch):
    result = train(corpus.parent, tmp_path, EN_ZH, "--name", "zh",
                   sets=[f"data.dataset={corpus}", "train.max_steps=2"])
    assert result.returncode == 0, result.stderr
    simplifier.cache_clear()
    monkeypatch.setitem(sys.modules, "opencc", None)
    try:
        for command in (["eval", str(tmp_path / "zh")],
                        ["translate", "--run", str(tmp_path / "zh"), "Hello."]):
            assert_one_line_error(run_cli(*command, data_dir=corpus.parent), "pip install opencc")
    finally:
        simplifier.cache_clear()


def test_a_run_saved_before_the_key_existed_resumes_and_decodes(data_dir, tmp_path):
    """Its config.yaml and its saves' fixed settings have no data.chinese_script: it reads
    as null, so the run goes on as it was."""
    result = train(data_dir, tmp_path, SMALL, "--name", "old", sets=["train.max_steps=2"])
    assert result.returncode == 0, result.stderr
    run = tmp_path / "old"
    config = run / "config.yaml"
    config.write_text("".join(line for line in config.read_text("utf-8").splitlines(True)
                              if "chinese_script" not in line), "utf-8")
    for state in run.glob("checkpoints/step-*/state.json"):
        saved = json.loads(state.read_text("utf-8"))
        saved["fixed"].pop("data.chinese_script")
        state.write_text(json.dumps(saved), "utf-8")
    assert resume(data_dir, run, "train.max_steps=4").returncode == 0
    assert run_cli("translate", "--run", str(run), "A dog sees the cat.").returncode == 0
