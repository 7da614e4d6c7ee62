"""What a training run reads, prepared from its config: the tokenizer and the tokenized splits,
each taken from the data cache when an earlier run made them, else made now and cached.

    <cache>/tokenizers/<key>/spm.model    a tokenizer trained on a sample of a training split
    <cache>/corpora/<key>/                a tokenized split (cache.py)

The tokenizer's key hashes the training data's identity, the language pair, data.train_limit
and the tokenizer settings, so a second run over the same data reuses it, and its model's bytes
are part of the tokenized splits' keys. Nothing is written outside the cache, so bad data
leaves no run folder behind. Where the cache is and how an entry is written: `cache.py`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attncli.core.config import Config, Corpus, corpora_of
from attncli.core.errors import AttncliError
from attncli.data.cache import (
    CACHE_FORMAT,
    Log,
    TokenizedSplit,
    cache_key,
    cache_root,
    check_cache_writable,
    first_rows,
    tokenized_split,
    write_entry,
)
from attncli.data.mixing import MixedCorpus, MixPart
from attncli.data.sources import (
    ParallelText,
    SplitSource,
    check_training_sources,
    load_split,
    split_source,
)
from attncli.data.subwords import check_samplable
from attncli.data.tokenizer import TokenizerModels, train_models

# The tokenizer's sample does not depend on train.seed, so runs that differ only in their seed
# share one tokenizer and one token cache.
SAMPLE_SEED = 0


def pair_bytes(ds) -> np.ndarray:
    """UTF-8 bytes of each pair, both sides as stored (0 for a pair with an empty or blank side,
    which the trainer is never handed): at least its characters, and at least what the trainer is
    handed (stripped). Computed from the Arrow offsets of the table under
    `ds`, so no text is copied (iterating `ds` in batches would concatenate it)."""
    import pyarrow.compute as pc

    table = ds.data
    sides = [pc.if_else(pc.fill_null(pc.utf8_is_space(table.column(side)), True), 0,
                        pc.binary_length(table.column(side))).to_numpy()
             for side in ("src", "tgt")]
    sizes = np.where((sides[0] > 0) & (sides[1] > 0), np.add(*sides, dtype=np.int64), 0)
    if ds._indices is not None:  # a selection of the table's rows (datasets' indices mapping)
        sizes = sizes[ds._indices.column(0).to_numpy()]
    return sizes


def sample_rows(sizes: np.ndarray, size: int, max_bytes: int,
                seed: int = SAMPLE_SEED) -> np.ndarray | None:
    """The rows the tokenizer learns from, in file order (None: all of them), given each
    pair's bytes: a seeded random sample of at most `size` pairs and `max_bytes` bytes.

    Why bytes: SentencePiece's memory grows with the text it is given (about 21 bytes a byte
    of text for unigram), so a bound in pairs alone lets a corpus of long sentences take any
    amount. The pairs are drawn exactly as when only `size` bounded them, then the draw is cut
    where its bytes pass `max_bytes`, so a corpus within both bounds is read whole and in
    order, as before this bound existed. Pairs with an empty side (size 0: skipped by the
    trainer) and pairs larger than `max_bytes` alone are never drawn: they took places in the
    sample that no text filled, or ended it at once.
    """
    eligible = np.flatnonzero((sizes > 0) & (sizes <= max_bytes))  # not empty, and fits alone
    count = len(eligible)
    if count == len(sizes) and count <= size and int(sizes.sum()) <= max_bytes:
        return None
    rng = np.random.default_rng(seed)
    order = eligible[rng.choice(count, size, replace=False) if count > size
                     else rng.permutation(count)]
    keep = int(np.searchsorted(np.cumsum(sizes[order]), max_bytes, side="right"))
    return np.sort(order[:keep])


def tokenizer_sample(ds, size: int, max_bytes: int | None = None, seed: int = SAMPLE_SEED):
    """The pairs the tokenizer learns from: at most `size` pairs and `max_bytes` bytes of
    UTF-8 text (both sides together; no byte bound when None), a seeded sample in file order,
    or `ds` itself when it is within both bounds."""
    no_bound = np.iinfo(np.int64).max
    picked = sample_rows(pair_bytes(ds), size, no_bound if max_bytes is None else max_bytes, seed)
    return ds if picked is None else ds.select(picked)


def side_texts(ds) -> Callable[[str], Iterator[str]]:
    """A fresh stream of one side's texts per call, read from the Arrow table in file order;
    empty pairs are skipped, as training skips them."""
    def texts(side: str) -> Iterator[str]:
        for batch in ds.iter(batch_size=10_000):
            for src, tgt in zip(batch["src"], batch["tgt"], strict=True):
                src, tgt = (src or "").strip(), (tgt or "").strip()
                if src and tgt:
                    yield src if side == "src" else tgt

    return texts


def _tokenizer_key(config: Config, sources: list[SplitSource], limits: list[int | None]) -> str:
    """What the tokenizer depends on: the corpora's data and row limits (one corpus: as before
    mixes existed, so its cached tokenizer stays valid), never their weights or filters, so
    changing those re-tokenizes nothing."""
    tok = config.tokenizer.model_dump(mode="json", exclude={"model_file"})
    data, rows = ((sources[0].identity(), limits[0]) if len(sources) == 1
                  else ([s.identity() for s in sources], limits))
    return cache_key({"format": CACHE_FORMAT, "data": data,
                      "languages": [sources[0].src, sources[0].tgt], "rows": rows,
                      "tokenizer": tok, "sample_seed": SAMPLE_SEED})


def _models_readable(folder: Path, joint: bool) -> bool:
    try:
        TokenizerModels.read(folder, joint)
    except AttncliError:
        return False
    return True


def prepare_tokenizer(config: Config, sources: list[SplitSource], limits: list[int | None], *,
                      root: Path, log: Log) -> TokenizerModels:
    """The serialized tokenizer model(s) for a new run: `tokenizer.model_file`, a cached one
    trained on the same data with the same settings, or one trained now (and cached) on a
    sample of every corpus's training pairs (`limits`: each one's train_limit)."""
    cfg = config.tokenizer
    if cfg.model_file:
        return TokenizerModels.from_model_file(cfg)
    folder = root / "tokenizers" / _tokenizer_key(config, sources, limits)
    try:  # the cached files are named as in a run folder
        models = TokenizerModels.read(folder, cfg.joint)
        log(f"tokenizer: reusing {folder}")
        return models
    except AttncliError:
        pass  # not cached yet, or damaged: train it
    check_cache_writable(folder.parent)  # before training a tokenizer
    trained: list[str] = []  # the log line, once this process has trained it
    write_entry(folder, lambda staging: trained.append(_train_into(staging, config, sources,
                                                                   limits)),
                intact=lambda entry: _models_readable(entry, cfg.joint), log=log)
    models = TokenizerModels.read(folder, cfg.joint)
    log(f"{trained[0]} -> {folder}" if trained else
        f"tokenizer: reusing {folder} (another process trained it meanwhile)")
    return models


def _train_into(staging: Path, config: Config, sources: list[SplitSource],
                limits: list[int | None]) -> str:
    """Train the tokenizer on a sample of the train splits into `staging`; the log line."""
    cfg, started = config.tokenizer, time.perf_counter()
    ds = _joined_rows(sources, limits)
    source = sources[0]
    names = " + ".join(s.name for s in sources)
    sample = tokenizer_sample(ds, cfg.sample_size, cfg.sample_bytes)
    texts = side_texts(sample)
    if len(ds) and not len(sample) and pair_bytes(ds).any():
        raise AttncliError(f"tokenizer.sample_bytes={cfg.sample_bytes:,} is smaller than any "
                           f"pair of the train split of {names}")
    if next(texts("src"), None) is None:
        raise AttncliError(f"{source.files[0]}: the train split of {names} has no "
                           f"non-empty {source.src}-{source.tgt} pairs")
    models = train_models(cfg, texts, (config.data.src, config.data.tgt))
    models.install(staging)
    return (f"tokenizer: trained {cfg.type} ({_pieces_said(models, cfg.vocab_size)}) on "
            f"{len(sample):,} of {len(ds):,} pairs (at most {cfg.sample_size:,} pairs and "
            f"{cfg.sample_bytes:,} bytes) in {time.perf_counter() - started:.1f} s")


def _joined_rows(sources: list[SplitSource], limits: list[int | None]):
    """The training rows of every corpus, one after the other (one corpus: its own)."""
    parts = [first_rows(source.rows, limit) for source, limit in zip(sources, limits,
                                                                      strict=True)]
    if len(parts) == 1:
        return parts[0]
    import datasets

    return datasets.concatenate_datasets(parts)


def _pieces_said(models: TokenizerModels, asked: int) -> str:
    """The piece count the model(s) got, by side when they are two: SentencePiece stops short
    of tokenizer.vocab_size where the text has fewer pieces to give (a soft limit), which the
    log must not hide, for either side."""
    tokenizer = models.tokenizer()
    sizes = {"src": tokenizer.src.get_piece_size(), "tgt": tokenizer.tgt.get_piece_size()}
    got = (f"{sizes['src']:,}" if models.joint
           else " and ".join(f"{side} {n:,}" for side, n in sizes.items()))
    if min(sizes.values()) < asked:
        return (f"{got} pieces: fewer than tokenizer.vocab_size={asked:,}, all this text "
                f"gives")
    return f"{got} pieces"


# -- everything a training run reads -----------------------------------------------------------


@dataclass
class ValSet:
    """One validation set: its token cache (for the loss) and texts (for BLEU)."""

    name: str | None  # the corpus it belongs to in a mix; None: the run's one val set
    val: TokenizedSplit
    val_text: ParallelText


@dataclass
class TrainingData:
    """What a training run reads: tokenizer model(s), the training pairs of every corpus
    (mixed by weight), and the validation set(s)."""

    models: TokenizerModels
    train: MixedCorpus
    vals: list[ValSet]
    name: str
    corpora: list[Corpus]

    @property
    def mixed(self) -> bool:
        return self.corpora[0].mixed

    @property
    def val(self) -> TokenizedSplit:
        return self.vals[0].val

    @property
    def val_text(self) -> ParallelText:
        return self.vals[0].val_text


@contextlib.contextmanager
def _about(corpus: Corpus) -> Iterator[None]:
    """A mix's errors name the corpus they are about (one corpus: as they were)."""
    try:
        yield
    except AttncliError as err:
        if not corpus.mixed:
            raise
        raise AttncliError(f"corpus {corpus.name} (data.corpora, dataset "
                           f"{corpus.data.dataset!r}): {err}") from None


