"""SentencePiece subwords: train on (a sample of) the training split, save in the run folder
(or a data cache entry), load again. The models travel as `TokenizerModels` (their bytes:
pickled into tokenizing processes, hashed into cache keys); a `Tokenizer` encodes with them.

Special ids are fixed (`core.text`: pad = 0, unk = 1, bos = 2, eos = 3) so that the model,
batching and search agree without asking; a model with other ids is refused when loaded.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from attncli.core.config import TokenizerConfig
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_bytes
from attncli.core.text import BOS_ID, EOS_ID, PAD_ID, UNK_ID, base_language

# Languages written with full-width punctuation (，。！？), which NFKC would turn into ASCII.
FULL_WIDTH_PUNCTUATION = {"zh", "ja", "ko"}


# What `translate` and `serve` say of a text with no visible character (a zero-width space,
# control characters): nmt_nfkc drops them all and identity keeps them as pieces, and either way
# the model would translate nothing as confidently as a sentence. Refused like an empty text.
NO_TEXT = "only invisible or control characters, no text"
_INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}  # controls, formats, separators


def no_visible_text(text: str) -> bool:
    """Whether `text` has no character but invisible ones (see NO_TEXT)."""
    return all(unicodedata.category(c) in _INVISIBLE or c.isspace() for c in text)


def text_problem(text: str) -> str | None:
    """Why `text` cannot be translated (a NUL byte, empty, only invisible characters), or None.
    What `attncli translate` says of a bad line and `attncli.Translator` of a bad text."""
    if "\x00" in text:  # valid UTF-8, but not text: UTF-16 read as UTF-8 looks like this
        return "a NUL byte (is it UTF-16? attncli reads UTF-8)"
    if not text.strip():
        return "empty input"
    return NO_TEXT if no_visible_text(text) else None


def normalization_rule(setting: str, languages: Sequence[str]) -> str:
    """The SentencePiece normalization for a model of `languages` ('auto' resolved).

    Why: SentencePiece's default, nmt_nfkc, maps full-width punctuation to ASCII, so a model
    trained on Chinese targets writes `,` `?` `!` where the references have `，` `？` `！`.
    `identity` keeps the text as written (whitespace is still collapsed).
    """
    if setting != "auto":
        return setting
    if FULL_WIDTH_PUNCTUATION & {base_language(lang) for lang in languages}:
        return "identity"
    return "nmt_nfkc"


# Lists shorter than this are encoded text by text (see encode_texts).
POOLED_ENCODE_MIN = 256


def encode_texts(model: spm.SentencePieceProcessor, texts: Sequence[str]) -> list[list[int]]:
    """Each text's subword ids: a long list through SentencePiece's thread pool, a short one
    text by text.

    Why: SentencePiece encodes a list with a pool of threads that it starts on each call, which
    pays for thousands of sentences (data preparation) but costs a short list (a server request,
    a `translate` line) many times its encoding, and far more on a machine whose cores are busy
    decoding (benchmarks/MEASUREMENTS.md). The ids are the same either way.
    """
    if len(texts) >= POOLED_ENCODE_MIN:
        return model.encode(list(texts))
    return [model.encode(text) for text in texts]


class Tokenizer:
    """Source and target SentencePiece models (the same object when the vocabulary is joint)."""

    def __init__(self, src: spm.SentencePieceProcessor, tgt: spm.SentencePieceProcessor):
        self.src, self.tgt = src, tgt
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
        # What a source text goes through before it is encoded, as the training sources went
        # (the run's script conversion, set by `runs.trained.load_trained_model`); None: nothing.
        self.prepare_src: Callable[[str], str] | None = None

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_src(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids followed by EOS (the encoder needs no BOS)."""
        if self.prepare_src is not None:
            texts = [self.prepare_src(text) for text in texts]
        return [ids + [EOS_ID] for ids in encode_texts(self.src, texts)]

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids without BOS/EOS; batching adds them for teacher forcing."""
        return encode_texts(self.tgt, texts)

    def decode_tgt(self, ids: Sequence[int]) -> str:
        """Ids (BOS/EOS/pad are dropped) -> detokenized text. An unknown piece (the model may
        generate one where training targets held characters outside the vocabulary) shows as
        SentencePiece's ⁇, not as nothing: a silently missing word reads as a translation."""
        return self.tgt.decode([i for i in ids if i == UNK_ID or i > EOS_ID])

    def src_pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.src.id_to_piece(int(i)) for i in ids]

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.tgt.id_to_piece(int(i)) for i in ids]


