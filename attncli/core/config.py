"""The configuration's schema: typed, validated pydantic sections (data, tokenizer, model,
train, decode) and the checks that span them.

Every key has a default and a description here; `configs/*.yaml` only change what differs.
Reading and writing YAML files (and `--set` overrides) is `core/config_files.py`'s job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from attncli.core.errors import AttncliError
from attncli.core.scripts import LANGUAGE_SCRIPTS, script_name
from attncli.core.text import converted_sides, is_traditional

# `train.pad_multiple: auto` picks 1 or this (see core.device.resolve_pad_multiple); configs are
# checked against the larger, so a config that fits on one machine fits on every machine.
LARGEST_AUTO_PAD_MULTIPLE = 8
# train.examples: a few sentences to watch, not a test set (each costs decoding at validation).
MAX_EXAMPLES = 32
# The model keys that leave the weights' shapes as they are (dropout rates, the attention
# kernel): the model's fingerprint leaves them out, and a resume may change them.
WEIGHTLESS_MODEL_KEYS = frozenset({"dropout", "attention_dropout", "attention"})


class _Section(BaseModel):
    """Base for every section: unknown keys are errors, assignments are validated, and a
    number is never true/false (pydantic reads `max_steps: true` as 1)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        annotation = cls.model_fields[info.field_name].annotation
        numeric = {int, float} & {annotation, *get_args(annotation)}
        if isinstance(value, bool) and numeric and bool not in get_args(annotation):
            raise ValueError(f"expected a number, not {str(value).lower()}")
        return value


class FilterConfig(_Section):
    """What a training corpus drops before training, beside empty pairs and pairs longer than
    data.max_len (always dropped). All off by default: a config that asks for none trains
    exactly as before filters existed. Counted per filter in train.log and the run folder."""

    same_text: bool = Field(False, description="Drop pairs whose source is identical to their "
                            "target (untranslated copies).")
    length_ratio: float | None = Field(
        None, description="Drop pairs whose longer side has more than this many times the "
        "subword tokens of the shorter (null: off); at least 1.")
    script: bool = Field(False, description="Drop pairs with a side that holds no character of "
                         "its language's script (a Chinese side without a Chinese character).")
    duplicates: bool = Field(False, description="Drop a pair identical to an earlier pair of "
                             "the same corpus (repeats of common turns are real usage: off).")

    @field_validator("length_ratio")
    @classmethod
    def _ratio_of_longer_to_shorter(cls, value: float | None) -> float | None:
        if value is not None and value < 1:
            raise ValueError(f"length_ratio is the longer side's tokens over the shorter "
                             f"side's, so at least 1 (got {value})")
        return value

    def active(self) -> dict[str, Any]:
        """The filters that are on, by name (empty: none): what joins the token cache's key."""
        return self.model_dump(mode="json", exclude_defaults=True)


def corpus_label(name: str | None, dataset: str) -> str:
    """A corpus's short name in logs, eval files and `--set data.corpora.NAME...`: its `name`,
    else its data set's folder or file name made safe for a file name."""
    if name:
        return name
    stem = re.sub(r"\.(jsonl|json|tsv|txt)$", "", dataset.rstrip("/").split("/")[-1])
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "corpus"


LICENCE_HELP = ("The data's licence: an SPDX identifier where one exists (CC-BY-NC-SA-4.0), "
                "else free text (the model card marks it 'check the terms'); printed when a "
                "run starts, written to the run folder and its model card (null: not stated).")
ATTRIBUTION_HELP = "The credit the data's licence asks for (null: none given)."
# The keys that describe a corpus's terms, not its pairs: a resume may change them.
TERMS_KEYS = frozenset({"licence", "attribution"})


class CorpusConfig(_Section):
    """One training corpus of a mix (`data.corpora`): its data, how often each of its pairs
    is seen per epoch, and what is filtered out of it."""

    name: str | None = Field(None, description="Short name for logs and eval files (default: "
                             "the data set's folder or file name).")
    dataset: str = Field(description="Data set name, local folder/file, or Hub id.")
    subset: str | None = Field(None, description="The Hub's configuration name (null: none).")
    train_limit: int | None = Field(None, ge=1, description="Use only its first N training "
                                    "pairs.")
    weight: float = Field(1.0, gt=0, description="Times each pair is seen per epoch: 2 twice, "
                          "0.5 a seeded half (another half each epoch), 1.5 once and a half.")
    filters: FilterConfig = Field(default_factory=FilterConfig)
    licence: str | None = Field(None, description=LICENCE_HELP)
    attribution: str | None = Field(None, description=ATTRIBUTION_HELP)

    @property
    def label(self) -> str:
        """`name`, else the data set's folder or file name made safe for a file name."""
        return corpus_label(self.name, self.dataset)