def _val_sets(config: Config, corpora: list[Corpus]) -> list[tuple[str | None, Corpus]]:
    """Which val splits a run scores: each corpus's in a mix (unless data.val names one set),
    else the one of data.val or the data set."""
    if corpora[0].mixed and config.data.val is None:
        return [(corpus.name, corpus) for corpus in corpora]
    return [(None, corpora[0])]


def prepare_training_data(config: Config, log: Log,
                          models: TokenizerModels | None = None) -> TrainingData:
    """Check every corpus's sources, then get the tokenizer (`models`, else cached or
    trained) and the tokenized train and val splits (cached or tokenized now). Nothing is
    written outside the cache, so bad data leaves no run folder behind."""
    root = cache_root(config.data)  # only read when every entry is there (a read-only mount)
    corpora = corpora_of(config.data)
    train_sources = []
    for corpus in corpora:
        with _about(corpus):
            check_training_sources(corpus.data)
            train_sources.append(split_source(corpus.data, "train"))
    if config.data.test is not None:  # a typo would surface only at `attncli eval`
        split_source(corpora[0].data, "test")
    val_texts = []
    for name, corpus in _val_sets(config, corpora):
        with _about(corpus):
            val_texts.append((name, corpus, split_source(corpus.data, "val"),
                              load_split(corpus.data, "val")))
    limits = [corpus.data.train_limit for corpus in corpora]
    models = models or prepare_tokenizer(config, train_sources, limits, root=root, log=log)
    if config.train.subword_alpha > 0:
        check_samplable(models.sides().values())
    parts = [MixPart(corpus.name, _train_split(corpus, source, models, root=root, log=log),
                     corpus.weight) for corpus, source in zip(corpora, train_sources,
                                                              strict=True)]
    vals = []
    for name, corpus, source, text in val_texts:
        with _about(corpus):
            val = tokenized_split(source, models, corpus.data, limit=None, root=root, log=log)
            if not len(val):
                raise AttncliError(f"{source.files[0]}: no validation pairs fit "
                                   f"data.max_len={config.data.max_len}")
        vals.append(ValSet(name, val, text))
    return TrainingData(models=models, train=MixedCorpus(parts), vals=vals,
                        name=" + ".join(source.name for source in train_sources),
                        corpora=corpora)


