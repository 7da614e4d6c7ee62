"""The token cache: tokenized once, reused, rebuilt when the data or the tokenizer changes or the
entry is damaged; batches fed by worker processes in exactly the sampler's order."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import toy_pairs, write_toy_corpus
from helpers import SMALL, assert_one_line_error, run_cli

from attncli.core.config import Config, DataConfig, TokenizerConfig
from attncli.core.errors import AttncliError
from attncli.core.files import TEMP_PREFIX
from attncli.data import cache as data_cache
from attncli.data.batching import batch_loader, token_batches
from attncli.data.corpus import prepare_training_data, side_texts, tokenizer_sample
from attncli.data.sources import open_split, split_source


def _config(folder: Path, cache: Path, **tokenizer) -> Config:
    return Config(data=DataConfig(dataset=str(folder), cache_dir=str(cache), max_len=40),
                  tokenizer=TokenizerConfig(vocab_size=120, **tokenizer))


def _prepare(config: Config) -> tuple[object, list[str]]:
    lines: list[str] = []
    return prepare_training_data(config, lines.append), lines


def _ids(split, tokenizer) -> list[tuple[list[int], list[int]]]:
    """Every kept pair's ids as the cache serves them (one batch of all pairs)."""
    import numpy as np

    batch = split.collate(np.arange(len(split)))
    pairs = []
    for src, tgt in zip(batch.src.tolist(), batch.tgt_out.tolist(), strict=True):
        pairs.append(([i for i in src if i], [i for i in tgt if i][:-1]))  # drop PAD, EOS
    return pairs


@pytest.fixture
def toy(tmp_path) -> Path:
    return write_toy_corpus(tmp_path / "toy", {"train": 300, "val": 20, "test": 20})


def test_the_cache_holds_the_tokenizers_own_ids(toy, tmp_path):
    data, _ = _prepare(_config(toy, tmp_path / "cache"))
    tokenizer = data.models.tokenizer()
    pairs = toy_pairs(300, 0)
    expected = list(zip(tokenizer.encode_src([p["en"] for p in pairs]),
                        tokenizer.encode_tgt([p["de"] for p in pairs]), strict=True))
    assert _ids(data.train, tokenizer) == expected
    assert (len(data.train), len(data.val)) == (300, 20)


def test_a_second_run_reuses_the_tokenizer_and_the_tokens(toy, tmp_path):
    config = _config(toy, tmp_path / "cache")
    first, first_lines = _prepare(config)
    second, second_lines = _prepare(config)
    assert not any("reusing" in line for line in first_lines)
    assert [line.split()[:2] for line in second_lines] == [["tokenizer:", "reusing"],
                                                           ["cache:", "reusing"],
                                                           ["cache:", "reusing"]]
    assert second.models == first.models
    tokenizer = first.models.tokenizer()
    assert _ids(second.train, tokenizer) == _ids(first.train, tokenizer)