# The sides of a tokenizer: one joint model, or one model per side (`model_file` names them).
JOINT_SIDES: tuple[str | None, ...] = (None,)
SEPARATE_SIDES: tuple[str | None, ...] = ("src", "tgt")


def model_sides(joint: bool) -> tuple[str | None, ...]:
    return JOINT_SIDES if joint else SEPARATE_SIDES


def model_file(folder: Path, side: str | None = None) -> Path:
    """A tokenizer model's file in `folder`, a run folder or a data cache entry (the functions
    below read and write both alike): side None -> the joint model spm.model; 'src'/'tgt' ->
    spm.src.model, spm.tgt.model."""
    return Path(folder) / ("spm.model" if side is None else f"spm.{side}.model")


@dataclass(frozen=True, repr=False)
class TokenizerModels:
    """A tokenizer as it travels between the steps of a run: its serialized SentencePiece
    model(s), bytes only; `tokenizer()` builds the `Tokenizer` that encodes and decodes.

    Why bytes, not a `Tokenizer`: the models are pickled into `datasets.map`'s tokenizing
    processes and to the other ranks of a distributed run (cheap, and no SentencePiece object
    has to survive pickling), hashed into the token caches' keys (`digests`) and written into
    run folders and cache entries (`install`), none of which needs the processors.

    joint: one model serves both sides, and `src` and `tgt` are its bytes (`shared`).
    """

    src: bytes
    tgt: bytes
    joint: bool = False

    def __post_init__(self) -> None:
        if self.joint and self.src is not self.tgt and self.src != self.tgt:
            raise ValueError("a joint tokenizer has one model: src and tgt are the same bytes")

    @classmethod
    def shared(cls, model: bytes) -> TokenizerModels:
        """One joint model for both sides (spm.model)."""
        return cls(model, model, joint=True)

    @classmethod
    def read(cls, folder: Path, joint: bool) -> TokenizerModels:
        """The model(s) in `folder`, a run folder or a data cache entry, each checked as
        SentencePiece would load it (a missing or corrupt file is one line)."""
        models = {}
        for side in model_sides(joint):
            path = model_file(folder, side)
            models[side] = _model_bytes(path)
            _from_proto(models[side], str(path))
        return cls.shared(models[None]) if joint else cls(models["src"], models["tgt"])

    @classmethod
    def from_model_file(cls, cfg: TokenizerConfig) -> TokenizerModels:
        """`tokenizer.model_file`, checked, as the joint model."""
        check_model_file(cfg)
        return cls.shared(Path(cfg.model_file).expanduser().read_bytes())

    def sides(self) -> dict[str | None, bytes]:
        """The model(s) by side as `model_file` names them: {None: the joint model}, or
        {"src": ..., "tgt": ...}."""
        return {None: self.src} if self.joint else {"src": self.src, "tgt": self.tgt}

    def digests(self) -> dict[str, str]:
        """Each model's SHA-256 by side ("joint", or "src" and "tgt"): what the token caches'
        keys hash. Changing it would orphan every cache entry made before, so it stays as it
        was when the models travelled as a dict of sides."""
        return {side or "joint": hashlib.sha256(data).hexdigest()
                for side, data in self.sides().items()}

    def install(self, folder: Path) -> None:
        """Write the model(s) into `folder`, where `load_tokenizer` and `read` find them."""
        for side, data in self.sides().items():
            atomic_write_bytes(model_file(folder, side), data)

    def tokenizer(self) -> Tokenizer:
        """The `Tokenizer` of these models, each checked as a file on disk would be."""
        procs = {side: _from_proto(data, f"SentencePiece model ({side or 'joint'})")
                 for side, data in self.sides().items()}
        if self.joint:
            return Tokenizer(procs[None], procs[None])
        return Tokenizer(procs["src"], procs["tgt"])

    def __repr__(self) -> str:  # not the bytes: a model is megabytes
        sizes = (f"{len(self.src):,} bytes" if self.joint
                 else f"src {len(self.src):,} and tgt {len(self.tgt):,} bytes")
        return f"TokenizerModels({'joint' if self.joint else 'separate'}, {sizes})"


