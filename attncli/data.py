"""Find a parallel data set by name and read one split of it through Hugging Face `datasets`.

Where a name is looked up, in order:

1. an explicit path (a folder of split files, or one file);
2. ``$ATTNCLI_DATA_DIR/<name>``;
3. ``./data/<name>``;
4. the Hugging Face Hub (``multi30k`` means ``bentrevett/multi30k``, ``wmt14`` ``wmt/wmt14``;
   ``owner/name`` is passed through), with ``data.subset`` as the Hub's configuration name
   (``de-en``). A Hub download is saved as JSON Lines under ``./data/<name>[/<subset>]`` so the
   next run works offline; it is written to a temp folder and renamed only once every split is
   complete, so an interrupted download never passes for a data set.

With ``data.subset``, a local data set folder holds one folder per subset (``wmt14/de-en/``).
Rows are either flat (``{"en": ..., "de": ...}``) or in the Hub's translation layout
(``{"translation": {"de": ..., "en": ...}}``).

A folder counts as a data set only when it holds a split file. A single file is one split: it
can be the training data when ``data.val`` and ``data.test`` name the validation and test data,
so that validation BLEU, early stopping and ``eval`` never score the training pairs.

Local layouts, per split (``train``, ``val`` — also ``valid``/``dev``/``validation`` —, ``test``):
``<split>.jsonl`` (one object per line, one key per language), ``<split>.tsv`` (a header row
naming the languages), or plain parallel text ``<split>.<lang>``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from attncli.atomic import staged_folder
from attncli.config import DataConfig
from attncli.errors import AttncliError

HUB_ALIASES = {"multi30k": "bentrevett/multi30k", "wmt14": "wmt/wmt14", "wmt16": "wmt/wmt16",
               "iwslt2017": "IWSLT/iwslt2017", "opus_books": "Helsinki-NLP/opus_books"}
SPLIT_NAMES = {
    "train": ("train",),
    "val": ("val", "valid", "validation", "dev"),
    "test": ("test",),
}


@dataclass
class ParallelText:
    """One split of a parallel corpus: aligned source and target sentences."""

    src: list[str]
    tgt: list[str]
    name: str
    split: str
    dropped_empty: int = 0

    def __len__(self) -> int:
        return len(self.src)

    def head(self, limit: int | None) -> ParallelText:
        """The first `limit` pairs (all when None): quick experiments and tests."""
        if limit is None or limit >= len(self):
            return self
        return ParallelText(self.src[:limit], self.tgt[:limit], self.name, self.split,
                            self.dropped_empty)


def data_dirs() -> list[Path]:
    """The local folders searched for a data set, in order."""
    dirs = []
    if os.environ.get("ATTNCLI_DATA_DIR"):
        dirs.append(Path(os.environ["ATTNCLI_DATA_DIR"]))
    dirs.append(Path("data"))
    return dirs


def _local_candidates(name: str) -> list[Path]:
    return [Path(name), *(d / name for d in data_dirs())]


def _has_split_file(folder: Path) -> bool:
    stems = {stem for names in SPLIT_NAMES.values() for stem in names}
    return any(item.is_file() and item.name.split(".")[0] in stems for item in folder.iterdir())


def resolve_dataset(name: str, subset: str | None = None) -> Path:
    """A local folder or file holding the data set, downloading it from the Hub if needed."""
    looked = []
    for candidate in _local_candidates(name):
        if candidate.is_file():
            return candidate
        folder = candidate / subset if subset else candidate
        looked.append(str(folder))
        if folder.is_dir() and _has_split_file(folder):
            return folder
    named = Path(name)
    if subset and named.is_dir():  # a folder the user named: no Hub download to fall back on
        have = [item.name for item in sorted(named.iterdir())
                if item.is_dir() and _has_split_file(item)]
        raise AttncliError(f"{named}: no subset {subset!r} (data.subset; it has: "
                           f"{', '.join(have) or 'none'})")
    return _download_from_hub(name, subset, looked)


def check_training_sources(cfg: DataConfig) -> None:
    """A single-file training set needs data.val and data.test from elsewhere."""
    location = resolve_dataset(cfg.dataset, cfg.subset)
    missing = [key for key in ("val", "test") if getattr(cfg, key) is None]
    if location.is_file() and missing:
        raise AttncliError(
            f"{location}: a single file is training data only, so validation and test need "
            f"their own: set data.{missing[0]} (e.g. --set data.{missing[0]}=dev.jsonl), or put "
            f"train.jsonl, val.jsonl and test.jsonl in one folder and name that")


def _download_from_hub(name: str, subset: str | None, looked: list[str]) -> Path:
    hub_id = HUB_ALIASES.get(name, name if "/" in name else None)
    advice = (f"put {name}/train.jsonl (and val.jsonl, test.jsonl) in a data folder and set "
              f"ATTNCLI_DATA_DIR to it")
    if hub_id is None:
        raise AttncliError(f"data set {name!r} not found (looked in {', '.join(looked)}); "
                           f"{advice}, or name a Hub data set as owner/name")
    label = f"{hub_id} ({subset})" if subset else hub_id
    target = Path("data") / name.replace("/", "__") / (subset or "")
    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()
    if target.exists():
        raise AttncliError(f"{target} exists but holds no data set (no train/val/test file); "
                           f"remove it to download {label} again")
    try:
        _save_hub_copy(hub_id, subset, target)
    except Exception as err:  # network, auth, missing repo or subset: all end the same way
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise AttncliError(f"data set {name!r} not found locally (looked in {', '.join(looked)}) "
                           f"and the Hub copy {label} could not be loaded ({reason}); nothing "
                           f"was kept; {advice}") from None
    return target


def _save_hub_copy(hub_id: str, subset: str | None, target: Path) -> None:
    """Download every split as JSON Lines into a temp folder that becomes `target` when done."""
    import datasets

    remote = datasets.load_dataset(hub_id, subset)
    with staged_folder(target) as folder:
        for split, ds in remote.items():
            canonical = next((k for k, names in SPLIT_NAMES.items() if split in names), split)
            ds.to_json(str(folder / f"{canonical}.jsonl"), force_ascii=False)


def _check_utf8(path: Path) -> None:
    """Non-UTF-8 bytes are an error naming the file and line (before `datasets` sees them)."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise AttncliError(f"{path}: line {line}: not valid UTF-8 ({err.reason})") from None