def test_changed_data_builds_a_new_entry(toy, tmp_path):
    config = _config(toy, tmp_path / "cache")
    first, _ = _prepare(config)
    extra = {"en": "The cat finds the old car.", "de": "Die Katze findet das alte Auto."}
    with open(toy / "train.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(extra) + "\n")
    second, lines = _prepare(config)
    assert not any("reusing" in line for line in lines)
    assert (len(first.train), len(second.train)) == (300, 301)


def test_a_changed_tokenizer_builds_new_tokens(toy, tmp_path):
    first, _ = _prepare(_config(toy, tmp_path / "cache"))
    other = _config(toy, tmp_path / "cache").model_copy(
        update={"tokenizer": TokenizerConfig(vocab_size=90)})
    second, lines = _prepare(other)
    assert not any("reusing" in line for line in lines)
    assert first.models != second.models
    assert first.train.parts[0].split.manifest["key"] != second.train.parts[0].split.manifest["key"]


@pytest.mark.parametrize("damage", ["truncate", "manifest"])
def test_a_damaged_entry_is_rebuilt_not_trusted(toy, tmp_path, damage):
    config = _config(toy, tmp_path / "cache")
    first, _ = _prepare(config)
    tokenizer = first.models.tokenizer()
    expected = _ids(first.train, tokenizer)
    entry = first.train.parts[0].split.folder
    del first  # it maps the file that is damaged next
    arrow = next(entry.glob("tokens*.arrow"))
    if damage == "truncate":
        arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    else:
        (entry / "manifest.json").unlink()
    second, lines = _prepare(config)
    assert any("incomplete or damaged; tokenizing again" in line for line in lines)
    assert _ids(second.train, tokenizer) == expected


def test_empty_and_long_pairs_are_counted_and_left_out(tmp_path):
    rows = [*toy_pairs(50, 0), {"en": "   ", "de": "leer"},
            {"en": " ".join(["the big house"] * 30), "de": "das Haus"}]
    folder = tmp_path / "odd"
    write_toy_corpus(folder, {"val": 10})
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data, first = _prepare(_config(folder, tmp_path / "cache"))
    assert (len(data.train), data.train.dropped_empty, data.train.dropped_long) == (50, 1, 1)
    _, again = _prepare(_config(folder, tmp_path / "cache"))
    # the same count the first time and when reused (the first said the table's 52 rows)
    said = [line.split("(")[1].split(")")[0] for line in first + again
            if line.startswith("cache:") and "train split" in line]
    assert said == ["50 pairs", "50 pairs"], first + again


def test_the_token_caches_key_is_the_one_it_had_when_the_models_were_a_dict(toy, tmp_path):
    """The key hashes each model's SHA-256 by side ("joint", or "src" and "tgt"), as it did
    when the models travelled as a dict of sides: token caches made then stay valid."""
    import hashlib

    config = _config(toy, tmp_path / "cache")
    data, _ = _prepare(config)
    model = next((tmp_path / "cache" / "tokenizers").glob("*/spm.model")).read_bytes()
    source = split_source(config.data, "train")
    assert data.train.parts[0].split.manifest["key"] == data_cache.cache_key({
        "format": data_cache.CACHE_FORMAT, "data": source.identity(), "split": "train",
        "languages": [source.src, source.tgt], "rows": None, "max_len": 40,
        "tokenizer": {"joint": hashlib.sha256(model).hexdigest()}})


def test_several_tokenizing_processes_write_the_same_table(toy, tmp_path, monkeypatch):
    one, _ = _prepare(_config(toy, tmp_path / "one"))
    monkeypatch.setattr(data_cache, "ROWS_PER_PROCESS", 100)
    config = _config(toy, tmp_path / "two")
    config.data.num_proc = 2
    two, lines = _prepare(config)
    assert any("with 2 process(es)" in line for line in lines)
    tokenizer = one.models.tokenizer()
    assert _ids(two.train, tokenizer) == _ids(one.train, tokenizer)


def test_the_tokenizer_sample_is_bounded_and_seeded(toy):
    ds = open_split(split_source(DataConfig(dataset=str(toy)), "train"))
    sample = side_texts(tokenizer_sample(ds, 40))
    src = list(sample("src"))
    assert len(src) == 40 and src == list(side_texts(tokenizer_sample(ds, 40))("src"))
    english = {p["en"] for p in toy_pairs(300, 0)}
    assert set(src) <= english and len(set(src)) > 20
    whole = side_texts(tokenizer_sample(ds, 1000))
    assert list(whole("tgt")) == [p["de"] for p in toy_pairs(300, 0)]


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def test_the_tokenizer_sample_is_bounded_in_bytes(toy):
    ds = open_split(split_source(DataConfig(dataset=str(toy)), "train"))
    pairs = toy_pairs(300, 0)
    total = sum(_utf8(p["en"]) + _utf8(p["de"]) for p in pairs)
    bound = total // 5

    def handed(size: int, max_bytes: int | None) -> list[str]:
        texts = side_texts(tokenizer_sample(ds, size, max_bytes))
        return list(texts("src")) + list(texts("tgt"))

    sample = handed(1000, bound)
    longest = max(_utf8(p["en"]) + _utf8(p["de"]) for p in pairs)
    assert bound - longest < sum(map(_utf8, sample)) <= bound
    assert sum(map(len, sample)) <= bound  # characters: at most as many as bytes
    assert sample == handed(1000, bound)  # seeded: the same sample every time
    assert set(sample[:len(sample) // 2]) <= {p["en"] for p in pairs}
    # Within both bounds nothing changes: every pair in order, or the pair-bounded sample.
    assert handed(1000, total) == handed(1000, None) == ([p["en"] for p in pairs]
                                                          + [p["de"] for p in pairs])
    assert handed(40, total) == handed(40, None)


def test_the_trainer_is_handed_at_most_sample_bytes(toy, tmp_path, monkeypatch):
    from attncli.data import tokenizer

    handed: list[int] = []
    train_one = tokenizer._train_one

    def counting(texts, cfg, languages):
        texts = list(texts)
        handed.append(sum(map(_utf8, texts)))
        return train_one(texts, cfg, languages)

    monkeypatch.setattr(tokenizer, "_train_one", counting)
    _, lines = _prepare(_config(toy, tmp_path / "cache", sample_bytes=6000))
    assert len(handed) == 1 and 5000 < handed[0] <= 6000
    assert any("(at most 1,000,000 pairs and 6,000 bytes)" in line for line in lines)


def test_the_sample_draws_no_empty_pair_and_no_pair_larger_than_the_bound(tmp_path):
    """Empty pairs took places in the sample that no text filled (sample_size 2 of 200 real
    and 200 empty pairs could come out empty); one pair over the byte bound, drawn first,
    ended the sample at once ("smaller than any pair", which was not so)."""
    import datasets

    from attncli.data.corpus import sample_rows

    real = [{"src": f"word {i}", "tgt": f"wort {i}"} for i in range(200)]
    rows = real + [{"src": "", "tgt": ""}] * 200
    ds = datasets.Dataset.from_list(rows)
    for seed in range(5):
        texts = list(side_texts(tokenizer_sample(ds, 2, None, seed))("src"))
        assert len(texts) == 2
    sizes = np.array([10] * 50 + [1000] + [10] * 50)
    picked = sample_rows(sizes, 1000, 500)
    assert picked is not None and 50 not in picked and len(picked) == 50  # 500 bytes of 10


def test_a_blank_side_counts_as_empty_in_the_sample_and_the_log(tmp_path):
    """Whitespace-only sides were sized as text: they took places in the sample (and bytes of
    its bound) that the trainer never got, and the log counted them as learnt from."""
    import datasets

    from attncli.data.corpus import pair_bytes

    rows = [{"src": "a dog", "tgt": "ein hund"}, {"src": " \u00a0 ", "tgt": "x"},
            {"src": "y", "tgt": "\t"}, {"src": "", "tgt": None}]
    assert pair_bytes(datasets.Dataset.from_list(rows)).tolist() == [13, 0, 0, 0]
    pairs = toy_pairs(300, 0)
    for pair in pairs[:50]:
        pair["de"] = "   "
    folder = tmp_path / "blank"
    folder.mkdir()
    for split in ("train", "val", "test"):
        chosen = pairs if split == "train" else toy_pairs(20, 1)
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in chosen))
    _, lines = _prepare(_config(folder, tmp_path / "cache"))
    assert any(" on 250 of 300 pairs " in line for line in lines), lines


def test_sentences_longer_than_sentencepieces_default_are_learnt_from(tmp_path):
    """SentencePiece skips sentences over 4,192 bytes by default, without a word: a corpus of
    long ones failed with its internal error, and long ones vanished from any other."""
    from attncli.data.tokenizer import train_models

    words = [f"word{i}" for i in range(40)]
    long = [" ".join(words[(i + j) % 40] for j in range(900)) for i in range(20)]
    assert min(map(len, long)) > 4192
    models = train_models(TokenizerConfig(vocab_size=80), {"src": long, "tgt": long}.__getitem__,
                          ("en", "de"))
    tokenizer = models.tokenizer()
    assert tokenizer.src.piece_to_id("▁word") != tokenizer.src.unk_id()  # learnt from them


def test_a_tokenizers_folder_that_cannot_be_written_is_found_before_training(toy, tmp_path,
                                                                          monkeypatch):
    from attncli.data import corpus

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "tokenizers").write_text("a file where the folder goes")
    monkeypatch.setattr(corpus, "train_models", lambda *args: pytest.fail("trained first"))
    with pytest.raises(AttncliError, match="tokenizers: cannot write the data cache here"):
        _prepare(_config(toy, cache))


