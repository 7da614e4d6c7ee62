"""Data that would silently spoil a run is refused: a single file standing in for every split,
lengths the positions cannot hold, a Hub download that stopped halfway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import toy_pairs
from helpers import SMALL, assert_one_line_error, run_cli, train

from attncli.core.config import DataConfig
from attncli.core.config_files import parse_config
from attncli.core.errors import AttncliError
from attncli.data.sources import load_split, resolve_dataset, split_source


def _jsonl(path: Path, count: int, seed: int) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in toy_pairs(count, seed)), "utf-8")
    return path


def test_a_single_training_file_needs_its_own_val_and_test(data_dir, tmp_path):
    pairs = _jsonl(tmp_path / "pairs.jsonl", 300, 11)
    result = train(data_dir, tmp_path / "runs", SMALL, sets=[f"data.dataset={pairs}"])
    assert_one_line_error(result, "a single file is training data only")
    assert "data.val" in result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_single_training_file_with_val_and_test_from_elsewhere(data_dir, tmp_path):
    pairs = _jsonl(tmp_path / "pairs.jsonl", 300, 11)
    dev, test = _jsonl(tmp_path / "dev.jsonl", 20, 12), _jsonl(tmp_path / "test.jsonl", 30, 13)
    result = train(data_dir, tmp_path / "runs", SMALL, "--name", "one-file",
                   sets=[f"data.dataset={pairs}", f"data.val={dev}", f"data.test={test}",
                         "train.max_steps=1"])
    assert result.returncode == 0, result.stderr
    scored = run_cli("eval", str(tmp_path / "runs" / "one-file"), "--beam", "1", "--json")
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["sentences"] == 30
    assert json.loads(scored.stdout)["data"] == str(test)
    other = run_cli("eval", str(tmp_path / "runs" / "one-file"), "--beam", "1", "--json",
                    "--data", str(dev))
    assert json.loads(other.stdout)["sentences"] == 20


def test_a_single_file_has_no_val_split_of_its_own(tmp_path):
    pairs = _jsonl(tmp_path / "pairs.jsonl", 10, 1)
    with pytest.raises(AttncliError, match="a single file has no val split"):
        load_split(DataConfig(dataset=str(pairs)), "val")


@pytest.mark.parametrize("train_text, message", [
    ('{"en": "A dog.", "de": "Ein Hund."}\n{"en": "A cat.", "de": \n', ": line 2: not JSON"),
    ('{"en": "A dog.", "de": "Ein Hund."}\n"hello"\n', ": line 2: not a JSON object (a string)"),
    ("", ": the file is empty"),
    ('{"en": 1, "de": 2}\n{"en": 3, "de": 4}\n', ", line 1: the 'en' value is a number, not text"),
    ('{"en": "A", "de": "B"}\n{"en": "C", "de": "D"}\n{"en": "E", "de": 5}\n',
     ", line 3: the 'de' value is a number, not text"),
])
def test_a_training_file_that_cannot_be_read_is_one_line_naming_it(data_dir, tmp_path,
                                                                    train_text, message):
    """A malformed JSON line, an empty file, numbers for text: exit 2 naming the file, not a
    traceback of the parser's."""
    folder = tmp_path / "broken"
    folder.mkdir()
    for split in ("val", "test"):
        (folder / f"{split}.jsonl").write_bytes((data_dir / "tatoeba-en-de" / f"{split}.jsonl")
                                                .read_bytes())
    (folder / "train.jsonl").write_text(train_text, "utf-8")
    result = train(data_dir, tmp_path / "runs", SMALL, sets=[f"data.dataset={folder}"])
    assert_one_line_error(result, f"{folder / 'train.jsonl'}{message}")


def test_a_tsv_row_with_a_tab_too_many_is_one_line_naming_the_file(tmp_path):
    table = tmp_path / "pairs.tsv"
    table.write_text("en\tde\nA dog.\tEin Hund.\nA cat.\tEine\tKatze.\n", "utf-8")
    with pytest.raises(AttncliError, match=f"{table}: line 3: a tab too many; the header has 2"):
        load_split(DataConfig(dataset=str(tmp_path), val=str(table)), "val")


@pytest.mark.parametrize("sets, message", [
    (["data.max_len=300"], "data.max_len (300, padded to a multiple of 8: 304) exceeds "
                           "model.max_positions (256); lower data.max_len to 256"),
    (["data.max_len=250", "model.max_positions=250"], "padded to a multiple of 8: 256"),
])
def test_max_len_is_checked_against_the_positions_when_the_config_is_read(sets, message):
    """`auto` is checked against the largest multiple it may pick, on every machine."""
    args = ["train", SMALL, "--set", "train.pad_multiple=auto"]
    for item in sets:
        args += ["--set", item]
    assert_one_line_error(run_cli(*args), message)


def test_max_len_fits_exactly_without_padding():
    config = parse_config({"data": {"max_len": 250}, "model": {"max_positions": 250},
                           "train": {"pad_multiple": 1}})
    assert config.data.max_len == 250


