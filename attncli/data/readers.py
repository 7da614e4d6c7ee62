"""Reading one split's files into a `datasets.Dataset` of two string columns, src and tgt.

Kept apart from ``sources.py`` (which finds a data set and the files of its splits) because this
is about file formats: JSON Lines, TSV with a header row, and plain parallel text, each checked
for what would silently spoil a corpus before `datasets` parses it.

* Every read makes `datasets`' Arrow copy of the file afresh (``force_redownload``): the library
  keys that copy on the file's path and modification time only, so a file replaced by another
  content with the same time (``cp -p``, ``rsync -a``, an unpacked archive) was read stale.
  attncli reads a training split only to build its own token cache, keyed on more.
* A carriage return inside a line of a TSV or text file is refused: both readers take a lone
  ``\\r`` for a line end, which splits that line in two and pairs every later line with the
  wrong one.
* A TSV row with a field missing, a JSON line that is not an object (``null`` included), a
  JSON row without one of the languages (a row missing its key, or nested in ``translation``
  where the file's rows are flat): one line naming the file and the line. The reader would
  have filled those with nulls, which pass for empty pairs.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attncli.core.errors import AttncliError
from attncli.core.files import check_writable

LONE_CR = re.compile(rb"\r(?!\n)")
# load_dataset's arguments for a read that never reuses the library's copy of the file
FRESH = {"download_mode": "force_redownload", "verification_mode": "no_checks"}


def read_split_files(files: tuple[Path, ...], src: str, tgt: str):
    """One table file (.jsonl/.json/.tsv) or two text files (one per language) as a
    memory-mapped `datasets.Dataset` with columns src and tgt; rows as stored, empty ones
    included."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(logging.CRITICAL)  # its errors become ours, one line
    # Each read writes an Arrow copy there: an unwritable one failed as if the file were bad.
    check_writable(Path(datasets.config.HF_DATASETS_CACHE), "the datasets library's cache",
                   "set HF_DATASETS_CACHE (or HF_HOME) to a writable folder")
    for path in files:
        check_text(path, lines_matter=len(files) == 2 or path.suffix == ".tsv")
    if len(files) == 1:
        (path,) = files
        if path.suffix == ".tsv":
            return _tsv(path, src, tgt)
        ds = _read(path, "json", locate=_first_bad_json_line)
        return _language_columns(ds, path, src, tgt)
    columns = [_read(path, "text", keep_linebreaks=False, encoding="utf-8-sig")
               for path in files]
    if len(columns[0]) != len(columns[1]):
        raise AttncliError(f"{files[0]} and {files[1]} have different line counts "
                           f"({len(columns[0])} vs {len(columns[1])})")
    return datasets.concatenate_datasets(
        [columns[0].rename_column("text", "src"), columns[1].rename_column("text", "tgt")],
        axis=1)


def _tsv(path: Path, src: str, tgt: str):
    """A TSV split, its rows checked to have the header's fields first (the reader fills a
    missing one with "", which would pass for an empty pair)."""

    _check_fields(path)
    ds = _read(path, "csv", delimiter="\t", quoting=3, keep_default_na=False,
               encoding="utf-8-sig")
    return _language_columns(ds, path, src, tgt)


def _check_fields(path: Path) -> None:
    """Every non-blank line of a TSV has as many tabs as its header."""
    with open(path, "rb") as f:
        tabs = f.readline().count(b"\t")
        for number, line in enumerate(f, 2):
            found = line.count(b"\t")
            if found != tabs and line.strip():
                what = "a field missing (a tab too few?)" if found < tabs else "a tab too many"
                raise AttncliError(f"{path}: line {number}: {what}; the header has "
                                   f"{tabs + 1} fields")


