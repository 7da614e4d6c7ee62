"""The data cache: tokenized splits (and the tokenizers of corpus.py) made once, reused by every
run over the same data.

    <cache>/tokenizers/<key>/             a tokenizer trained on a sample of a training split
                                          (corpus.py)
    <cache>/corpora/<key>/manifest.json   a tokenized split: its key, rows, files and sizes
    <cache>/corpora/<key>/tokens*.arrow   src_ids, tgt_ids, src_len, tgt_len, one row a pair

A key is a hash of everything an entry's contents depend on, so a second run over the same data
reuses the entry and a changed input gets a new one. A tokenized split's key hashes the data
files' identity (paths, sizes, modification and change times), the split, the language pair,
the tokenizer model's bytes, data.max_len and the row limit. An entry is written into a temp
folder that is renamed when complete, so a reader never sees half of one, and it is checked
against its manifest when opened: a partial or corrupt one is reported as missing, so it is
rebuilt, never trusted.

Why Arrow and not Python lists: a list of ints costs about 36 bytes a token, so WMT14's 4.5
million pairs did not fit in memory; the table holds a token in 2 bytes, on disk, paged in by
the operating system as batches touch it. Tokenizing runs in `data.num_proc` processes through
`datasets.Dataset.map`, which writes the Arrow files training maps.

Three parts, in the order an entry is made and read: the cache's entries (where, keys,
writing one), reading a tokenized split, and tokenizing a split into the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attncli.core.config import DataConfig, FilterConfig
from attncli.core.errors import AttncliError
from attncli.core.files import (
    atomic_write_json,
    check_writable,
    entry_lock,
    remove_folder,
    staged_folder,
)
from attncli.data.batching import Batch, collate_flat
from attncli.data.filters import KEPT, PairFilter, filter_counts, repeated_pairs
from attncli.data.sources import SplitSource
from attncli.data.tokenizer import TokenizerModels

if TYPE_CHECKING:  # for the hints only: `datasets` is imported where a split is read
    from datasets import Dataset


# --------------------------------------------------------------------------------------------
# The cache's entries: where the cache is, what names an entry, how one is written
# --------------------------------------------------------------------------------------------


CACHE_FORMAT = 1


def _remove_damaged(folder: Path) -> None:
    """Remove a damaged entry; another process removing it too is no error."""
    with contextlib.suppress(FileNotFoundError):
        remove_folder(folder)


def cache_root(cfg: DataConfig) -> Path:
    """data.cache_dir, else $ATTNCLI_CACHE_DIR, else $XDG_CACHE_HOME/attncli (~/.cache)."""
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    if os.environ.get("ATTNCLI_CACHE_DIR"):
        return Path(os.environ["ATTNCLI_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "attncli"


def check_cache_writable(folder: Path) -> None:
    """`folder` (the cache's tokenizers/ or corpora/) can take a new entry: checked before the
    work that fills one, as a read-only or misplaced cache otherwise fails only after it."""
    check_writable(folder, "the data cache",
                   "set data.cache_dir or $ATTNCLI_CACHE_DIR to a writable folder")


def cache_key(parts: dict[str, Any]) -> str:
    """The entry name for `parts`: everything the entry's contents depend on, hashed."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def write_entry(folder: Path, fill: Callable[[Path], None],
                intact: Callable[[Path], bool], log: Callable[[str], None] | None = None) -> None:
    """`fill` a temp folder that becomes the cache entry `folder` in one rename.

    Built under the entry's lock (`files.entry_lock`: several processes may start at once, and
    they take turns; `log` says a wait), which clears what killed builds left. An entry there
    once the lock is ours is kept if it is `intact` (another process built it meanwhile: the
    build takes minutes) and replaced if it is damaged. Anything else the disk refuses is one
    line, and nothing is kept; an error reading a file outside the cache (`fill` reads the
    data) is that file's, not the cache's, and passes on as it is.
    """
    try:
        with entry_lock(folder, log):
            if folder.exists() and intact(folder):
                return
            with staged_folder(folder) as staging:
                fill(staging)
                if folder.exists() and not intact(folder):
                    _remove_damaged(folder)
    except OSError as err:
        cache = Path(os.path.abspath(folder.parent))
        if err.filename and cache not in Path(os.path.abspath(err.filename)).parents:
            raise
        if not (folder.is_dir() and intact(folder)):
            raise AttncliError(f"{folder.parent}: cannot write the data cache "
                               f"({err.strerror or err}); nothing was kept") from None