def test_a_byte_bound_below_one_pair_is_one_line(toy, tmp_path):
    with pytest.raises(AttncliError, match="tokenizer.sample_bytes=10 is smaller than any"):
        _prepare(_config(toy, tmp_path / "cache", sample_bytes=10))


def test_workers_feed_the_same_batches_in_the_same_order(toy, tmp_path):
    data, _ = _prepare(_config(toy, tmp_path / "cache"))
    order = token_batches(data.train.src_lens, data.train.tgt_lens, 200, seed=5, epoch=1,
                          multiple=8)
    alone = list(batch_loader(data.train, order, 8, workers=0, pin_memory=False))
    fed = list(batch_loader(data.train, order, 8, workers=2, pin_memory=False))
    assert len(alone) == len(fed) == len(order) > 5
    for a, b in zip(alone, fed, strict=True):
        assert all(torch.equal(x, y) for x, y in ((a.src, b.src), (a.tgt_in, b.tgt_in),
                                                  (a.tgt_out, b.tgt_out)))


def test_a_cache_folder_that_cannot_be_written_is_one_line(data_dir, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_cli("prepare", SMALL, "--set", f"data.cache_dir={blocker}/cache",
                     data_dir=data_dir)
    assert_one_line_error(result, "cannot write the data cache here")


def test_a_complete_cache_is_only_read(toy, tmp_path, monkeypatch):
    """A cache holding every entry (a read-only mount of a shared one) was refused as not
    writable; writing is checked only where something must be built."""

    config = _config(toy, tmp_path / "cache")
    _prepare(config)  # every entry built

    def read_only(folder, *args, **kwargs):
        raise AttncliError(f"{folder}: cannot write the data cache here (Read-only file system)")

    monkeypatch.setattr(data_cache, "check_writable", read_only)
    _, lines = _prepare(config)
    assert any("tokenizer: reusing" in line for line in lines)
    with pytest.raises(AttncliError, match="Read-only file system"):  # nothing cached there
        _prepare(_config(toy, tmp_path / "other-cache"))


def test_an_entry_another_process_finished_first_is_kept(toy, tmp_path, monkeypatch):
    import shutil

    real = data_cache._tokenize_into

    def racing(folder, key, *args, **kwargs):
        real(folder, key, *args, **kwargs)
        shutil.copytree(folder, folder.parent / key)  # the other process renames first

    monkeypatch.setattr(data_cache, "_tokenize_into", racing)
    data, lines = _prepare(_config(toy, tmp_path / "cache"))
    assert len(data.train) == 300
    leftovers = [p.name for p in (tmp_path / "cache" / "corpora").iterdir()]
    assert all(not name.startswith(".tmp-") for name in leftovers)


def test_a_full_disk_while_tokenizing_is_one_line_and_keeps_nothing(toy, tmp_path, monkeypatch):
    import errno

    from attncli.core.errors import AttncliError

    def full(folder, *args, **kwargs):
        (folder / "tokens.arrow").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(data_cache, "_tokenize_into", full)
    with pytest.raises(AttncliError, match="cannot write the data cache .No space left"):
        _prepare(_config(toy, tmp_path / "cache"))
    kept = [p.name for p in (tmp_path / "cache" / "corpora").iterdir()]
    assert len(kept) == 1 and kept[0].endswith(".lock")  # the entry's lock file alone


def test_a_split_survives_pickling_for_spawned_workers(toy, tmp_path):
    import pickle

    data, _ = _prepare(_config(toy, tmp_path / "cache"))
    copy = pickle.loads(pickle.dumps(data.train))
    tokenizer = data.models.tokenizer()
    assert _ids(copy, tokenizer) == _ids(data.train, tokenizer)


# A builder of the cache entry FOLDER in another process: it takes the entry's lock, starts its
# staged folder, says "started", and ends its build when it reads a line (or is killed first).
_BUILDER = """
import sys
from pathlib import Path
from attncli.core.files import entry_lock, staged_folder
folder = Path(sys.argv[1])
with entry_lock(folder), staged_folder(folder) as staging:
    (staging / "content.txt").write_text("theirs")
    print("started", flush=True)
    sys.stdin.readline()
"""


def _builder(folder: Path) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", _BUILDER, str(folder)], text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdout.readline() == "started\n"
    return process


def test_a_shared_cache_entry_waits_for_a_live_builder_and_keeps_its_entry(tmp_path):
    """Several processes may build one cache entry at once (two runs started together): the
    second waits for the first (said once), never touches its staged folder, and keeps the
    entry it built instead of building its own."""
    from attncli.data.cache import write_entry

    folder, lines, built = tmp_path / "corpora" / "key", [], []
    folder.parent.mkdir()
    theirs = _builder(folder)
    staged = list(folder.parent.glob(f"{TEMP_PREFIX}key.*"))
    waiting = threading.Thread(target=write_entry, args=(folder, built.append, _intact,
                                                         lines.append))
    waiting.start()
    waiting.join(timeout=2)  # while theirs is still building
    assert waiting.is_alive() and lines == [f"waiting for another process that is building "
                                            f"{folder}"]
    assert len(staged) == 1 and staged[0].is_dir()
    theirs.communicate("done\n", timeout=60)
    waiting.join(timeout=60)
    assert not waiting.is_alive() and built == []
    assert (folder / "content.txt").read_text() == "theirs"


def test_what_a_killed_builder_left_is_cleared_by_the_next_build(tmp_path):
    """A builder killed midway leaves its staged folder and its lock file; the operating system
    released its lock, so the next build of that entry clears the folder and builds."""
    from attncli.data.cache import write_entry

    folder = tmp_path / "corpora" / "key"
    folder.parent.mkdir()
    killed = _builder(folder)
    killed.kill()
    killed.wait()
    assert len(list(folder.parent.glob(f"{TEMP_PREFIX}key.*"))) == 1
    write_entry(folder, lambda staging: (staging / "content.txt").write_text("ours"), _intact)
    assert (folder / "content.txt").read_text() == "ours"
    assert not list(folder.parent.glob(f"{TEMP_PREFIX}*"))


def _entry(folder: Path, text: str) -> None:
    folder.mkdir(parents=True)
    (folder / "content.txt").write_text(text)


def _intact(folder: Path) -> bool:
    return (folder / "content.txt").is_file()


def test_a_cache_entry_another_process_finished_meanwhile_is_kept(tmp_path):
    """The entry was deleted before the build and its builder's rename then failed with a
    traceback: now theirs is kept, and only a damaged one is replaced."""
    from attncli.data.cache import write_entry

    folder = tmp_path / "corpora" / "key"
    _entry(folder, "theirs, finished while we trained our tokenizer")
    write_entry(folder, lambda staging: (staging / "content.txt").write_text("ours"), _intact)
    assert (folder / "content.txt").read_text().startswith("theirs")
    shutil.rmtree(folder)

    def theirs_finishes_first(staging: Path) -> None:
        (staging / "content.txt").write_text("ours")
        _entry(folder, "theirs")  # another process renames its entry in while ours builds

    write_entry(folder, theirs_finishes_first, _intact)
    assert (folder / "content.txt").read_text() == "theirs"
    assert sorted(p.name for p in folder.parent.iterdir()) == [".key.lock", "key"]  # no temp

    (folder / "content.txt").unlink()  # damaged: replaced by ours
    write_entry(folder, lambda staging: (staging / "content.txt").write_text("ours"), _intact)
    assert (folder / "content.txt").read_text() == "ours"


def test_an_entry_lock_clears_its_own_entry_alone(tmp_path):
    """Exports `model` and `model.int8` side by side: each lock clears what killed builds of
    its own entry left, never the other's temp folders (its own lock keeps those)."""
    from attncli.core.files import entry_lock

    mine = [f"{TEMP_PREFIX}model.k3x_9zq1", f"{TEMP_PREFIX}model.0a1b2c3d.old",
            f"{TEMP_PREFIX}model.0a1b2c3d.removing"]
    others = [f"{TEMP_PREFIX}model.int8.k3x_9zq1", f"{TEMP_PREFIX}model.int8.0a1b2c3d.old"]
    for name in mine + others:
        (tmp_path / name).mkdir()
    with entry_lock(tmp_path / "model"):
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX))
    assert left == sorted(others)


def test_a_data_file_that_cannot_be_read_is_not_blamed_on_the_cache(tmp_path):
    """`fill` reads the data: its errors name the data file, not 'cannot write the data cache'
    (which a full cache disk still gets, as before)."""
    import errno

    from attncli.data.cache import write_entry

    data = tmp_path / "data" / "train.jsonl"

    def unreadable(staging: Path) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(data))

    with pytest.raises(PermissionError, match="train.jsonl"):
        write_entry(tmp_path / "cache" / "key", unreadable, _intact)

    def full(staging: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(staging / "tokens.arrow"))

    with pytest.raises(AttncliError, match="cannot write the data cache .No space left"):
        write_entry(tmp_path / "cache" / "key", full, _intact)
