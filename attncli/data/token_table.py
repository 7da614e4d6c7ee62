"""A tokenized split as training reads it: a cache entry's Arrow files, memory-mapped.

    <cache>/corpora/<key>/manifest.json   what the table is: its key, rows, files and sizes
    <cache>/corpora/<key>/tokens*.arrow   src_ids, tgt_ids, src_len, tgt_len, one row a pair

Why Arrow and not Python lists: a list of ints costs about 36 bytes a token, so WMT14's 4.5
million pairs did not fit in memory; the table holds a token in 2 bytes, on disk, paged in by
the operating system as batches touch it. An entry is checked against its manifest when
opened: a partial or corrupt one is reported as missing, so it is rebuilt, never trusted.
"""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np

from attncli.data.batching import Batch, collate_flat

COLUMNS = ("src_ids", "tgt_ids", "src_len", "tgt_len")


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
    Pair i is table row `rows[i]`; empty pairs and pairs longer than max_len are left out.
    """

    def __init__(self, mapped: MappedTable, manifest: dict, folder: Path):
        self.mapped, self.manifest, self.folder = mapped, manifest, folder
        src_len = mapped.table.column("src_len").to_numpy()
        tgt_len = mapped.table.column("tgt_len").to_numpy()
        empty = (src_len == 0) | (tgt_len == 0)
        too_long = (src_len > manifest["max_len"]) | (tgt_len + 1 > manifest["max_len"])
        self.rows = np.flatnonzero(~empty & ~too_long)
        self.src_lens, self.tgt_lens = src_len[self.rows], tgt_len[self.rows]
        self.dropped_empty = int(empty.sum())
        self.dropped_long = int((too_long & ~empty).sum())
        mapped.release_pages()

    def __len__(self) -> int:
        return len(self.rows)

    def collate(self, pairs: np.ndarray, multiple: int = 1) -> Batch:
        """The padded batch of pairs `pairs` (positions in this split)."""
        rows = self.rows[pairs]
        batch = collate_flat(self.mapped.gather("src_ids", rows), self.src_lens[pairs],
                             self.mapped.gather("tgt_ids", rows), self.tgt_lens[pairs], multiple)
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
        if mapped.table.num_rows != manifest["rows"] or mapped.table.column_names != [
                *COLUMNS]:
            return None
    except (OSError, ValueError, KeyError, TypeError):  # pyarrow's errors are ValueErrors too
        return None
    return TokenizedSplit(mapped, manifest, folder)