# --------------------------------------------------------------------------------------------
# A tokenized split as training reads it: an entry's Arrow files, memory-mapped
# --------------------------------------------------------------------------------------------


COLUMNS = ("src_ids", "tgt_ids", "src_len", "tgt_len")
FILTERED = "dropped"  # the column of a filtered split: each pair's drop code (data/filters.py)


class MappedTable:
    """The Arrow files of one cache entry, mapped read-only, with zero-copy numpy views of the
    token columns (per record batch: list offsets and values)."""

    def __init__(self, files: list[Path]):
        import pyarrow as pa

        self.files = files
        self.maps = []
        for path in files:
            with open(path, "rb") as f:
                self.maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
        self.table = pa.concat_tables(pa.ipc.open_stream(pa.py_buffer(m)).read_all()
                                      for m in self.maps)
        sizes = [len(chunk) for chunk in self.table.column("src_ids").chunks]
        self.chunk_starts = np.cumsum([0, *sizes])
        self.views = {name: [(chunk.offsets.to_numpy(), chunk.values.to_numpy())
                             for chunk in self.table.column(name).chunks]
                      for name in ("src_ids", "tgt_ids")}

    def __reduce__(self):
        """Pickled as its file names (a DataLoader worker started by spawn maps them anew)."""
        return MappedTable, (self.files,)

    def gather(self, name: str, rows: np.ndarray) -> np.ndarray:
        """The ids of `rows` in column `name`, back to back."""
        chunks = np.searchsorted(self.chunk_starts, rows, side="right") - 1
        views = self.views[name]
        parts = []
        for chunk, row in zip(chunks.tolist(), (rows - self.chunk_starts[chunks]).tolist(),
                              strict=True):
            offsets, values = views[chunk]
            parts.append(values[offsets[row] : offsets[row + 1]])
        return np.concatenate(parts)

    def release_pages(self) -> None:
        """Unmap the pages read so far; the next read maps them again from the page cache.

        Why: a batch's rows lie all over the file, and every read maps 64 KiB around it, so
        within an epoch the whole file (about 1 GB for WMT14) counted as this process's resident
        memory although it only ever needed a few pages at a time.
        """
        if hasattr(mmap, "MADV_DONTNEED"):  # not on Windows
            for mapped in self.maps:
                mapped.madvise(mmap.MADV_DONTNEED)


