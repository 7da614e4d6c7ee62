"""Find a parallel data set by name and read one split of it through Hugging Face `datasets`.

Where a name is looked up, in order:

1. an explicit path (a folder of split files, or one file);
2. ``$ATTNCLI_DATA_DIR/<name>``;
3. ``./data/<name>``;
4. the Hugging Face Hub (``multi30k`` means ``bentrevett/multi30k``, ``wmt14`` ``wmt/wmt14``;
   ``owner/name`` is passed through), with ``data.subset`` as the Hub's configuration name
   (``de-en``). ``tatoeba-en-de`` and ``tatoeba-en-zh`` mean
   ``sentence-transformers/parallel-sentences-tatoeba``, whose columns and splits differ from
   attncli's: ``HUB_LAYOUTS`` says how they map, in one place. A Hub download is
   saved as JSON Lines under ``./data/<name>[/<subset>]`` so the
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

import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from attncli.core.config import DataConfig
from attncli.core.errors import AttncliError
from attncli.core.files import staged_folder
from attncli.core.text import converted_sides
from attncli.data.chinese_script import convert_columns, converter_version, simplifier
from attncli.data.readers import read_split_files

HUB_ALIASES = {"multi30k": "bentrevett/multi30k", "wmt14": "wmt/wmt14", "wmt16": "wmt/wmt16",
               "iwslt2017": "IWSLT/iwslt2017", "opus_books": "Helsinki-NLP/opus_books"}


@dataclass(frozen=True)
class HubLayout:
    """A Hub data set whose columns and splits are not attncli's, and how they become attncli's
    (the copy saved under ./data is then in the local layout, like a local folder's)."""

    hub_id: str
    config: str                # the Hub's configuration name
    columns: dict[str, str]    # Hub column -> language key; the first is the source
    pooled: tuple[str, ...]    # the Hub splits whose pairs are pooled, then split anew
    held_out: int              # distinct source sentences in each of val and test

    @property
    def label(self) -> str:
        return f"{self.hub_id} ({self.config})"


# Names whose Hub copy needs a `HubLayout` (with data.subset unset). Tatoeba as
# sentence-transformers exports it: plain Parquet files, a train and a dev split of one
# translation per row (an English sentence with several translations has several rows), no
# test split; the shared tatoeba-en-de folder was split from manythings.org's export by the same
# rule (its README).
_TATOEBA = "sentence-transformers/parallel-sentences-tatoeba"
HUB_LAYOUTS = {
    f"tatoeba-en-{lang}": HubLayout(_TATOEBA, f"en-{lang}",
                                    columns={"english": "en", "non_english": lang},
                                    pooled=("train", "dev"), held_out=1000)
    for lang in ("de", "zh")
}
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
    rows: list[int] = field(default_factory=list)  # each pair's row in the stored split

    def __len__(self) -> int:
        return len(self.src)


def data_dirs() -> list[Path]:
    """The local folders searched for a data set, in order."""
    dirs = []
    if os.environ.get("ATTNCLI_DATA_DIR"):
        dirs.append(Path(os.environ["ATTNCLI_DATA_DIR"]))
    dirs.append(Path("data"))
    return dirs


def _local_candidates(name: str) -> list[Path]:
    """Where a data set may be: the name as a path, in each data folder, and (for a Hub id)
    the copy its download kept."""
    return [Path(name).expanduser(), *(d / name for d in data_dirs()),
            *([_hub_copy(name)] if "/" in name else [])]


def _hub_copy(name: str) -> Path:
    """Where a download from the Hub is kept: data/<owner>__<name> (one folder, no owner
    folder that a local data set of that name could be mistaken for)."""
    return Path("data") / name.replace("/", "__")


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
        if subset and candidate.is_dir() and _has_split_file(candidate):
            raise AttncliError(f"{candidate}: this data set has no subsets (its splits are "
                               f"files here), so data.subset {subset!r} cannot be found; set "
                               f"data.subset to null")
    named = Path(name).expanduser()
    if named.is_dir():  # a folder the user named is local: never a Hub id, never merged
        have = [item.name for item in sorted(named.iterdir())
                if item.is_dir() and _has_split_file(item)]
        if subset:
            raise AttncliError(f"{named}: no subset {subset!r} (data.subset; it has: "
                               f"{', '.join(have) or 'none'})")
        raise AttncliError(f"{named}: no train, val or test file here"
                           + (f"; it has subsets {', '.join(have)}: name one (data.subset, "
                              f"or its folder)" if have else ""))
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
    if name.startswith(("/", ".", "~")) or name.endswith((".jsonl", ".json", ".tsv", ".txt")):
        raise AttncliError(f"{name}: no such file or folder")  # a path, not a Hub id
    layout = HUB_LAYOUTS.get(name) if subset is None else None
    hub_id = layout.hub_id if layout else HUB_ALIASES.get(name, name if "/" in name else None)
    folder = f"{name}/{subset}" if subset else name
    advice = (f"put {folder}/train.jsonl (and val.jsonl, test.jsonl) in a data folder and set "
              f"ATTNCLI_DATA_DIR to it")
    if hub_id is None:
        raise AttncliError(f"data set {name!r} not found (looked in {', '.join(looked)}); "
                           f"{advice}, or name a Hub data set as owner/name")
    label = layout.label if layout else f"{hub_id} ({subset})" if subset else hub_id
    advice = f"run once where the Hugging Face Hub is reachable (the copy is kept), or {advice}"
    target = _hub_copy(name) / (subset or "")
    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()
    if target.exists():
        raise AttncliError(f"{target} exists but holds no data set (no train/val/test file); "
                           f"remove it to download {label} again")
    try:
        _save_hub_copy(hub_id, subset, target, layout)
    except Exception as err:  # network, auth, missing repo or subset: all end the same way
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise AttncliError(f"data set {name!r} not found locally (looked in {', '.join(looked)}) "
                           f"and the Hub copy {label} could not be loaded ({reason}); nothing "
                           f"was kept; {advice}") from None
    return target


def _save_hub_copy(hub_id: str, subset: str | None, target: Path,
                   layout: HubLayout | None = None) -> None:
    """Download every split as JSON Lines into a temp folder that becomes `target` when done."""
    import datasets
    import huggingface_hub

    huggingface_hub.utils.logging.set_verbosity_error()  # no retry chatter: one error line
    if layout is None:
        splits = dict(datasets.load_dataset(hub_id, subset).items())
    else:
        splits = _arranged(datasets.load_dataset(hub_id, layout.config), layout)
    with staged_folder(target) as folder:
        for split, ds in splits.items():
            canonical = next((k for k, names in SPLIT_NAMES.items() if split in names), split)
            ds.to_json(str(folder / f"{canonical}.jsonl"), force_ascii=False)


def _arranged(remote, layout: HubLayout) -> dict:
    """train, val and test in attncli's layout from the splits of a `HubLayout`'s data set.

    The pooled splits' pairs are split by source sentence (stripped): val gets every pair of
    the `held_out` distinct sentences whose SHA-256 sorts first, test those of the next
    `held_out`, train the rest, so no source sentence is in two splits. The choice depends on
    the sentences, not on their order or on a random state. val and test are written in that
    hash order, so their first N pairs are a fair sample (`data.valid_limit`); exports are often
    sorted by length. train keeps the export's order.
    """
    import datasets

    for split in layout.pooled:
        if split not in remote:
            raise ValueError(f"no {split!r} split (it has: {', '.join(remote)})")
        if missing := [c for c in layout.columns if c not in remote[split].column_names]:
            raise ValueError(f"its {split} split has no column {missing[0]!r} (it has: "
                             f"{', '.join(remote[split].column_names)})")
    pool = datasets.concatenate_datasets([
        remote[split].select_columns(list(layout.columns)).rename_columns(layout.columns)
        for split in layout.pooled])
    sentences = [(s or "").strip() for s in pool[next(iter(layout.columns.values()))]]
    ranked = sorted(set(sentences), key=lambda s: hashlib.sha256(s.encode("utf-8")).digest())
    rank = {s: i for i, s in enumerate(ranked[:2 * layout.held_out])}
    held = sorted((i for i, s in enumerate(sentences) if s in rank),
                  key=lambda i: (rank[sentences[i]], i))
    val_rows = [i for i in held if rank[sentences[i]] < layout.held_out]
    test_rows = [i for i in held if rank[sentences[i]] >= layout.held_out]
    train_rows = [i for i, s in enumerate(sentences) if s not in rank]
    return {"train": pool.select(train_rows), "val": pool.select(val_rows),
            "test": pool.select(test_rows)}


def _split_file(folder: Path, split: str, suffixes: tuple[str, ...]) -> Path | None:
    """The one file of `split` with one of `suffixes`; two (train.jsonl and train.tsv, val.jsonl
    and valid.jsonl) are refused rather than one read silently."""
    found = [folder / f"{stem}{suffix}" for stem in SPLIT_NAMES.get(split, (split,))
             for suffix in suffixes if (folder / f"{stem}{suffix}").is_file()]
    if len(found) > 1:
        raise AttncliError(f"{folder}: {' and '.join(p.name for p in found)} both hold the "
                           f"{split} split; keep one")
    return found[0] if found else None


@dataclass(frozen=True)
class SplitSource:
    """The file(s) one split is read from: a table (.jsonl/.json/.tsv) or two text files."""

    files: tuple[Path, ...]
    name: str
    split: str
    src: str
    tgt: str
    simplified: tuple[str, ...] = ()  # sides converted to simplified Chinese when read

    @functools.cached_property
    def rows(self):
        """`open_split(self)`, read once: the tokenizer's sample and the tokenization share it
        (the UTF-8 check alone reads the whole file)."""
        return open_split(self)

    def identity(self) -> list:
        """What the files are (path, size, modification and change times, inode): a cache key
        without reading gigabytes; an edited or replaced file gets another key, even one whose
        modification time was set back (`cp -p`, `rsync -a`), as no one sets the change time.
        A script conversion is part of what the text is (and only then named, so the keys of
        data read as stored are those of caches made before the conversion existed)."""
        ident = []
        for path in self.files:
            stat = path.stat()
            ident.append([str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns,
                          stat.st_ino])
        if self.simplified:
            ident.append(["simplified", list(self.simplified), converter_version()])
        return ident


def split_source(cfg: DataConfig, split: str) -> SplitSource:
    """Where one split of the configured data comes from (`data.val` / `data.test` win)."""
    own_source = {"val": cfg.val, "test": cfg.test}.get(split)
    name = own_source or cfg.dataset
    location = resolve_dataset(name, None if own_source else cfg.subset)
    sides = converted_sides(cfg.chinese_script, cfg.src, cfg.tgt)
    if location.is_file():
        if own_source is None and split != "train":
            raise AttncliError(f"{location}: a single file has no {split} split; set "
                               f"data.{split} to the {split} data (or, for eval, pass --data "
                               f"FILE)")
        return SplitSource((location,), name, split, src=cfg.src, tgt=cfg.tgt, simplified=sides)
    table_file = _split_file(location, split, (".jsonl", ".json", ".tsv"))
    text_files = [_split_file(location, split, (f".{lang}",)) for lang in (cfg.src, cfg.tgt)]
    if table_file is not None and all(text_files):
        raise AttncliError(f"{location}: {table_file.name} and {text_files[0].name} + "
                           f"{text_files[1].name} all hold the {split} split; keep one")
    if table_file is not None:
        return SplitSource((table_file,), name, split, src=cfg.src, tgt=cfg.tgt,
                           simplified=sides)
    if all(text_files):
        return SplitSource(tuple(text_files), name, split, src=cfg.src, tgt=cfg.tgt,
                           simplified=sides)
    found = sorted(p.name for p in location.iterdir())[:8]
    raise AttncliError(f"{location}: no {split} split for {cfg.src}-{cfg.tgt} (expected "
                       f"{split}.jsonl, {split}.tsv or {split}.{cfg.src} + {split}.{cfg.tgt}; "
                       f"found {', '.join(found)})")


def open_split(source: SplitSource):
    """The split as a memory-mapped `datasets.Dataset` with two string columns, src and tgt
    (rows as stored, empty ones included; see `readers.read_split_files`), Chinese sides
    converted to simplified script where the config asks (`chinese_script.py`)."""
    if source.simplified:
        simplifier()  # a missing converter is said before the files are read
    ds = read_split_files(source.files, source.src, source.tgt)
    return convert_columns(ds, source.simplified)


def load_split(cfg: DataConfig, split: str) -> ParallelText:
    """One split of the configured data set as strings; empty and whitespace-only pairs are
    dropped. For validation, test and translation; training reads the token cache instead.
    """
    source = split_source(cfg, split)
    ds = open_split(source)
    src, tgt, rows = [], [], []
    for row, (s, t) in enumerate(zip(ds["src"], ds["tgt"], strict=True)):
        s, t = (s or "").strip(), (t or "").strip()
        if s and t:
            src.append(s)
            tgt.append(t)
            rows.append(row)
    if not src:
        raise AttncliError(f"{source.files[0]}: the {split} split of {source.name} has no "
                           f"non-empty {cfg.src}-{cfg.tgt} pairs")
    return ParallelText(src, tgt, source.name, split, dropped_empty=len(ds) - len(src),
                        rows=rows)