def _train_split(corpus: Corpus, source: SplitSource, models: TokenizerModels, *,
                 root: Path, log: Log) -> TokenizedSplit:
    """One corpus's training split, tokenized and filtered (cached)."""
    with _about(corpus):
        split = tokenized_split(source, models, corpus.data, limit=corpus.data.train_limit,
                                root=root, log=log, filters=corpus.filters)
        if not len(split):
            raise AttncliError(f"{source.files[0]}: no training pairs fit "
                               f"data.max_len={corpus.data.max_len}"
                               + (" and its filters" if corpus.filters.active() else ""))
    return split


def corpus_reports(data: TrainingData, max_len: int) -> list[dict]:
    """What each corpus gave: pairs read, dropped (empty, too long, by each filter), kept,
    weight, share of an epoch, licence and attribution. For train.log and the run folder's
    corpora.json (every run's: its model card says what each corpus gave)."""
    shares = data.train.shares()
    reports = []
    for part, corpus in zip(data.train.parts, data.corpora, strict=True):
        split = part.split
        reports.append({
            "name": part.name, "dataset": corpus.data.dataset, "read": split.pairs_read,
            "dropped": {"empty": split.dropped_empty, "too_long": split.dropped_long,
                        **{name: count for name, count in split.dropped_by.items()
                           if name in corpus.filters.active()}},
            "kept": len(split), "weight": part.weight, "share": round(shares[part.name], 4),
            "filters": corpus.filters.active(), "licence": corpus.licence,
            "attribution": corpus.attribution})
    return reports