def check_text(path: Path, lines_matter: bool) -> None:
    """Non-UTF-8 bytes, and (where lines pair up) a lone carriage return, are an error naming
    the file and line, found before `datasets` sees the file.

    Read in blocks, so a corpus of gigabytes is checked without holding it in memory.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            if block.endswith(b"\r"):  # its \n may start the next block
                block += f.read(1)
            try:
                decoder.decode(block)
            except UnicodeDecodeError as err:
                line = lines_before + block.count(b"\n", 0, err.start) + 1
                raise AttncliError(f"{path}: line {line}: not valid UTF-8 ({err.reason})"
                                   ) from None
            if lines_matter and (lone := LONE_CR.search(block)):
                line = lines_before + block.count(b"\n", 0, lone.start()) + 1
                raise AttncliError(f"{path}: line {line}: a carriage return (\\r) inside the "
                                   "line, which would end it there and pair every later line "
                                   "with the wrong one; end lines with \\n or \\r\\n")
            lines_before += block.count(b"\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        raise AttncliError(f"{path}: ends inside a character: not valid UTF-8 ({err.reason})"
                           ) from None


def _first_bad_json_line(path: Path) -> str | None:
    """Where a JSON Lines file goes wrong, found line by line (only after a failed read)."""
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as err:
                return f"line {number}: not JSON ({getattr(err, 'msg', err)})"
            if not isinstance(value, dict):
                return f"line {number}: not a JSON object ({_json_kind(value)})"
    return None


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (an error names what it found)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kinds = {int: "a number", float: "a number", str: "a string", list: "a list",
             dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def _read(path: Path, kind: str, locate: Callable[[Path], str | None] | None = None,
          **options: Any) -> Any:
    """The data file `path` read afresh by `datasets`' `kind` builder (json, csv, text) with
    `options`; its failure (a malformed JSON line, a row with an extra tab: the library's
    exceptions vary) as one line naming the file, and the line when `locate` finds it."""
    import datasets

    if path.stat().st_size == 0:
        raise AttncliError(f"{path}: the file is empty")
    try:
        return datasets.load_dataset(kind, data_files=str(path), split="train", **options,
                                     **FRESH)
    except Exception as err:  # whatever the parser raised, the cause is in the file
        where = locate(path) if locate is not None else None
        if where is not None:
            raise AttncliError(f"{path}: {where}") from None
        cause = err.__cause__ or err
        reason = " ".join(str(cause).split())[:200] or type(cause).__name__
        raise AttncliError(f"{path}: cannot be read as a data file ({reason})") from None


def _language_columns(ds, source: Path, src: str, tgt: str):
    """The two languages as columns src and tgt, from flat rows or the Hub's nested
    `translation` dicts."""
    prefix = ""
    if "translation" in ds.column_names and not {src, tgt} <= set(ds.column_names):
        ds, prefix = ds.flatten(), "translation."  # Arrow struct -> translation.<lang> columns
    have = [c.removeprefix(prefix) for c in ds.column_names if c.startswith(prefix)]
    missing = [lang for lang in (src, tgt) if lang not in have]
    if missing:
        raise AttncliError(f"{source}: no language {missing[0]!r} in this data set "
                           f"(it has: {', '.join(have)})")
    for lang in (src, tgt):
        kind = getattr(ds.features[prefix + lang], "dtype", None)
        if kind not in ("string", "large_string", "null"):
            found = _first_line(source, prefix, lang,
                                lambda value: not isinstance(value, (str, NoText)))
            where = f", line {found[0]}" if found else ""
            what = f"{found[1]}" if found else (kind or "a structure")
            raise AttncliError(f"{source}{where}: the {lang!r} value is {what}, not text")
    for lang in (src, tgt):
        if ds.data.column(prefix + lang).null_count:
            found = _first_line(source, prefix, lang, lambda value: isinstance(value, NoText))
            where = f", line {found[0]}" if found else ""
            raise AttncliError(f"{source}{where}: no {lang!r} text in this row (a pair needs "
                               f"both sides, \"\" for an empty one; one layout per file: flat "
                               f"or nested in \"translation\")")
    ds = ds.select_columns([prefix + src, prefix + tgt])
    return ds.rename_columns({prefix + src: "src", prefix + tgt: "tgt"})


class NoText:
    """A row's language value that is missing or null (the reader makes both a null)."""


def _first_line(source: Path, prefix: str, lang: str,
                wrong: Callable[[Any], bool]) -> tuple[int, str] | None:
    """The first line of a JSON Lines file whose `lang` value (flat, or in its `translation`
    when `prefix` says the rows nest; a `NoText` where it has none) is `wrong`, and what that
    value is, for the error that names it (the reader only says the column's type). None for
    other formats."""
    if source.suffix != ".jsonl":
        return None
    with source.open(encoding="utf-8-sig", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            row = row if isinstance(row, dict) else {}  # a null line: a row of nulls
            if prefix:
                row = row.get("translation")
                row = row if isinstance(row, dict) else {}
            value = NoText() if row.get(lang) is None else row[lang]
            if wrong(value):
                return number, _json_kind(value)
    return None
