"""Tokenizing a split into the data cache, or finding it there already tokenized.

The entry's key (see `data_cache.py`) hashes the data files' paths, sizes and modification
times, the split, the language pair, the tokenizer model's bytes, data.max_len and the row
limit: a changed file or tokenizer gets a new entry. Tokenizing runs in `data.num_proc`
processes through `datasets.Dataset.map`, which writes the Arrow files `token_table.py` maps.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attncli.core.config import DataConfig
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_json
from attncli.data.data_cache import CACHE_FORMAT, cache_key, check_cache_writable, write_entry
from attncli.data.sources import SplitSource
from attncli.data.token_table import TokenizedSplit, open_entry
from attncli.data.tokenizer import tokenizer_from_bytes

if TYPE_CHECKING:  # for the hints only: `datasets` is imported where a split is read
    from datasets import Dataset

# Below this many pairs a split is tokenized in one process: starting workers costs more.
ROWS_PER_PROCESS = 50_000

Log = Callable[[str], None]


def first_rows(ds: Dataset, limit: int | None) -> Dataset:
    """The first `limit` rows of a `datasets.Dataset` (all of them without a limit)."""
    return ds.select(range(limit)) if limit is not None and limit < len(ds) else ds


def _id_type(models: dict[str | None, bytes]) -> str:
    """uint16 ids (2 bytes a token) unless a vocabulary is larger than that holds."""
    tokenizer = tokenizer_from_bytes(models)
    return "uint16" if max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) <= 1 << 16 \
        else "int32"


def _features(id_type: str):
    import datasets

    ids = datasets.Value(id_type)
    return datasets.Features({"src_ids": datasets.Sequence(ids),
                              "tgt_ids": datasets.Sequence(ids),
                              "src_len": datasets.Value("int32"),
                              "tgt_len": datasets.Value("int32")})


def _list_array(ids: list[list[int]], lengths: np.ndarray, keep: np.ndarray, id_type: str):
    """An Arrow list column: the kept rows' ids, an empty list for the others."""
    import pyarrow as pa

    kept_lengths = np.where(keep, lengths, 0)
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(kept_lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(
        row for row, kept in zip(ids, keep.tolist(), strict=True) if kept),
        dtype=id_type, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


class _PairEncoder:
    """Encodes a batch of rows for `Dataset.map`; picklable, so worker processes can run it.

    Every row gets an output row: empty pairs get lengths 0, pairs longer than `max_len` keep
    their lengths but no ids, so the counts of both stay known without a second pass. The
    columns are returned as Arrow arrays: letting `datasets` convert lists of Python ints took
    a third of the time.
    """

    def __init__(self, models: dict[str | None, bytes], max_len: int, id_type: str):
        self.models, self.max_len, self.id_type = models, max_len, id_type
        self._tokenizer = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}

    def __call__(self, batch: dict):
        """Rows with src and tgt texts -> a `pyarrow.Table` of ids and lengths."""
        import pyarrow as pa

        if self._tokenizer is None:
            self._tokenizer = tokenizer_from_bytes(self.models)
        src_texts = [(text or "").strip() for text in batch["src"]]
        tgt_texts = [(text or "").strip() for text in batch["tgt"]]
        src_ids = self._tokenizer.encode_src(src_texts)
        tgt_ids = self._tokenizer.encode_tgt(tgt_texts)
        empty = np.array([not (s and t) for s, t in zip(src_texts, tgt_texts, strict=True)],
                         dtype=bool)
        src_len = np.where(empty, 0, [len(ids) for ids in src_ids]).astype(np.int32)
        tgt_len = np.where(empty, 0, [len(ids) for ids in tgt_ids]).astype(np.int32)
        keep = ~empty & (src_len <= self.max_len) & (tgt_len + 1 <= self.max_len)
        return pa.table({"src_ids": _list_array(src_ids, src_len, keep, self.id_type),
                         "tgt_ids": _list_array(tgt_ids, tgt_len, keep, self.id_type),
                         "src_len": pa.array(src_len), "tgt_len": pa.array(tgt_len)})


def _digest(models: dict[str | None, bytes]) -> dict[str, str]:
    return {side or "joint": hashlib.sha256(data).hexdigest() for side, data in models.items()}


def _corpus_key(source: SplitSource, models: dict[str | None, bytes], max_len: int,
                limit: int | None) -> str:
    return cache_key({"format": CACHE_FORMAT, "data": source.identity(), "split": source.split,
                      "languages": [source.src, source.tgt], "rows": limit, "max_len": max_len,
                      "tokenizer": _digest(models)})


def _tokenize_into(folder: Path, key: str, source: SplitSource,
                   models: dict[str | None, bytes], data_cfg: DataConfig, limit: int | None
                   ) -> None:
    """Tokenize the split into the (empty) folder `folder`: Arrow files and their manifest."""
    ds = first_rows(source.rows, limit)
    procs = max(1, min(data_cfg.num_proc or os.cpu_count() or 1, len(ds) // ROWS_PER_PROCESS))
    id_type = _id_type(models)
    table = ds.map(_PairEncoder(models, data_cfg.max_len, id_type), batched=True,
                   batch_size=1000, num_proc=procs if procs > 1 else None,
                   remove_columns=ds.column_names, features=_features(id_type),
                   load_from_cache_file=False, cache_file_name=str(folder / "tokens.arrow"),
                   desc=None)
    files = [Path(entry["filename"]) for entry in table.cache_files]
    atomic_write_json(folder / "manifest.json", {
        "key": key, "format": CACHE_FORMAT, "rows": len(table), "max_len": data_cfg.max_len,
        "source": source.identity(), "split": source.split, "processes": procs,
        "files": [{"name": path.name, "bytes": path.stat().st_size} for path in files]})


def tokenized_split(source: SplitSource, models: dict[str | None, bytes], data_cfg: DataConfig,
                    limit: int | None, root: Path, log: Log) -> TokenizedSplit:
    """The split tokenized with `models`: from the cache when an intact entry exists, else
    tokenized now with `data.num_proc` processes and cached."""
    key = _corpus_key(source, models, data_cfg.max_len, limit)
    folder = root / "corpora" / key
    split = open_entry(folder, key)
    if split is not None:
        log(f"cache: reusing the tokenized {source.split} split ({len(split):,} pairs) from "
            f"{folder}")
        return split
    if folder.exists():
        log(f"cache: {folder} is incomplete or damaged; tokenizing again")
    check_cache_writable(folder.parent)  # before the tokenizing
    started = time.perf_counter()
    write_entry(folder, lambda staging: _tokenize_into(staging, key, source, models, data_cfg,
                                                        limit),
                intact=lambda entry: open_entry(entry, key) is not None)
    split = open_entry(folder, key)
    if split is None:
        raise AttncliError(f"{folder}: the token cache just written does not read back; is "
                           f"the disk full?")
    log(f"cache: tokenized the {source.split} split ({len(split):,} pairs) in "
        f"{time.perf_counter() - started:.1f} s with {split.manifest['processes']} process(es) "
        f"-> {folder}")
    return split
