"""SentencePiece subwords: train on the training split, save in the run folder, load again.

Special ids are fixed so that the model, batching and search agree without asking:
pad = 0, unk = 1, bos = 2, eos = 3.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from attncli.atomic import atomic_write_bytes
from attncli.config import TokenizerConfig
from attncli.errors import AttncliError
from attncli.runs import RunPaths

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
# Languages written with full-width punctuation (，。！？), which NFKC would turn into ASCII.
FULL_WIDTH_PUNCTUATION = {"zh", "ja", "ko"}


def base_language(code: str) -> str:
    """'zh-Hant' -> 'zh', 'pt_BR' -> 'pt'."""
    return code.lower().replace("_", "-").split("-")[0]


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


class Tokenizer:
    """Source and target SentencePiece models (the same object when the vocabulary is joint)."""

    def __init__(self, src: spm.SentencePieceProcessor, tgt: spm.SentencePieceProcessor):
        self.src, self.tgt = src, tgt
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

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
        return [ids + [EOS_ID] for ids in self.src.encode(list(texts))]

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids without BOS/EOS; batching adds them for teacher forcing."""
        return self.tgt.encode(list(texts))

    def decode_tgt(self, ids: Sequence[int]) -> str:
        """Ids (BOS/EOS/pad are dropped) -> detokenized text."""
        return self.tgt.decode([i for i in ids if i > EOS_ID])

    def src_pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.src.id_to_piece(int(i)) for i in ids]

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.tgt.id_to_piece(int(i)) for i in ids]


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
            input_sentence_size=2_000_000,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            num_threads=2,
            minloglevel=2,
        )
    except RuntimeError as err:
        raise AttncliError(f"SentencePiece training failed: {str(err).splitlines()[0]}") from None
    return model.getvalue()


def train_tokenizer(cfg: TokenizerConfig, src_texts: Sequence[str], tgt_texts: Sequence[str],
                    paths: RunPaths, languages: tuple[str, str]) -> Tokenizer:
    """Train the model(s) on the training split and save them into the run folder.

    `languages` (source, target) choose the normalization when it is `auto`.

    With `tokenizer.model_file` the given model is checked and copied instead of training one.
    """
    if cfg.model_file:
        check_model_file(cfg)
        atomic_write_bytes(paths.spm_model(), Path(cfg.model_file).read_bytes())
    elif cfg.joint:
        atomic_write_bytes(paths.spm_model(), _train_one([*src_texts, *tgt_texts], cfg,
                                                         languages))
    else:
        atomic_write_bytes(paths.spm_model("src"), _train_one(src_texts, cfg, languages[:1]))
        atomic_write_bytes(paths.spm_model("tgt"), _train_one(tgt_texts, cfg, languages[1:]))
    return load_tokenizer(paths, cfg.joint)


def _load_one(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise AttncliError(f"{path}: SentencePiece model missing")
    proc = spm.SentencePieceProcessor()
    try:
        proc.load(str(path))
    except (RuntimeError, OSError) as err:
        raise AttncliError(f"{path}: not a valid SentencePiece model ({str(err)[:80]})") from None
    if proc.pad_id() != PAD_ID or proc.eos_id() != EOS_ID or proc.bos_id() != BOS_ID:
        raise AttncliError(f"{path}: SentencePiece model has other special ids than "
                           f"pad={PAD_ID} unk={UNK_ID} bos={BOS_ID} eos={EOS_ID}")
    return proc


def check_model_file(cfg: TokenizerConfig) -> None:
    """Fail early (before a run folder exists) when `tokenizer.model_file` is unusable."""
    if cfg.model_file:
        _load_one(Path(cfg.model_file))


def load_tokenizer(paths: RunPaths, joint: bool) -> Tokenizer:
    """Load the run's SentencePiece model(s); a missing or corrupt file is a one-line error."""
    if joint:
        proc = _load_one(paths.spm_model())
        return Tokenizer(proc, proc)
    return Tokenizer(_load_one(paths.spm_model("src")), _load_one(paths.spm_model("tgt")))