def report_line(report: dict, max_len: int) -> str:
    """One corpus's report as a log line."""
    said = {"empty": "empty", "too_long": f"over data.max_len={max_len}"}
    dropped = ", ".join(f"{count:,} {said.get(why, 'by ' + why)}"
                        for why, count in report["dropped"].items())
    return (f"corpus {report['name']}: {report['read']:,} pairs read, dropped {dropped}; "
            f"{report['kept']:,} kept, weight {report['weight']:g}: {report['share']:.1%} of an "
            f"epoch's pairs")


def prepare_command(config: Config) -> None:
    """`attncli prepare`: the data cache for `config`, each step printed as it finishes."""
    data = prepare_training_data(config, lambda line: print(line, flush=True))
    if data.mixed:
        for report in corpus_reports(data, config.data.max_len):
            print(report_line(report, config.data.max_len))
    print(f"ready: {len(data.train):,} training pairs ({data.train.dropped_empty:,} empty and "
          f"{data.train.dropped_long:,} over {config.data.max_len} tokens with EOS left out"
          f"{_filtered_said(data)}), "
          f"{sum(len(v.val) for v in data.vals):,} validation pairs")


def _filtered_said(data: TrainingData) -> str:
    """', N by filters' when filters dropped any pairs."""
    count = sum(sum(part.split.dropped_by.values()) for part in data.train.parts)
    return f", {count:,} by filters" if count else ""