# SentencePiece skips longer sentences without a word; the sample is already bounded in bytes
# (tokenizer.sample_bytes), so every sentence it holds is given.
MAX_SENTENCE_BYTES = 2**30  # its ceiling


def _train_one(texts: Iterable[str], cfg: TokenizerConfig, languages: Sequence[str]) -> bytes:
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            model_type=cfg.type,
            vocab_size=cfg.vocab_size,
            normalization_rule_name=normalization_rule(cfg.normalization, languages),
            character_coverage=cfg.character_coverage,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            input_sentence_size=0,  # every sentence given: the caller already sampled
            max_sentence_length=MAX_SENTENCE_BYTES,  # not its 4,192: longer ones were skipped
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            num_threads=2,
            minloglevel=2,
        )
    except RuntimeError as err:
        raise AttncliError(f"SentencePiece training failed: {str(err).splitlines()[0]}") from None
    return model.getvalue()


def train_models(cfg: TokenizerConfig, texts: Callable[[str], Iterable[str]],
                 languages: tuple[str, str]) -> TokenizerModels:
    """Serialized SentencePiece model(s), trained on `texts("src")` / `texts("tgt")`.

    `texts` gives a fresh stream per call, so nothing holds every sentence at once; `languages`
    (source, target) choose the normalization when it is `auto`.
    """
    if cfg.joint:
        both = itertools.chain(texts("src"), texts("tgt"))
        return TokenizerModels.shared(_train_one(both, cfg, languages))
    return TokenizerModels(_train_one(texts("src"), cfg, languages[:1]),
                           _train_one(texts("tgt"), cfg, languages[1:]))


def _from_proto(data: bytes, what: str) -> spm.SentencePieceProcessor:
    proc = spm.SentencePieceProcessor()
    try:
        proc.load_from_serialized_proto(data)
    except (RuntimeError, OSError) as err:
        raise AttncliError(f"{what}: not a valid SentencePiece model ({str(err)[:80]})") from None
    if proc.pad_id() != PAD_ID or proc.eos_id() != EOS_ID or proc.bos_id() != BOS_ID:
        raise AttncliError(f"{what}: SentencePiece model has other special ids than "
                           f"pad={PAD_ID} unk={UNK_ID} bos={BOS_ID} eos={EOS_ID}")
    return proc


def _model_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise AttncliError(f"{path}: SentencePiece model missing")
    return path.read_bytes()


def _load_one(path: Path) -> spm.SentencePieceProcessor:
    return _from_proto(_model_bytes(path), str(path))


def check_model_file(cfg: TokenizerConfig) -> None:
    """Fail early (before a run folder exists) when `tokenizer.model_file` is unusable."""
    if cfg.model_file:
        _load_one(Path(cfg.model_file).expanduser())


def load_tokenizer(folder: Path, joint: bool) -> Tokenizer:
    """Load the SentencePiece model(s) in `folder`; a missing or corrupt file is one line."""
    procs = {side: _load_one(model_file(folder, side)) for side in model_sides(joint)}
    if joint:
        return Tokenizer(procs[None], procs[None])
    return Tokenizer(procs["src"], procs["tgt"])
