"""configs/en-zh.yaml on any machine: `tatoeba-en-zh` is the local folder where there is one,
else the Hub's Helsinki-NLP/tatoeba_mt (eng-cmn_Hans), whose columns and splits differ from
attncli's (see `data.HUB_LAYOUTS`).

The Hub is not reachable here, so a stand-in for `datasets.load_dataset` returns data in that
source's exact layout: columns sourceLang, targetlang, sourceString, targetString, and only a
validation and a test split."""

from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import pytest
from helpers import REPO, assert_one_line_error, train

from attncli.config import DataConfig
from attncli.data import HUB_LAYOUTS, load_split, resolve_dataset
from attncli.errors import AttncliError

EN_ZH = str(REPO / "configs" / "en-zh.yaml")
LAYOUT = HUB_LAYOUTS["tatoeba-en-zh"]


def _row(en: str, zh: str) -> dict[str, str]:
    return {"sourceLang": "eng", "targetlang": "cmn_Hans", "sourceString": en,
            "targetString": zh}


def _hub_splits(shuffle_seed: int | None = None) -> dict[str, datasets.Dataset]:
    """validation: 1,500 pairs of 1,200 English sentences (300 with a second translation);
    test: 100 sentences, of which 50 (1150-1199) are in validation too."""
    validation = [_row(f"Sentence {i % 1200}.", f"句子{i}。") for i in range(1500)]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(validation)
    test = [_row(f"Sentence {j}.", f"测试{j}。") for j in range(1150, 1250)]
    return {"validation": datasets.Dataset.from_list(validation),
            "test": datasets.Dataset.from_list(test)}


@pytest.fixture
def hub(monkeypatch):
    """Stand in for the Hub: `asked` records each download's arguments."""
    asked, real = [], datasets.load_dataset
    state = {"shuffle": None}

    def load_dataset(path: str, name: str | None = None, **kwargs):
        if path == "json":  # reading the saved copy
            return real(path, name, **kwargs)
        asked.append((path, name, kwargs))
        return _hub_splits(state["shuffle"])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.delenv("ATTNCLI_DATA_DIR", raising=False)
    return asked, state


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_the_hub_layout_becomes_disjoint_train_val_test(hub, tmp_path, monkeypatch):
    asked, _ = hub
    monkeypatch.chdir(tmp_path)
    cfg = DataConfig(dataset="tatoeba-en-zh", src="en", tgt="zh")
    val = load_split(cfg, "val")
    assert asked == [("Helsinki-NLP/tatoeba_mt", None,
                      {"data_dir": "eng-cmn_Hans", "revision": "refs/convert/parquet"})]
    folder = tmp_path / "data" / "tatoeba-en-zh"
    splits = {s: _rows(folder / f"{s}.jsonl") for s in ("train", "val", "test")}
    assert all(set(r) == {"en", "zh"} for rows in splits.values() for r in rows)
    assert splits["test"] == [{"en": f"Sentence {j}.", "zh": f"测试{j}。"}
                              for j in range(1150, 1250)]  # the Hub's test split, whole
    english = {s: {r["en"] for r in rows} for s, rows in splits.items()}
    assert len(english["val"]) == LAYOUT.val_sentences
    assert not english["train"] & english["val"]
    assert not (english["train"] | english["val"]) & english["test"]
    # every validation pair whose sentence is not in test is kept, in train or val
    assert len(splits["train"]) + len(splits["val"]) == 1450
    assert len(val) == len(splits["val"]) and val.tgt[0].startswith("句子")
    load_split(cfg, "test")  # the saved copy now: no second download
    assert len(asked) == 1


def test_val_depends_on_the_sentences_not_their_order(hub, tmp_path, monkeypatch):
    _, state = hub
    chosen = []
    for seed in (None, 7):
        state["shuffle"] = seed
        workdir = tmp_path / str(seed)
        workdir.mkdir()
        monkeypatch.chdir(workdir)
        load_split(DataConfig(dataset="tatoeba-en-zh", tgt="zh"), "val")
        rows = _rows(workdir / "data" / "tatoeba-en-zh" / "val.jsonl")
        chosen.append(sorted((r["en"], r["zh"]) for r in rows))
    assert chosen[0] == chosen[1]


def test_en_zh_yaml_trains_on_the_hub_copy(hub, tmp_path):
    asked, _ = hub
    result = train(tmp_path / "empty", tmp_path / "runs", EN_ZH, "--name", "hub",
                   sets=["train.max_steps=1", "data.train_limit=null"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    pairs = len(_rows(tmp_path / "data" / "tatoeba-en-zh" / "train.jsonl"))
    assert f"data tatoeba-en-zh: {pairs:,} training pairs" in result.stdout
    assert len(asked) == 1 and (tmp_path / "runs" / "hub" / "checkpoints").is_dir()


def test_a_local_folder_wins_over_the_hub(hub, tmp_path):
    asked, _ = hub
    local = tmp_path / "tatoeba-en-zh"
    local.mkdir()
    for split in ("train", "val", "test"):
        (local / f"{split}.jsonl").write_text(
            json.dumps({"en": "Hello.", "zh": "你好。"}, ensure_ascii=False) + "\n", "utf-8")
    cfg = DataConfig(dataset=str(local), tgt="zh")
    assert load_split(cfg, "test").tgt == ["你好。"]
    assert asked == []


def test_a_hub_layout_that_changed_is_one_line_and_keeps_nothing(monkeypatch, tmp_path):
    other = {split: datasets.Dataset.from_list([{"eng": "Hello.", "zho": "你好。"}])
             for split in ("validation", "test")}
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None, **kwargs: other)
    monkeypatch.delenv("ATTNCLI_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AttncliError, match=r"has no column 'sourceString' \(it has: eng, zho\)"):
        resolve_dataset("tatoeba-en-zh")
    assert not (tmp_path / "data").exists()


def test_no_local_copy_and_no_hub_is_one_line_naming_the_source(tmp_path):
    """The real `datasets.load_dataset`, offline (conftest sets HF_HUB_OFFLINE)."""
    (tmp_path / "empty").mkdir()
    result = train(tmp_path / "empty", tmp_path / "runs", EN_ZH, cwd=tmp_path)
    assert_one_line_error(result, "the Hub copy Helsinki-NLP/tatoeba_mt (eng-cmn_Hans) could "
                                  "not be loaded")
    assert "run once where the Hugging Face Hub is reachable" in result.stderr
    assert list((tmp_path / "runs").glob("*")) == [] and not (tmp_path / "data").exists()