def _split_file(folder: Path, split: str, suffixes: tuple[str, ...]) -> Path | None:
    for stem in SPLIT_NAMES.get(split, (split,)):
        for suffix in suffixes:
            if (folder / f"{stem}{suffix}").is_file():
                return folder / f"{stem}{suffix}"
    return None


def _load_columns(location: Path, split: str, src: str, tgt: str) -> tuple[list, list]:
    """Read the two language columns of one split with a `datasets` builder (cached, mmapped)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    folder = location if location.is_dir() else location.parent
    if location.is_file():
        table_file = location
    else:
        table_file = _split_file(folder, split, (".jsonl", ".json", ".tsv"))
    if table_file is not None:
        _check_utf8(table_file)
        if table_file.suffix == ".tsv":
            ds = datasets.load_dataset("csv", data_files=str(table_file), delimiter="\t",
                                       split="train", quoting=3, keep_default_na=False)
        else:
            ds = datasets.load_dataset("json", data_files=str(table_file), split="train")
        return _language_columns(ds, table_file, src, tgt)
    text_files = [_split_file(folder, split, (f".{lang}",)) for lang in (src, tgt)]
    if all(text_files):
        columns = []
        for path in text_files:
            _check_utf8(path)
            ds = datasets.load_dataset("text", data_files=str(path), split="train",
                                       keep_linebreaks=False)
            columns.append(ds["text"])
        if len(columns[0]) != len(columns[1]):
            raise AttncliError(f"{text_files[0]} and {text_files[1]} have different line counts "
                               f"({len(columns[0])} vs {len(columns[1])})")
        return columns[0], columns[1]
    found = sorted(p.name for p in folder.iterdir())[:8]
    raise AttncliError(f"{folder}: no {split} split for {src}-{tgt} (expected {split}.jsonl, "
                       f"{split}.tsv or {split}.{src} + {split}.{tgt}; found {', '.join(found)})")


def _language_columns(ds, source: Path, src: str, tgt: str) -> tuple[list, list]:
    """The two languages' columns, from flat rows or the Hub's nested `translation` dicts."""
    prefix = ""
    if "translation" in ds.column_names and not {src, tgt} <= set(ds.column_names):
        ds, prefix = ds.flatten(), "translation."  # Arrow struct -> translation.<lang> columns
    have = [c.removeprefix(prefix) for c in ds.column_names if c.startswith(prefix)]
    missing = [lang for lang in (src, tgt) if lang not in have]
    if missing:
        raise AttncliError(f"{source}: no language {missing[0]!r} in this data set "
                           f"(it has: {', '.join(have)})")
    return ds[prefix + src], ds[prefix + tgt]


def load_split(cfg: DataConfig, split: str) -> ParallelText:
    """One split of the configured data set; empty and whitespace-only pairs are dropped.

    `data.val` / `data.test`, when set, name where the val / test split comes from.
    """
    own_source = {"val": cfg.val, "test": cfg.test}.get(split)
    name = own_source or cfg.dataset
    location = resolve_dataset(name, None if own_source else cfg.subset)
    if location.is_file() and own_source is None and split != "train":
        raise AttncliError(f"{location}: a single file has no {split} split; set data.{split} "
                           f"to the {split} data (or, for eval, pass --data FILE)")
    src_col, tgt_col = _load_columns(location, split, cfg.src, cfg.tgt)
    src, tgt = [], []
    for s, t in zip(src_col, tgt_col, strict=True):
        s, t = (s or "").strip(), (t or "").strip()
        if s and t:
            src.append(s)
            tgt.append(t)
    if not src:
        raise AttncliError(f"{location}: the {split} split of {name} has no non-empty "
                           f"{cfg.src}-{cfg.tgt} pairs")
    return ParallelText(src, tgt, name, split, dropped_empty=len(src_col) - len(src))