class _FakeSplit:
    """A Hub split that writes its rows, or stops halfway like a dropped connection."""

    def __init__(self, rows: list[dict], fails: bool = False):
        self.rows, self.fails = rows, fails

    def to_json(self, path: str, force_ascii: bool = False) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(self.rows[0]) + "\n")
            if self.fails:
                raise ConnectionError("connection reset while downloading")
            f.writelines(json.dumps(r) + "\n" for r in self.rows[1:])


def test_an_interrupted_hub_download_never_passes_for_a_data_set(tmp_path, monkeypatch):
    import datasets

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNCLI_DATA_DIR", raising=False)
    rows = toy_pairs(5, 3)

    def broken(name: str, subset: str | None = None):
        return {"train": _FakeSplit(rows), "validation": _FakeSplit(rows, fails=True)}

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.raises(AttncliError, match="connection reset while downloading"):
        resolve_dataset("someone/pairs")
    assert list((tmp_path / "data").iterdir()) == []  # no partial data set, no temp folder

    monkeypatch.setattr(datasets, "load_dataset",
                        lambda name, subset=None: {"train": _FakeSplit(rows),
                                                   "validation": _FakeSplit(rows)})
    folder = resolve_dataset("someone/pairs")
    assert folder == Path("data/someone__pairs")
    assert sorted(p.name for p in folder.iterdir()) == ["train.jsonl", "val.jsonl"]
    assert len((folder / "val.jsonl").read_text().splitlines()) == 5


def test_a_folder_without_split_files_is_not_a_data_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNCLI_DATA_DIR", raising=False)
    (tmp_path / "data" / "notes").mkdir(parents=True)
    (tmp_path / "data" / "notes" / "README.md").write_text("to do: download")
    with pytest.raises(AttncliError, match="data set 'notes' not found"):
        resolve_dataset("notes")


@pytest.mark.parametrize("name", ["corp", "corp/", "./corp"])
def test_a_named_folder_of_subsets_is_never_merged_or_copied(tmp_path, monkeypatch, name):
    """'corp/' went to `datasets.load_dataset`, which merged every subfolder's files into one
    data set and kept a copy in data/ that later runs read even after the folder changed."""
    import datasets

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNCLI_DATA_DIR", raising=False)
    for subset in ("de-en", "de-en-filtered"):
        (tmp_path / "corp" / subset).mkdir(parents=True)
        (tmp_path / "corp" / subset / "train.jsonl").write_text('{"en": "a", "de": "b"}\n')
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("Hub asked"))
    with pytest.raises(AttncliError, match=r"no train, val or test file here; it has subsets "
                                           r"de-en, de-en-filtered: name one"):
        resolve_dataset(name)
    assert not (tmp_path / "data").exists()
    assert resolve_dataset(name, "de-en") == Path(name) / "de-en"


def test_a_home_relative_path_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "train.jsonl").write_text('{"en": "a", "de": "b"}\n')
    assert resolve_dataset("~/pairs") == tmp_path / "pairs"


def _no_run_folder(runs: Path) -> bool:
    return not runs.exists() or not any(runs.iterdir())


def test_a_validation_split_that_max_len_empties_is_refused_before_the_run(data_dir, tmp_path):
    """Every validation pair longer than data.max_len: refused with the data, not a crash at
    the first validation that left a run folder without a checkpoint."""
    long_pairs = [{"en": " ".join(["word"] * 120), "de": " ".join(["wort"] * 120)}] * 5
    dev = tmp_path / "long.jsonl"
    dev.write_text("".join(json.dumps(p) + "\n" for p in long_pairs), "utf-8")
    result = train(data_dir, tmp_path / "runs", SMALL, sets=[f"data.val={dev}"])
    assert_one_line_error(result, "no validation pairs fit data.max_len=60")
    assert _no_run_folder(tmp_path / "runs")


@pytest.mark.parametrize("key", ["test", "val"])
def test_a_missing_split_file_is_named_at_once_not_looked_up_on_the_hub(data_dir, tmp_path,
                                                                         key):
    """A typo in data.test surfaced only at `attncli eval`, after the training; a path that
    does not exist was taken for a Hub id (and waited for the Hub)."""
    missing = tmp_path / "tset.jsonl"
    result = train(data_dir, tmp_path / "runs", SMALL, sets=[f"data.{key}={missing}"])
    assert_one_line_error(result, f"{missing}: no such file or folder")
    assert _no_run_folder(tmp_path / "runs")


def test_subword_sampling_with_a_bpe_model_file_is_refused_before_the_run(data_dir, tmp_path):
    from helpers import train_tokenizer

    from attncli.core.config import TokenizerConfig

    texts = [p["en"] for p in toy_pairs(200, 3)], [p["de"] for p in toy_pairs(200, 3)]
    train_tokenizer(TokenizerConfig(type="bpe", vocab_size=100), *texts,
                    tmp_path / "bpe", ("en", "de"))
    result = train(data_dir, tmp_path / "runs", SMALL,
                   sets=[f"tokenizer.model_file={tmp_path / 'bpe' / 'spm.model'}",
                         "tokenizer.type=bpe", "train.subword_alpha=0.1"])
    assert_one_line_error(result, "train.subword_alpha needs a unigram SentencePiece model")
    assert _no_run_folder(tmp_path / "runs")