class TokenizedSplit:
    """The pairs of one split that training uses, read from a cached Arrow table.

    src_lens: (pairs,) int32  source ids with EOS;  tgt_lens: (pairs,) int32  bare target ids.
    Pair i is table row `rows[i]`; empty pairs, pairs longer than max_len and pairs a filter
    dropped (`dropped_by`: the count of each, for a filtered split) are left out.
    """

    def __init__(self, mapped: MappedTable, manifest: dict, folder: Path):
        self.mapped, self.manifest, self.folder = mapped, manifest, folder
        src_len = mapped.table.column("src_len").to_numpy()
        tgt_len = mapped.table.column("tgt_len").to_numpy()
        empty = (src_len == 0) | (tgt_len == 0)
        too_long = (src_len > manifest["max_len"]) | (tgt_len + 1 > manifest["max_len"])
        kept = ~empty & ~too_long
        self.dropped_by: dict[str, int] = {}
        if FILTERED in mapped.table.column_names:
            codes = mapped.table.column(FILTERED).to_numpy()
            self.dropped_by = filter_counts(codes)
            kept &= codes == KEPT
        self.rows = np.flatnonzero(kept)
        self.src_lens, self.tgt_lens = src_len[self.rows], tgt_len[self.rows]
        self.dropped_empty = int(empty.sum())
        self.dropped_long = int((too_long & ~empty).sum())
        mapped.release_pages()

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def pairs_read(self) -> int:
        """The split's stored pairs, dropped ones included."""
        return self.mapped.table.num_rows

    def token_ids(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The source and target ids of `pairs` (positions in this split), each back to back."""
        rows = self.rows[pairs]
        return self.mapped.gather("src_ids", rows), self.mapped.gather("tgt_ids", rows)

    def occurrences(self, column: str, token: int) -> tuple[int, int, np.ndarray]:
        """How often `token` is among the ids of `column` (src_ids or tgt_ids) of the pairs
        training uses, of how many ids, and the stored rows that hold it: read chunk by chunk
        from the mapped columns, no pair gathered (dropped pairs are stored without ids)."""
        found, total, rows = 0, 0, [np.zeros(0, dtype=np.int64)]
        for start, (offsets, values) in zip(self.mapped.chunk_starts, self.mapped.views[column],
                                            strict=False):  # chunk_starts ends with the total
            hits = np.flatnonzero(values[offsets[0] : offsets[-1]] == token) + offsets[0]
            found, total = found + len(hits), total + int(offsets[-1] - offsets[0])
            rows.append(start + np.searchsorted(offsets, hits, side="right") - 1)
        self.mapped.release_pages()
        return found, total, np.unique(np.concatenate(rows))

    def collate(self, pairs: np.ndarray, multiple: int = 1) -> Batch:
        """The padded batch of pairs `pairs` (positions in this split)."""
        src_ids, tgt_ids = self.token_ids(pairs)
        batch = collate_flat(src_ids, self.src_lens[pairs], tgt_ids, self.tgt_lens[pairs],
                             multiple=multiple)
        self.mapped.release_pages()
        return batch


def open_entry(folder: Path, key: str) -> TokenizedSplit | None:
    """The cached table in `folder`, or None when it is missing, partial or not as recorded."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text("utf-8"))
        if manifest.get("key") != key:
            return None
        files = [folder / entry["name"] for entry in manifest["files"]]
        if any(path.stat().st_size != entry["bytes"]
               for path, entry in zip(files, manifest["files"], strict=True)):
            return None
        mapped = MappedTable(files)
        if mapped.table.num_rows != manifest["rows"] or mapped.table.column_names not in (
                [*COLUMNS], [*COLUMNS, FILTERED]):
            return None
    except (OSError, ValueError, KeyError, TypeError):  # pyarrow's errors are ValueErrors too
        return None
    return TokenizedSplit(mapped, manifest, folder)


# --------------------------------------------------------------------------------------------
# Tokenizing a split into the cache, or finding it there already tokenized
# --------------------------------------------------------------------------------------------


# Below this many pairs a split is tokenized in one process: starting workers costs more.
ROWS_PER_PROCESS = 50_000

Log = Callable[[str], None]


def first_rows(ds: Dataset, limit: int | None) -> Dataset:
    """The first `limit` rows of a `datasets.Dataset` (all of them without a limit)."""
    return ds.select(range(limit)) if limit is not None and limit < len(ds) else ds


def _id_type(models: TokenizerModels) -> str:
    """uint16 ids (2 bytes a token) unless a vocabulary is larger than that holds."""
    tokenizer = models.tokenizer()
    return "uint16" if max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) <= 1 << 16 \
        else "int32"