# The keys of the one-corpus form (data.dataset): a mix sets them for each corpus instead.
ONE_CORPUS_KEYS = frozenset({"dataset", "subset", "filters", "licence", "attribution"})


class DataConfig(_Section):
    dataset: str = Field("multi30k", description="Data set name, local folder/file, or Hub id.")
    subset: str | None = Field(
        None, description="The Hub's configuration name, e.g. de-en for wmt14 (null: none).")
    src: str = Field("en", description="Source language key.")
    tgt: str = Field("de", description="Target language key.")
    max_len: int = Field(100, ge=1, description="Pairs with a side longer than this, in "
                         "tokens with its EOS (BOS on the target input), are dropped.")
    train_limit: int | None = Field(
        None, ge=1, description="Use only the first N training pairs (quick experiments); in a "
        "mix, of each corpus that sets none itself."
    )
    valid_limit: int | None = Field(
        None, ge=1, description="Score only the first N validation pairs during training (loss and "
        "greedy BLEU), so a large validation split costs seconds."
    )
    val: str | None = Field(
        None, description="Validation data (set name, folder or file); default: dataset's val."
    )
    test: str | None = Field(
        None, description="Test data (set name, folder or file); default: dataset's test."
    )
    cache_dir: str | None = Field(
        None, description="Where tokenized splits and tokenizers are cached (null: "
                          "$ATTNCLI_CACHE_DIR, else ~/.cache/attncli).")
    num_proc: int | None = Field(
        None, ge=1, description="Processes that tokenize a split (null: every CPU core), "
                                "at most one per 50,000 rows.")
    chinese_script: Literal["simplified"] | None = Field(
        None, description="Convert Chinese text (src or tgt) to this script when it is read, "
        "with OpenCC (simplified: t2s); a language marked traditional (zh-Hant, zh-TW, zh-HK) "
        "is never converted. null: text as stored.")
    filters: FilterConfig = Field(default_factory=FilterConfig,
                                  description="Filters of the one-corpus form (data.dataset).")
    licence: str | None = Field(None, description=LICENCE_HELP + " One-corpus form; in a "
                                "mix, each corpus's own.")
    attribution: str | None = Field(None, description=ATTRIBUTION_HELP + " One-corpus form.")
    corpora: list[CorpusConfig] | None = Field(
        None, description="Several training corpora mixed by weight (null: data.dataset alone); "
        "each is validated on its own val split unless data.val names one.")
    best_on: str | None = Field(
        None, description="The corpus (its name) whose validation BLEU chooses the best "
        "checkpoint and counts patience in a mix (null: the first).")

    @model_validator(mode="after")
    def _two_languages(self) -> DataConfig:
        if self.src == self.tgt:
            raise ValueError(f"src and tgt are both {self.src!r}: a translation needs two")
        return self

    @model_validator(mode="after")
    def _script_has_chinese_to_convert(self) -> DataConfig:
        """A conversion that would touch neither side is a mistake said now, not ignored."""
        if self.chinese_script and not converted_sides(self.chinese_script, self.src, self.tgt):
            marked = [code for code in (self.src, self.tgt) if is_traditional(code)]
            why = (f"{marked[0]} is marked traditional and is never converted" if marked
                   else f"neither {self.src} nor {self.tgt} is Chinese")
            raise ValueError(f"chinese_script: {self.chinese_script} converts Chinese text, "
                             f"but {why}; set data.chinese_script: null")
        return self

    @model_validator(mode="after")
    def _corpora_are_a_mix(self) -> DataConfig:
        """A mix names its data in `corpora` alone, under names that differ (they name files)."""
        if self.corpora is None:
            if self.best_on is not None:
                raise ValueError("best_on names a corpus of data.corpora, which is not set")
            return self
        if not self.corpora:
            raise ValueError("corpora is empty: list at least one corpus (or set data.dataset "
                             "and data.corpora: null)")
        if given := sorted(ONE_CORPUS_KEYS & self.model_fields_set):
            raise ValueError(f"data.{given[0]} and data.corpora are both set: with corpora, set "
                             f"it for each corpus")
        labels = [corpus.label for corpus in self.corpora]
        if twice := sorted({label for label in labels if labels.count(label) > 1}):
            raise ValueError(f"two corpora are named {twice[0]!r}: give each a distinct name")
        if self.best_on is not None and self.best_on not in labels:
            raise ValueError(f"best_on: no corpus is named {self.best_on!r} (there are "
                             f"{', '.join(labels)})")
        return self

    @model_validator(mode="after")
    def _script_filter_knows_the_languages(self) -> DataConfig:
        filtered = [c.filters for c in self.corpora or ()] + [self.filters]
        unknown = [code for code in (self.src, self.tgt) if script_name(code) is None]
        if unknown and any(f.script for f in filtered):
            known = ", ".join(sorted(LANGUAGE_SCRIPTS))
            raise ValueError(f"filters.script: attncli knows no script for language "
                             f"{unknown[0]!r} (it knows {known}); turn the filter off")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain data; a mix leaves out the one-corpus keys, which it must not set."""
        return self.model_dump(mode="json", exclude=ONE_CORPUS_KEYS if self.corpora else None)


@dataclass(frozen=True)
class Corpus:
    """One training corpus as the data layer reads it: `data` is the config's data section
    with this corpus's dataset, subset, train_limit and filters in it (so everything that reads
    one data set reads it), `mixed` says whether it is one of `data.corpora`."""

    name: str
    data: DataConfig
    weight: float
    filters: FilterConfig
    licence: str | None
    attribution: str | None
    mixed: bool


def corpora_of(data: DataConfig) -> list[Corpus]:
    """The training corpora of a data section: `data.corpora`, or `data.dataset` alone."""
    if data.corpora is None:
        return [Corpus(data.dataset, data, weight=1.0, filters=data.filters,
                       licence=data.licence, attribution=data.attribution, mixed=False)]
    return [Corpus(corpus.label, data.model_copy(update={
                "dataset": corpus.dataset, "subset": corpus.subset,
                "train_limit": corpus.train_limit if corpus.train_limit is not None
                else data.train_limit, "filters": corpus.filters, "corpora": None,
                "best_on": None, "licence": corpus.licence, "attribution": corpus.attribution}),
            weight=corpus.weight, filters=corpus.filters, licence=corpus.licence,
            attribution=corpus.attribution, mixed=True)
            for corpus in data.corpora]


def deciding_corpus(data: DataConfig) -> str | None:
    """The corpus whose validation decides best and patience in a mix (None: one corpus)."""
    if data.corpora is None or data.val is not None:
        return None
    return data.best_on or data.corpora[0].label


class TokenizerConfig(_Section):
    type: Literal["unigram", "bpe"] = Field("unigram", description="SentencePiece model type.")
    vocab_size: int = Field(8000, ge=16, le=2**31 - 1,
                            description="Subword vocabulary size (per model).")
    joint: bool = Field(True, description="One model for source and target (allows tying).")
    character_coverage: float = Field(
        1.0, ge=0.98, le=1.0,  # SentencePiece refuses less, but only after reading the data
        description="Share of characters covered (0.9995 for zh/ja)."
    )
    model_file: str | None = Field(
        None, description="Use this trained joint SentencePiece model instead of training one."
    )
    normalization: Literal["auto", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"] = (
        Field("auto", description="SentencePiece text normalization; auto keeps zh/ja/ko "
                                  "full-width punctuation (identity), else nmt_nfkc."))
    sample_size: int = Field(
        1_000_000, ge=1, description="Training pairs (a seeded random sample when there are "
                                     "more) the tokenizer learns from, at most.")
    sample_bytes: int = Field(
        50_000_000, ge=1, description="Bytes of UTF-8 text (both sides together; as many as "
        "characters in Latin scripts) the tokenizer learns from, at most: SentencePiece's "
        "memory grows with them (about 21 bytes each for unigram, ~1.0 GB at the default), so "
        "this, not sample_size, bounds a first preparation's memory for any corpus size.")

    @model_validator(mode="after")
    def _model_file_is_joint(self) -> TokenizerConfig:
        if self.model_file and not self.joint:
            raise ValueError("tokenizer.model_file needs tokenizer.joint: true")
        return self


class ModelConfig(_Section):
    d_model: int = Field(256, ge=8, description="Width of embeddings and residual stream.")
    heads: int = Field(4, ge=1, description="Attention heads; must divide d_model.")
    enc_layers: int = Field(3, ge=1, description="Encoder layers.")
    dec_layers: int = Field(3, ge=1, description="Decoder layers.")
    ff_dim: int = Field(1024, ge=1, description="Hidden width of the position-wise feed-forward.")
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="Dropout on residual branches.")
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on weights.")
    norm: Literal["pre", "post"] = Field("pre", description="pre-norm (stable) or post-norm.")
    attention: Literal["fused", "reference"] = Field(
        "fused", description="fused = scaled_dot_product_attention; reference = spelled out."
    )
    scoring: Literal["dot", "additive"] = Field(
        "dot", description="dot = scaled dot-product; additive = Bahdanau w^T tanh(Wq q + Wk k)."
    )
    tie_embeddings: Literal[True, False, "decoder"] = Field(
        True, description="true: source, target and output embeddings are one matrix (needs "
                          "tokenizer.joint); decoder: the target embedding and the output "
                          "projection are one (separate vocabularies too); false: three."
    )
    max_positions: int = Field(1024, ge=8, description="Longest sequence the positions cover.")

    @property
    def ties_source(self) -> bool:
        """Source and target share one embedding (and so one vocabulary)."""
        return self.tie_embeddings is True

    @property
    def ties_output(self) -> bool:
        """The output projection is the target embedding (fewer parameters to learn)."""
        return self.tie_embeddings is not False

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.d_model % self.heads != 0:
            raise ValueError(
                f"model.heads ({self.heads}) must divide model.d_model ({self.d_model})"
            )
        return self


# An AdamW beta: 1 zeroes its bias correction (the weights turn NaN), so [0, 1) as torch asks.
Beta = Annotated[float, Field(ge=0, lt=1)]


class TrainConfig(_Section):
    seed: int = Field(1234, ge=0, le=2**32 - 1, description="Seed for init, dropout and "
                      "shuffling (numpy's generators take no negative seed).")
    batch_tokens: int = Field(
        2048, ge=1, description="Max padded tokens per batch on its longer side (source or "
                                "target).")
    pad_multiple: int | Literal["auto"] = Field(
        "auto", description="Pad batch lengths up to a multiple of this (auto: see core/device.py)."
    )
    accum_steps: int = Field(1, ge=1, description="Batches per optimizer update; with several "
                             "training processes a multiple of their number (each its share).")
    save_every: int | None = Field(
        None, ge=1, description="Also save a checkpoint every N updates (null: at validations).")
    keep_checkpoints: int = Field(
        3, ge=1, description="Step folders kept: the newest N, plus the best.")
    average_last: int = Field(0, ge=0, description="At the end, keep the mean of the last N "
                              "saves as `averaged` if it validates better than best (0: off).")
    max_nonfinite_updates: int = Field(
        5, ge=1, description="Stop after N non-finite updates in a row (each one is skipped).")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many updates.")
    max_epochs: int | None = Field(None, ge=1, description="Stop after this many epochs.")
    max_minutes: float | None = Field(
        None, gt=0,
        description="Stop after this much training time (validation and saving not counted).")
    eval_every: int = Field(500, ge=1, description="Validate every N updates (and at the end).")
    log_every: int = Field(50, ge=1, description="Log training figures every N updates.")
    lr: float = Field(1e-3, gt=0, description="Peak learning rate (reached after warm-up).")
    warmup_steps: int = Field(300, ge=0, description="Updates of linear warm-up to the peak (a "
                              "linear or wsd schedule: at most a quarter of its updates).")
    lr_schedule: Literal["inverse_sqrt", "linear", "wsd"] = Field(
        "inverse_sqrt", description="After warm-up: inverse_sqrt = peak * sqrt(warmup / step); "
        "linear = a straight line down to min_lr at the run's last update; wsd = the peak held, "
        "then a straight line down to min_lr over the last `cooldown` of the updates. The "
        "budgeted two end with the run's limit (max_steps, max_epochs or max_minutes, the "
        "first to come; a time limit is planned from the training speed).")
    min_lr: float = Field(0.0, ge=0, description="The rate at the last update of a linear or "
                          "wsd schedule.")
    cooldown: float = Field(0.2, gt=0, le=1, description="wsd: the share of the updates after "
                            "warm-up spent decaying to min_lr.")
    lr_plan: list[tuple[int, int]] | None = Field(
        None, description="A replay of a time-limited linear or wsd run: its plan's revisions, "
        "[update, planned last update] each, as its state.json's scheduler.revisions lists them, "
        "followed instead of planning (null: plan from the limits and the clock).")
    betas: tuple[Beta, Beta] = Field((0.9, 0.98), description="AdamW betas, each in [0, 1).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    label_smoothing: float = Field(0.1, ge=0, lt=1, description="Label smoothing of the loss.")
    subword_alpha: float = Field(
        0.0, ge=0, le=1, description="Subword regularization: training batches re-segmented by "
                                     "sampling, P(segmentation)^alpha (0 = off; unigram only).")
    subword_nbest: int = Field(16, ge=2, description="Segmentations drawn from (the n best).")
    clip_norm: float | None = Field(1.0, gt=0, description="Gradient norm clip (null = off).")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto = bf16 autocast on CUDA with bf16 and on CPUs that multiply "
        "bf16 natively (AMX, AVX-512-BF16), else fp32 (AVX-512 without BF16, AVX2); a resumed "
        "run keeps the precision it began in."
    )
    compile: bool = Field(False, description="Wrap the model in torch.compile.")
    patience: int | None = Field(
        None, ge=1, description="Stop after N validations without a better val BLEU."
    )
    threads: int | None = Field(None, ge=1, description="CPU threads (default: all cores).")
    workers: int | Literal["auto"] = Field(
        "auto", description="Processes that collate batches ahead of the training step (0: "
                            "the training process itself; auto: see data/batching.py).")
    tensorboard: bool | Literal["auto"] = Field(
        "auto", description="Also log the metrics to RUN/tensorboard/ (auto: when tensorboard "
                            "is installed).")
    examples: list[str] = Field(
        default_factory=list,
        description="Source sentences translated at each validation (beam and limits as "
        "decode.*) and shown in the console, train.log, metrics.jsonl and TensorBoard: the "
        "model learning, sentence by sentence.")

    freeze: list[Literal["embeddings", "encoder", "decoder"]] = Field(
        default_factory=list,
        description="Parts of the model that get no updates and no optimizer state, for a run "
        "fine-tuned from a parent's weights (`attncli train CONFIG --init-from RUN`) only: "
        "embeddings (tied: the output projection too), encoder, decoder (its layers, final "
        "norm and output bias, and an output projection of its own). Empty: every part trains.")

    @field_validator("pad_multiple", "workers", mode="before")
    @classmethod
    def _whole_number_or_auto(cls, value: Any, info: ValidationInfo) -> Any:
        least = {"pad_multiple": 1, "workers": 0}[info.field_name]
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool)
                               and value >= least):
            return value
        raise ValueError(f"expected a whole number >= {least} or auto (got {value!r})")

    @model_validator(mode="after")
    def _budget_has_an_end(self) -> TrainConfig:
        if self.lr_plan is not None and [step for step, _ in self.lr_plan] != sorted(
                {step for step, _ in self.lr_plan}):
            raise ValueError("train.lr_plan: each revision's update must be later than the "
                             "one before")
        if self.lr_schedule == "inverse_sqrt":
            if self.lr_plan is not None:
                raise ValueError("train.lr_plan replays a linear or wsd schedule's plan; "
                                 "inverse_sqrt has none")
            return self
        if self.max_steps is None and self.max_epochs is None and self.max_minutes is None:
            raise ValueError(f"train.lr_schedule {self.lr_schedule} decays to min_lr at the run's "
                             f"last update: set train.max_steps, max_epochs or max_minutes")
        if self.min_lr >= self.lr:
            raise ValueError(f"train.min_lr ({self.min_lr:g}) must be below train.lr "
                             f"({self.lr:g}), the peak it decays from")
        return self

    @field_validator("examples", mode="before")
    @classmethod
    def _few_examples(cls, value: Any) -> Any:
        if value is None:  # `examples:` with nothing under it
            return []
        if isinstance(value, list) and len(value) > MAX_EXAMPLES:
            raise ValueError(f"at most {MAX_EXAMPLES} examples (got {len(value)}): they are "
                             f"translated at every validation")
        return value

    @field_validator("examples")
    @classmethod
    def _examples_are_text(cls, value: list[str]) -> list[str]:
        for number, text in enumerate(value, 1):
            if not text.strip() or "\x00" in text:
                raise ValueError(f"example {number} ({text!r}) holds no text: give each "
                                 f"example as a non-empty sentence")
        return value

    @field_validator("freeze", mode="before")
    @classmethod
    def _some_part_trains(cls, value: Any) -> Any:
        if value is None:  # `freeze:` with nothing under it
            return []
        if isinstance(value, list) and all(isinstance(part, str) for part in value):
            if twice := sorted({part for part in value if value.count(part) > 1}):
                raise ValueError(f"{twice[0]!r} is listed twice")
            if {"embeddings", "encoder", "decoder"} <= set(value):
                raise ValueError("embeddings, encoder and decoder are every parameter: nothing "
                                 "would train")
        return value

    @model_validator(mode="after")
    def _averaged_saves_are_kept(self) -> TrainConfig:
        if self.average_last == 1 or self.average_last > self.keep_checkpoints:
            raise ValueError(f"train.average_last ({self.average_last}) must be 0 (off) or 2 to "
                             f"train.keep_checkpoints ({self.keep_checkpoints}), the saves kept")
        return self


# The longest piece a too-long sentence is cut into: chosen on validation lines
# (benchmarks/piece_size.py, docs/documents.md).
PIECE_SUBWORDS = 8


class DecodeConfig(_Section):
    beam: int = Field(5, ge=1, description="Beam size (1 = greedy).")
    length_penalty: float = Field(1.0, ge=0, description="Score / len**alpha when ranking.")
    max_len_a: float = Field(1.5, ge=0, description="Max output length = a * src_len + b.")
    max_len_b: int = Field(10, ge=1, description="Max output length = a * src_len + b.")
    batch_size: int = Field(64, ge=1, description="Sentences decoded together.")
    no_repeat_ngram_size: int = Field(3, ge=0, description="No output n-gram twice (0: off).")
    piece_subwords: int = Field(
        PIECE_SUBWORDS, ge=1, description="A sentence longer than data.max_len is cut into pieces "
        "of at most this many subwords (split translation only).")


class Config(_Section):
    data: DataConfig = Field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    decode: DecodeConfig = Field(default_factory=DecodeConfig)

    @model_validator(mode="after")
    def _tying_needs_joint_vocab(self) -> Config:
        if self.model.ties_source and not self.tokenizer.joint:
            raise ValueError("model.tie_embeddings: true needs tokenizer.joint: true "
                             "(with separate vocabularies, tie_embeddings: decoder or false)")
        return self

    @model_validator(mode="after")
    def _sampling_needs_unigram(self) -> Config:
        """Refused when read, before a run folder exists (a model_file is checked at start)."""
        if self.train.subword_alpha > 0 and self.tokenizer.type == "bpe" \
                and not self.tokenizer.model_file:
            raise ValueError("train.subword_alpha needs a unigram SentencePiece model "
                             "(tokenizer.type: unigram)")
        return self

    @model_validator(mode="after")
    def _padded_pairs_fit_the_positions(self) -> Config:
        """A batch is data.max_len long at most, rounded up to the padding multiple."""
        multiple = self.train.pad_multiple
        if multiple == "auto":
            multiple = LARGEST_AUTO_PAD_MULTIPLE
        padded = -(-self.data.max_len // multiple) * multiple
        if padded > self.model.max_positions:
            fits = self.model.max_positions // multiple * multiple
            raise ValueError(
                f"data.max_len ({self.data.max_len}, padded to a multiple of {multiple}: "
                f"{padded}) exceeds model.max_positions ({self.model.max_positions}); lower "
                f"data.max_len to {fits} or raise model.max_positions")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML/JSON (tuples become lists)."""
        return {**self.model_dump(mode="json"), "data": self.data.to_dict()}


def check_process_shares(train: TrainConfig, processes: int, resuming: bool = False) -> None:
    """An update's batches must split evenly between the training processes, so the tokens per
    update stay what the config says whatever their number. A resumed run cannot change
    accum_steps (its saved data position counts those batches): only the process count can."""
    if train.accum_steps % processes and resuming:
        counts = [n for n in range(1, train.accum_steps + 1) if train.accum_steps % n == 0]
        raise AttncliError(
            f"{processes} processes: this run's updates are train.accum_steps="
            f"{train.accum_steps} batches, shared between the processes, and accum_steps cannot "
            f"change when resuming; resume it with --nproc {' or '.join(map(str, counts))}")
    if train.accum_steps % processes:
        raise AttncliError(
            f"train.accum_steps={train.accum_steps} with {processes} processes: an update is "
            f"accum_steps batches of train.batch_tokens, shared between the processes, so "
            f"accum_steps must be a multiple of {processes} (e.g. --set train.accum_steps="
            f"{processes * (train.accum_steps // processes + 1)}, and divide train.batch_tokens "
            f"by the same factor to keep the tokens per update)")
