"""configs/small.yaml and configs/en-zh.yaml on any machine: `tatoeba-en-de` and `tatoeba-en-zh`
are the local folders where there are some, else the Hub's
sentence-transformers/parallel-sentences-tatoeba (configurations en-de, en-zh), whose columns and
splits differ from attncli's (see `data.HUB_LAYOUTS`).

The Hub is not reachable here, so a stand-in for `datasets.load_dataset` returns data in that
source's layout as its card gives it: columns english and non_english, a train and a dev split,
one translation per row."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import datasets
import pytest
from helpers import REPO, SMALL, assert_one_line_error, train

from attncli.core.config import DataConfig
from attncli.core.errors import AttncliError
from attncli.data.sources import HUB_LAYOUTS, load_split, resolve_dataset

EN_ZH = str(REPO / "configs" / "en-zh.yaml")
HUB_ID = "sentence-transformers/parallel-sentences-tatoeba"
HELD_OUT = HUB_LAYOUTS["tatoeba-en-de"].held_out


def _hub_splits(shuffle_seed: int | None = None) -> dict[str, datasets.Dataset]:
    """train: 2,600 pairs of 2,300 English sentences (every tenth with a second translation);
    dev: 100 more pairs, of sentences in train too (250-299) and of their own (2,300-2,349)."""
    train_rows = [{"english": f"Sentence {i}.", "non_english": f"Satz {i}."}
                  for i in range(2300)]
    train_rows += [{"english": f"Sentence {i}.", "non_english": f"Ein Satz {i}."}
                   for i in range(0, 2300, 10)]
    dev_rows = [{"english": f" Sentence {i}. ", "non_english": f"Noch ein Satz {i}."}
                for i in [*range(250, 300), *range(2300, 2350)]]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(train_rows)
    return {"train": datasets.Dataset.from_list(train_rows),
            "dev": datasets.Dataset.from_list(dev_rows)}


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


def _rank(sentence: str) -> bytes:
    return hashlib.sha256(sentence.strip().encode("utf-8")).digest()


def test_the_hub_layout_becomes_three_splits_by_sentence_hash(hub, tmp_path, monkeypatch):
    asked, _ = hub
    monkeypatch.chdir(tmp_path)
    cfg = DataConfig(dataset="tatoeba-en-de", src="en", tgt="de")
    val = load_split(cfg, "val")
    assert asked == [(HUB_ID, "en-de", {})]
    folder = tmp_path / "data" / "tatoeba-en-de"
    splits = {s: _rows(folder / f"{s}.jsonl") for s in ("train", "val", "test")}
    assert all(set(r) == {"en", "de"} for rows in splits.values() for r in rows)
    english = {s: [r["en"].strip() for r in rows] for s, rows in splits.items()}
    ranked = sorted({f"Sentence {i}." for i in range(2350)}, key=_rank)
    # val: the 1,000 sentences whose SHA-256 sorts first, test the next 1,000, in hash order
    assert list(dict.fromkeys(english["val"])) == ranked[:HELD_OUT]
    assert list(dict.fromkeys(english["test"])) == ranked[HELD_OUT:2 * HELD_OUT]
    assert set(english["train"]) == set(ranked[2 * HELD_OUT:])
    # train and dev pooled: every pair kept, each sentence with all its translations
    assert sum(len(rows) for rows in splits.values()) == 2300 + 230 + 100
    sentence = "Sentence 250."  # two translations in train, one in dev
    split_of = next(s for s, names in english.items() if sentence in names)
    assert len([1 for name in english[split_of] if name == sentence]) == 3
    assert len(val) == len(splits["val"]) and val.tgt[0].startswith(("Satz", "Ein", "Noch"))
    load_split(cfg, "test")  # the saved copy now: no second download
    assert len(asked) == 1


def test_the_split_depends_on_the_sentences_not_their_order(hub, tmp_path, monkeypatch):
    _, state = hub
    chosen = []
    for seed in (None, 7):
        state["shuffle"] = seed
        workdir = tmp_path / str(seed)
        workdir.mkdir()
        monkeypatch.chdir(workdir)
        load_split(DataConfig(dataset="tatoeba-en-de", tgt="de"), "val")
        folder = workdir / "data" / "tatoeba-en-de"
        chosen.append([sorted((r["en"], r["de"]) for r in _rows(folder / f"{split}.jsonl"))
                       for split in ("val", "test")])
    assert chosen[0] == chosen[1]


def test_small_yaml_trains_on_the_hub_copy(hub, tmp_path):
    asked, _ = hub
    result = train(tmp_path / "empty", tmp_path / "runs", SMALL, "--name", "hub",
                   sets=["train.max_steps=1", "data.train_limit=null"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    pairs = len(_rows(tmp_path / "data" / "tatoeba-en-de" / "train.jsonl"))
    assert f"data tatoeba-en-de: {pairs:,} training pairs" in result.stdout
    assert asked == [(HUB_ID, "en-de", {})]
    assert (tmp_path / "runs" / "hub" / "checkpoints").is_dir()


def test_en_zh_yaml_takes_the_en_zh_configuration(hub, tmp_path, monkeypatch):
    asked, _ = hub
    monkeypatch.chdir(tmp_path)
    resolve_dataset("tatoeba-en-zh")
    assert asked == [(HUB_ID, "en-zh", {})]
    assert set(_rows(tmp_path / "data" / "tatoeba-en-zh" / "val.jsonl")[0]) == {"en", "zh"}


def test_a_local_folder_wins_over_the_hub(hub, tmp_path, monkeypatch):
    asked, _ = hub
    local = tmp_path / "tatoeba-en-de"
    local.mkdir()
    for split in ("train", "val", "test"):
        (local / f"{split}.jsonl").write_text(json.dumps({"en": "Hello.", "de": "Hallo."}) + "\n",
                                              "utf-8")
    monkeypatch.setenv("ATTNCLI_DATA_DIR", str(tmp_path))
    assert load_split(DataConfig(dataset="tatoeba-en-de", tgt="de"), "test").tgt == ["Hallo."]
    assert asked == []


def test_a_hub_copy_whose_columns_differ_is_one_line_and_keeps_nothing(monkeypatch, tmp_path):
    other = {split: datasets.Dataset.from_list([{"en": "Hello.", "de": "Hallo."}])
             for split in ("train", "dev")}
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None, **kwargs: other)
    monkeypatch.delenv("ATTNCLI_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AttncliError, match=r"has no column 'english' \(it has: en, de\)"):
        resolve_dataset("tatoeba-en-de")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("config", [SMALL, EN_ZH])
def test_no_local_copy_and_no_hub_is_one_line_naming_the_source(config, tmp_path):
    """The real `datasets.load_dataset`, offline (conftest sets HF_HUB_OFFLINE)."""
    (tmp_path / "empty").mkdir()
    result = train(tmp_path / "empty", tmp_path / "runs", config, cwd=tmp_path)
    assert_one_line_error(result, f"the Hub copy {HUB_ID} (en-")
    assert "run once where the Hugging Face Hub is reachable" in result.stderr
    assert list((tmp_path / "runs").glob("*")) == [] and not (tmp_path / "data").exists()
