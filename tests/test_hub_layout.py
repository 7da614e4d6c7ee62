"""Translation data sets as the Hub lays them out: a configuration name (`data.subset`), rows
`{"translation": {"de": ..., "en": ...}}`, splits train / validation / test.

The Hub is not reachable here, so the tests write small data in that layout, and stand in for
`datasets.load_dataset` where a download is concerned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import toy_pairs
from helpers import SMALL, assert_one_line_error, train

from attncli.core.config import DataConfig
from attncli.core.errors import AttncliError
from attncli.data.sources import load_split, resolve_dataset

SPLITS = {"train": 300, "validation": 20, "test": 30}


def _nested_rows(count: int, seed: int) -> list[dict]:
    return [{"translation": {"de": p["de"], "en": p["en"]}} for p in toy_pairs(count, seed)]


def _write_subset(folder: Path) -> Path:
    """`folder`/{train,validation,test}.jsonl in the Hub's nested layout."""
    folder.mkdir(parents=True)
    for seed, (split, count) in enumerate(SPLITS.items()):
        rows = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _nested_rows(count, seed))
        (folder / f"{split}.jsonl").write_text(rows, encoding="utf-8")
    return folder


def test_nested_rows_of_a_subset_folder_load_as_pairs(tmp_path):
    _write_subset(tmp_path / "wmt-toy" / "de-en")
    cfg = DataConfig(dataset=str(tmp_path / "wmt-toy"), subset="de-en", src="en", tgt="de")
    train_split, val, test = (load_split(cfg, s) for s in ("train", "val", "test"))
    assert (len(train_split), len(val), len(test)) == (300, 20, 30)
    first = toy_pairs(300, 0)[0]
    assert (train_split.src[0], train_split.tgt[0]) == (first["en"], first["de"])
    reverse = load_split(cfg.model_copy(update={"src": "de", "tgt": "en"}), "test")
    assert reverse.src == test.tgt and reverse.tgt == test.src


def test_nested_rows_without_a_subset(tmp_path):
    _write_subset(tmp_path / "books")
    assert len(load_split(DataConfig(dataset=str(tmp_path / "books")), "train")) == 300


@pytest.mark.parametrize("subset, tgt, message", [
    ("fr-en", "de", "no subset 'fr-en' (data.subset; it has: de-en)"),
    ("de-en", "fr", "no language 'fr' in this data set (it has: de, en)"),
])
def test_a_subset_or_language_the_data_set_lacks(tmp_path, subset, tgt, message):
    _write_subset(tmp_path / "wmt-toy" / "de-en")
    cfg = DataConfig(dataset=str(tmp_path / "wmt-toy"), subset=subset, src="en", tgt=tgt)
    with pytest.raises(AttncliError) as caught:
        load_split(cfg, "train")
    assert message in str(caught.value)


def test_training_on_a_hub_layout_subset(data_dir, tmp_path):
    _write_subset(tmp_path / "wmt-toy" / "de-en")
    result = train(data_dir, tmp_path / "runs", SMALL, "--name", "nested",
                   sets=[f"data.dataset={tmp_path / 'wmt-toy'}", "data.subset=de-en",
                         "train.max_steps=1"])
    assert result.returncode == 0, result.stderr
    bad = train(data_dir, tmp_path / "runs", SMALL,
                sets=[f"data.dataset={tmp_path / 'wmt-toy'}", "data.subset=cs-en"])
    assert_one_line_error(bad, "no subset 'cs-en'")
    no_french = train(data_dir, tmp_path / "runs", SMALL,
                      sets=[f"data.dataset={tmp_path / 'wmt-toy'}", "data.subset=de-en",
                            "data.tgt=fr"])
    assert_one_line_error(no_french, "no language 'fr' in this data set (it has: de, en)")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["nested"]
    flat = train(data_dir, tmp_path / "runs", SMALL, sets=["data.subset=de-en"])
    assert_one_line_error(flat, "this data set has no subsets")


class _HubSplit:
    def __init__(self, rows: list[dict]):
        self.rows = rows

    def to_json(self, path: str, force_ascii: bool = False) -> None:
        Path(path).write_text("".join(json.dumps(r) + "\n" for r in self.rows), "utf-8")


def _offline_hub(monkeypatch, cwd: Path, subsets: tuple[str | None, ...]) -> list[tuple]:
    """`datasets.load_dataset` answering for the Hub from the toy splits (for each of
    `subsets`; another subset is the Hub's error), reading saved copies for real; run in `cwd`
    with no data folder. Returns the list of (hub id, subset) asked of the Hub."""
    import datasets

    monkeypatch.chdir(cwd)
    monkeypatch.delenv("ATTNCLI_DATA_DIR", raising=False)
    asked, real = [], datasets.load_dataset

    def load_dataset(hub_id: str, subset: str | None = None, **kwargs):
        if hub_id == "json":  # reading the saved copy
            return real(hub_id, subset, **kwargs)
        asked.append((hub_id, subset))
        if subset not in subsets:
            raise ValueError(f"BuilderConfig '{subset}' not found. Available: ['cs-en', 'de-en']")
        return {split: _HubSplit(_nested_rows(n, i)) for i, (split, n) in enumerate(SPLITS.items())}

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return asked


def test_a_hub_subset_is_downloaded_into_its_own_folder(tmp_path, monkeypatch):
    asked = _offline_hub(monkeypatch, tmp_path, ("de-en",))
    cfg = DataConfig(dataset="wmt14", subset="de-en")
    assert len(load_split(cfg, "val")) == 20
    assert asked == [("wmt/wmt14", "de-en")]
    assert sorted(p.name for p in (tmp_path / "data" / "wmt14" / "de-en").iterdir()) == [
        "test.jsonl", "train.jsonl", "val.jsonl"]
    load_split(cfg, "test")  # the local copy now, no second download
    assert len(asked) == 1
    with pytest.raises(AttncliError, match="BuilderConfig 'xx-en' not found. Available"):
        resolve_dataset("wmt14", "xx-en")
    assert sorted(p.name for p in (tmp_path / "data" / "wmt14").iterdir()) == ["de-en"]


def test_an_owner_name_data_set_is_found_where_its_download_was_kept(tmp_path, monkeypatch):
    """A Hub id is kept as data/<owner>__<name>; every later lookup (training looks several
    times) must find it there, not download again or call it an empty folder."""
    asked = _offline_hub(monkeypatch, tmp_path, (None,))
    cfg = DataConfig(dataset="someone/corpus")
    assert len(load_split(cfg, "val")) == 20
    assert len(load_split(cfg, "test")) == 30  # before: "exists but holds no data set"
    assert resolve_dataset("someone/corpus") == Path("data") / "someone__corpus"
    assert asked == [("someone/corpus", None)]
