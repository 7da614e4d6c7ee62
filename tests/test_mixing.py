"""Several training corpora mixed by weight (`data.corpora`): what an epoch holds, resuming in
the middle of one, the token caches a mix shares with one-corpus runs, validation and eval per
corpus, and the refusals of a bad mix."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import write_toy_corpus
from helpers import SMALL, TINY, assert_one_line_error, losses, metrics, run_cli

from attncli.core.config import Config, CorpusConfig, DataConfig, TokenizerConfig
from attncli.data.corpus import prepare_training_data


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mix")
    first = write_toy_corpus(root / "first", {"train": 120, "val": 20, "test": 20})
    second = write_toy_corpus(root / "second", {"val": 20, "test": 20, "train": 90})
    return first, second


def _mix_config(corpora: list[dict], cache: Path, **tokenizer) -> Config:
    return Config(data=DataConfig(corpora=[CorpusConfig(**c) for c in corpora], max_len=40,
                                  cache_dir=str(cache)),
                  tokenizer=TokenizerConfig(vocab_size=120, **tokenizer))


def _positions(batches: list[np.ndarray]) -> Counter:
    return Counter(np.concatenate(batches).tolist())


def test_an_epoch_holds_each_pair_as_often_as_its_weight(two_corpora, tmp_path):
    first, second = two_corpora
    config = _mix_config([{"dataset": str(first), "weight": 1},
                          {"dataset": str(second), "weight": 3}], tmp_path)
    corpus = prepare_training_data(config, lambda line: None).train
    seen = _positions(corpus.epoch_batches(400, seed=1, epoch=0, multiple=1))
    assert [seen[p] for p in range(120)] == [1] * 120
    assert [seen[p] for p in range(120, 210)] == [3] * 90
    assert corpus.shares() == pytest.approx({"first": 120 / 390, "second": 270 / 390})


def test_a_half_weight_draws_another_half_each_epoch(two_corpora, tmp_path):
    first, second = two_corpora
    config = _mix_config([{"dataset": str(first), "weight": 0.5},
                          {"dataset": str(second), "weight": 1.5}], tmp_path)
    corpus = prepare_training_data(config, lambda line: None).train
    halves = []
    for epoch in (0, 1):
        seen = _positions(corpus.epoch_batches(400, seed=1, epoch=epoch, multiple=1))
        firsts = {p for p in seen if p < 120}
        assert len(firsts) == 60 and all(seen[p] == 1 for p in firsts)
        seconds = [seen[p] for p in range(120, 210)]
        assert Counter(seconds) == {1: 45, 2: 45}  # once, and a half again
        halves.append(firsts)
    assert halves[0] != halves[1]
    again = _positions(corpus.epoch_batches(400, seed=1, epoch=1, multiple=1))
    assert {p for p in again if p < 120} == halves[1]  # seeded: the same draw again


def test_adding_a_corpus_with_a_fixed_tokenizer_reuses_the_first_ones_tokens(two_corpora,
                                                                             tmp_path):
    first, second = two_corpora
    trained = prepare_training_data(_mix_config([{"dataset": str(first)}], tmp_path / "a"),
                                    lambda line: None)
    model_file = tmp_path / "spm.model"
    model_file.write_bytes(trained.models.sides()[None])
    alone = Config(data=DataConfig(dataset=str(first), max_len=40, cache_dir=str(tmp_path)),
                   tokenizer=TokenizerConfig(vocab_size=120, model_file=str(model_file)))
    data = prepare_training_data(alone, lambda line: None)
    entry = data.train.parts[0].split.folder
    built = (entry / "manifest.json").stat().st_mtime_ns
    lines: list[str] = []
    mixed = _mix_config([{"dataset": str(first)}, {"dataset": str(second), "weight": 2}],
                        tmp_path, model_file=str(model_file))
    mix = prepare_training_data(mixed, lines.append)
    assert mix.train.parts[0].split.folder == entry
    assert (entry / "manifest.json").stat().st_mtime_ns == built
    train_lines = [line for line in lines if "train split" in line]
    assert train_lines[0].startswith("cache: reusing the tokenized train split (120 pairs)")
    assert train_lines[1].startswith("cache: tokenized the train split (90 pairs)")


def _write_config(folder: Path, corpora: list[dict], **data) -> Path:
    """small.yaml with its data set replaced by `corpora` (tiny settings come with --set)."""
    raw = yaml.safe_load(Path(SMALL).read_text(encoding="utf-8"))
    for key in ("dataset", "subset", "licence", "attribution"):
        raw["data"].pop(key, None)
    raw["data"].update(corpora=corpora, **data)
    path = folder / "mix.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return path


def _train_mix(config: Path, runs: Path, *args: str, sets: tuple[str, ...] = ()):
    """`attncli train CONFIG` with the tiny settings of the other tests."""
    cmd = ["train", str(config), *args, "--runs-dir", str(runs)]
    for item in [*TINY, *sets]:
        cmd += ["--set", item]
    return run_cli(*cmd)


def test_a_mixed_run_resumed_mid_epoch_trains_on_the_same_batches(two_corpora, tmp_path):
    first, second = two_corpora
    config = _write_config(tmp_path, [{"dataset": str(first), "weight": 1},
                                      {"dataset": str(second), "weight": 1.5}])
    schedule = ("train.eval_every=4", "train.save_every=4")
    whole = _train_mix(config, tmp_path / "runs", "--name", "whole",
                       sets=(*schedule, "train.max_steps=24"))
    assert whole.returncode == 0, whole.stderr
    short = _train_mix(config, tmp_path / "runs", "--name", "short",
                       sets=(*schedule, "train.max_steps=10"))
    assert short.returncode == 0, short.stderr
    resumed = run_cli("train", "--resume", str(tmp_path / "runs" / "short"), "--set",
                      "train.max_steps=24")
    assert resumed.returncode == 0, resumed.stderr
    epochs = {e["epoch"] for e in metrics(tmp_path / "runs" / "whole") if e["event"] == "train"}
    assert len(epochs) >= 2  # the run crosses an epoch, where the half-weight draw changes
    assert losses(tmp_path / "runs" / "short") == losses(tmp_path / "runs" / "whole")


def test_a_mix_validates_and_evaluates_each_corpus_and_says_its_licences(two_corpora, tmp_path):
    first, second = two_corpora
    config = _write_config(tmp_path, [
        {"name": "one", "dataset": str(first), "licence": "CC-BY 2.0"},
        {"name": "two", "dataset": str(second), "weight": 2, "licence": "CC BY-NC-SA 4.0"}],
        best_on="two")
    result = _train_mix(config, tmp_path / "runs", "--name", "mix",
                        sets=("train.max_steps=4", "train.eval_every=2"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("licence of two: CC BY-NC-SA 4.0") == 1
    assert "validation step 2 (two, deciding, " in result.stdout
    assert "validation step 2 (one, " in result.stdout
    run = tmp_path / "runs" / "mix"
    vals = [e for e in metrics(run) if e["event"] == "val"]
    assert set(vals[0]["corpora"]) == {"one", "two"}
    assert vals[0]["val_bleu"] == vals[0]["corpora"]["two"]["val_bleu"]  # best_on decides
    reports = {r["name"]: r for r in json.loads((run / "corpora.json").read_text())}
    assert reports["two"]["weight"] == 2 and reports["two"]["kept"] == 90
    assert reports["one"]["licence"] == "CC-BY 2.0"
    evaluated = run_cli("eval", str(run), "--beam", "1")
    assert evaluated.returncode == 0, evaluated.stderr
    scored = {json.loads((run / "eval" / f"test-{name}.json").read_text())["sentences"]
              for name in ("one", "two")}
    assert scored == {20}
    assert not (run / "eval" / "test.json").exists()


def _stand_in_en_zh(folder: Path) -> Path:
    """An en-zh corpus: 30 ordinary pairs, one pair for each filter to drop, and two more
    copies of a pair."""
    subjects = {"The man": "男人", "The woman": "女人", "The child": "孩子",
                "My friend": "我的朋友", "The teacher": "老师"}
    objects = {"a dog": "一只狗", "a red ball": "一个红球", "the house": "房子", "a book": "一本书",
               "the park": "公园", "a cat": "一只猫"}
    ordinary = [(f"{s} sees {o}.", f"{zs}看见{zo}。")
                for s, zs in subjects.items() for o, zo in objects.items()]
    odd = [("OK", "OK"),  # same_text (and no Chinese: the first filter that takes it counts)
           ("Quixotic zebras juggle fizzy xylophones beneath volcanic observatories.", "好。"),
           ("Call 110.", "110"),  # script: a Chinese side without a Chinese character
           *[("Thank you.", "谢谢你。")] * 3]  # duplicates: two copies dropped
    folder.mkdir(parents=True)
    for split, pairs in (("train", ordinary + odd), ("val", ordinary), ("test", ordinary)):
        (folder / f"{split}.jsonl").write_text("".join(
            json.dumps({"en": en, "zh": zh}, ensure_ascii=False) + "\n" for en, zh in pairs),
            encoding="utf-8")
    return folder


def test_each_filter_drops_its_pairs_and_is_counted(tmp_path):
    folder = _stand_in_en_zh(tmp_path / "stand-in")
    filters = {"same_text": True, "length_ratio": 8, "script": True, "duplicates": True}
    config = Config(data=DataConfig(corpora=[CorpusConfig(dataset=str(folder), filters=filters)],
                                    src="en", tgt="zh", max_len=200, cache_dir=str(tmp_path)),
                    tokenizer=TokenizerConfig(vocab_size=150, character_coverage=1.0))
    split = prepare_training_data(config, lambda line: None).train.parts[0].split
    assert split.dropped_by == {"same_text": 1, "length_ratio": 1, "script": 1, "duplicates": 2}
    assert (split.pairs_read, len(split)) == (36, 31)
    unfiltered = config.model_copy(deep=True)
    unfiltered.data.corpora[0].filters = {}
    plain = prepare_training_data(unfiltered, lambda line: None).train.parts[0].split
    assert (plain.dropped_by, len(plain)) == ({}, 36)
    assert plain.folder != split.folder  # filters are part of the cache key


def _bad_mix(tmp_path: Path, corpora, **data):
    config = _write_config(tmp_path, corpora, **data)
    runs = tmp_path / "runs"
    return _train_mix(config, runs, "--name", "bad"), runs


@pytest.mark.parametrize(("corpora", "data", "expected"), [
    ([], {}, "corpora is empty"),
    ([{"dataset": "first", "weight": 0}], {}, "weight"),
    ([{"dataset": "first", "weight": -1}], {}, "weight"),
    ([{"dataset": "first", "filters": {"length_ratio": 0.5}}], {}, "at least 1"),
    ([{"dataset": "first", "filters": {"langid": True}}], {}, "langid"),
    ([{"dataset": "first", "filters": {"script": True}}], {"src": "xx"},
     "knows no script for language 'xx'"),
    ([{"dataset": "first"}, {"dataset": "first"}], {}, "two corpora are named 'first'"),
    ([{"dataset": "first"}, {"dataset": "nowhere-corpus"}], {},
     "corpus nowhere-corpus (data.corpora, dataset 'nowhere-corpus'): data set "
     "'nowhere-corpus' not found"),
])
def test_a_bad_mix_is_one_line_and_writes_no_run(two_corpora, tmp_path, monkeypatch,
                                                   corpora, data, expected):
    monkeypatch.setenv("ATTNCLI_DATA_DIR", str(two_corpora[0].parent))
    result, runs = _bad_mix(tmp_path, corpora, **data)
    assert_one_line_error(result, expected)
    assert not runs.exists() or not any(runs.iterdir())


def test_a_corpus_without_the_languages_is_named(two_corpora, tmp_path, monkeypatch):
    other = tmp_path / "data" / "en-fr"
    other.mkdir(parents=True)
    for split in ("train", "val", "test"):
        (other / f"{split}.jsonl").write_text('{"en": "Hello.", "fr": "Bonjour."}\n')
    monkeypatch.setenv("ATTNCLI_DATA_DIR", str(tmp_path / "data"))
    result, runs = _bad_mix(tmp_path, [{"dataset": str(two_corpora[0])}, {"dataset": "en-fr"}])
    assert_one_line_error(result, "corpus en-fr (data.corpora, dataset 'en-fr'): ")
    assert "de" in result.stderr
    assert not runs.exists() or not any(runs.iterdir())