def _features(id_type: str, filtered: bool):
    import datasets

    ids = datasets.Value(id_type)
    return datasets.Features({"src_ids": datasets.Sequence(ids),
                              "tgt_ids": datasets.Sequence(ids),
                              "src_len": datasets.Value("int32"),
                              "tgt_len": datasets.Value("int32"),
                              **({FILTERED: datasets.Value("uint8")} if filtered else {})})


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
    their lengths but no ids, so the counts of both stay known without a second pass; with
    filters (`pair_filter`), the pairs they drop keep no ids either, and a column of drop codes
    says why. The columns are returned as Arrow arrays: letting `datasets` convert lists of
    Python ints took a third of the time.
    """

    def __init__(self, models: TokenizerModels, max_len: int, id_type: str,
                 pair_filter: PairFilter | None = None):
        self.models, self.max_len, self.id_type = models, max_len, id_type
        self.pair_filter = pair_filter
        self._tokenizer = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}

    def __call__(self, batch: dict):
        """Rows with src and tgt texts -> a `pyarrow.Table` of ids and lengths."""
        import pyarrow as pa

        if self._tokenizer is None:
            self._tokenizer = self.models.tokenizer()
        src_texts = [(text or "").strip() for text in batch["src"]]
        tgt_texts = [(text or "").strip() for text in batch["tgt"]]
        src_ids = self._tokenizer.encode_src(src_texts)
        tgt_ids = self._tokenizer.encode_tgt(tgt_texts)
        empty = np.array([not (s and t) for s, t in zip(src_texts, tgt_texts, strict=True)],
                         dtype=bool)
        src_len = np.where(empty, 0, [len(ids) for ids in src_ids]).astype(np.int32)
        tgt_len = np.where(empty, 0, [len(ids) for ids in tgt_ids]).astype(np.int32)
        keep = ~empty & (src_len <= self.max_len) & (tgt_len + 1 <= self.max_len)
        columns = {}
        if self.pair_filter is not None:
            repeated = np.asarray(batch["repeated"], dtype=bool) if "repeated" in batch else None
            codes = self.pair_filter.codes(src_texts, tgt_texts, src_len - 1, tgt_len,
                                           repeated=repeated)
            codes[~keep] = KEPT  # empty and long pairs are counted as such, not as filtered
            keep &= codes == KEPT
            columns[FILTERED] = pa.array(codes)
        return pa.table({"src_ids": _list_array(src_ids, src_len, keep, self.id_type),
                         "tgt_ids": _list_array(tgt_ids, tgt_len, keep, self.id_type),
                         "src_len": pa.array(src_len), "tgt_len": pa.array(tgt_len),
                         **columns})


def _corpus_key(source: SplitSource, models: TokenizerModels, *, max_len: int,
                limit: int | None, filters: dict[str, Any]) -> str:
    """The entry's key; filters join it only when some are on, so an unfiltered split keeps
    the key it had before filters existed (and the entries made then)."""
    return cache_key({"format": CACHE_FORMAT, "data": source.identity(), "split": source.split,
                      "languages": [source.src, source.tgt], "rows": limit, "max_len": max_len,
                      "tokenizer": models.digests(), **({"filters": filters} if filters else {})})


def _tokenize_into(folder: Path, key: str, source: SplitSource, models: TokenizerModels, *,
                   data_cfg: DataConfig, limit: int | None, filters: dict[str, Any]) -> None:
    """Tokenize the split into the (empty) folder `folder`: Arrow files and their manifest."""
    ds = first_rows(source.rows, limit)
    procs = max(1, min(data_cfg.num_proc or os.cpu_count() or 1, len(ds) // ROWS_PER_PROCESS))
    id_type = _id_type(models)
    pair_filter = PairFilter(filters, source.src, source.tgt) if filters else None
    if "duplicates" in filters:  # over the whole split, before it is cut between processes
        ds = ds.add_column("repeated", repeated_pairs(ds["src"], ds["tgt"]).tolist())
    table = ds.map(_PairEncoder(models, data_cfg.max_len, id_type, pair_filter), batched=True,
                   batch_size=1000, num_proc=procs if procs > 1 else None,
                   remove_columns=ds.column_names, features=_features(id_type, bool(filters)),
                   load_from_cache_file=False, cache_file_name=str(folder / "tokens.arrow"),
                   desc=None)
    files = [Path(entry["filename"]) for entry in table.cache_files]
    atomic_write_json(folder / "manifest.json", {
        "key": key, "format": CACHE_FORMAT, "rows": len(table), "max_len": data_cfg.max_len,
        "source": source.identity(), "split": source.split, "processes": procs,
        **({"filters": filters} if filters else {}),
        "files": [{"name": path.name, "bytes": path.stat().st_size} for path in files]})


def tokenized_split(source: SplitSource, models: TokenizerModels, data_cfg: DataConfig, *,
                    limit: int | None, root: Path, log: Log,
                    filters: FilterConfig | None = None) -> TokenizedSplit:
    """The split tokenized with `models` (and `filters` applied: training splits only): from
    the cache when an intact entry exists, else tokenized now with `data.num_proc` processes
    and cached."""
    active = filters.active() if filters is not None else {}
    key = _corpus_key(source, models, max_len=data_cfg.max_len, limit=limit, filters=active)
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
    write_entry(folder, lambda staging: _tokenize_into(staging, key, source, models,
                                                        data_cfg=data_cfg, limit=limit,
                                                        filters=active),
                intact=lambda entry: open_entry(entry, key) is not None, log=log)
    split = open_entry(folder, key)
    if split is None:
        raise AttncliError(f"{folder}: the token cache just written does not read back; is "
                           f"the disk full?")
    log(f"cache: tokenized the {source.split} split ({len(split):,} pairs) in "
        f"{time.perf_counter() - started:.1f} s with {split.manifest['processes']} process(es) "
        f"-> {folder}")
    return split