def _split_folder(tmp_path: Path, files: dict[str, bytes]) -> Path:
    folder = tmp_path / "set"
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def test_a_file_replaced_with_the_same_time_is_read_afresh(tmp_path):
    """`datasets` keys its copy of a file on path and modification time: a file replaced by
    another content with the same time (`cp -p`, `rsync -a`) was read back stale."""
    import os

    folder = _split_folder(tmp_path, {"val.jsonl": b'{"en": "A dog.", "de": "Ein Hund."}\n'})
    path = folder / "val.jsonl"
    stamp = (path.stat().st_atime_ns, path.stat().st_mtime_ns)
    assert load_split(DataConfig(dataset=str(folder)), "val").src == ["A dog."]
    source = split_source(DataConfig(dataset=str(folder)), "val")
    before = source.identity()
    path.write_bytes(b'{"en": "A cow.", "de": "Ein Kalb."}\n')  # the same size
    os.utime(path, ns=stamp)
    assert load_split(DataConfig(dataset=str(folder)), "val").src == ["A cow."]
    # attncli's own cache key (the token cache's) changes too, though size and time did not
    assert split_source(DataConfig(dataset=str(folder)), "val").identity() != before


@pytest.mark.parametrize(("files", "message"), [
    ({"val.en": b"A dog\rruns.\nA cat.\n", "val.de": b"Ein Hund rennt.\nEine Katze.\n"},
     "val.en: line 1: a carriage return (\\r) inside the line"),
    ({"val.tsv": b"en\tde\nA dog.\tEin Hund.\nA cat.\tEine\rKatze.\n"},
     "val.tsv: line 3: a carriage return"),
    ({"val.tsv": b"en\tde\nA dog.\tEin Hund.\nA cat. Eine Katze.\nA cow.\tEine Kuh.\n"},
     "val.tsv: line 3: a field missing (a tab too few?)"),
    ({"val.jsonl": b'{"en": "A", "de": "B"}\n', "valid.jsonl": b'{"en": "C", "de": "D"}\n'},
     "val.jsonl and valid.jsonl both hold the val split; keep one"),
    ({"val.jsonl": b'{"en": "A", "de": "B"}\n', "val.en": b"A\n", "val.de": b"B\n"},
     "val.jsonl and val.en + val.de all hold the val split; keep one"),
    # rows the reader fills with nulls, which passed for empty pairs and were dropped as such
    ({"val.jsonl": b'{"en": "A", "de": "B"}\n{"en": "C"}\n'},
     "val.jsonl, line 2: no 'de' text in this row"),
    ({"val.jsonl": b'{"en": "A", "de": "B"}\n{"en": "C", "de": null}\n'},
     "val.jsonl, line 2: no 'de' text in this row"),
    ({"val.jsonl": b'{"en": "A", "de": "B"}\nnull\n{"en": "C", "de": "D"}\n'},
     "val.jsonl, line 2: no 'en' text in this row"),
    ({"val.jsonl": b'{"en": "A", "de": "B"}\n{"translation": {"en": "C", "de": "D"}}\n'},
     "val.jsonl, line 2: no 'en' text in this row"),
])
def test_files_that_would_pair_the_wrong_lines_are_refused(tmp_path, files, message):
    folder = _split_folder(tmp_path, files)
    with pytest.raises(AttncliError) as info:
        load_split(DataConfig(dataset=str(folder)), "val")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_unwritable_datasets_cache_is_named_not_blamed_on_the_data_file(tmp_path,
                                                                        monkeypatch):
    """Every read writes `datasets`' Arrow copy of the file into its cache; an unwritable one
    said the data file "cannot be read as a data file"."""
    import datasets

    folder = _split_folder(tmp_path, {"val.jsonl": b'{"en": "A dog.", "de": "Ein Hund."}\n'})
    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "a-file" / "hf"))
    with pytest.raises(AttncliError) as info:
        load_split(DataConfig(dataset=str(folder)), "val")
    assert "cannot write the datasets library's cache" in str(info.value)
    assert "HF_DATASETS_CACHE" in str(info.value) and "val.jsonl" not in str(info.value)


def test_crlf_and_a_byte_order_mark_are_plain_line_ends_and_no_text(tmp_path):
    folder = _split_folder(tmp_path, {"val.en": b"\xef\xbb\xbfA dog.\r\nA cat.\r\n",
                                      "val.de": b"Ein Hund.\nEine Katze.\n"})
    pairs = load_split(DataConfig(dataset=str(folder)), "val")
    assert pairs.src == ["A dog.", "A cat."] and pairs.tgt == ["Ein Hund.", "Eine Katze."]
