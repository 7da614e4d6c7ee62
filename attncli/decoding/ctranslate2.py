"""CTranslate2: a model written as a CTranslate2 model folder, and translation with that folder.

    attncli export runs/m30k --to ctranslate2 [--quantization int8] [--output DIR] [--force]
    attncli eval runs/m30k --engine ctranslate2          (translate and serve take --engine too)

The model is described through CTranslate2's own spec API (`TransformerSpec`) and written by
its own converter, so the folder is what CTranslate2 itself would write: the layer counts,
heads, pre- or post-norm, the embeddings (shared or not), our sinusoidal position table passed
as it is (CTranslate2's own table interleaves sine and cosine differently), layer norms with
torch's epsilon, and vocabularies listing the run's SentencePiece pieces by id. Sources get our
EOS appended and decoding starts from our BOS, as attncli's own search does.

What `attncli export` writes (the command is attncli/export.py), what `--engine ctranslate2`
decodes with (`CTranslate2Engine`), and what the bench's infer suite times. Which run and
checkpoint an export was made from is checked where a run is opened (`runs.trained`).

`ctranslate2` is an optional extra (`pip install attncli[ct2]`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from attncli.core.errors import AttncliError
from attncli.core.text import BOS_ID, PAD_ID
from attncli.decoding.search import Hypothesis, SentenceDone

if TYPE_CHECKING:  # for the hints only
    import sentencepiece as spm

DEFAULT_FOLDER = "ctranslate2"  # under the run folder
METADATA = "attncli.json"  # what was exported, beside CTranslate2's files
INSTALL_HINT = "CTranslate2 is not installed: pip install 'attncli[ct2]' (or ctranslate2>=4)"


def import_ctranslate2() -> ModuleType:
    """The `ctranslate2` package, or a one-line error naming the extra to install."""
    try:
        import ctranslate2
    except ImportError:
        raise AttncliError(INSTALL_HINT) from None
    return ctranslate2


def quantizations() -> list[str]:
    """The weight types CTranslate2 can store (and `--quantization` takes)."""
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    return list(ACCEPTED_MODEL_TYPES)


def check_exportable(config) -> None:
    """What the format cannot hold, refused with the reason."""
    if config.model.scoring != "dot":
        raise AttncliError(f"model.scoring={config.model.scoring}: CTranslate2's Transformer has "
                           "scaled dot-product attention only; this run cannot be exported")


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    spec.weight = weight.detach().float().numpy()
    if bias is not None:
        spec.bias = bias.detach().float().numpy()


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = norm.weight.detach().float().numpy()
    spec.beta = norm.bias.detach().float().numpy()


def _attention(spec, attention, norm: torch.nn.LayerNorm) -> None:
    """Self-attention: fused q|k|v then out. Cross-attention: q, fused k|v, out."""
    _norm(spec.layer_norm, norm)
    parts = ([attention.qkv] if attention.kind == "self" else [attention.q, attention.kv])
    for linear_spec, linear in zip(spec.linear, [*parts, attention.out], strict=True):
        _linear(linear_spec, linear.weight, linear.bias)


def _feed_forward(spec, ff, norm: torch.nn.LayerNorm) -> None:
    _norm(spec.layer_norm, norm)
    first, _, _, second = ff.net
    _linear(spec.linear_0, first.weight, first.bias)
    _linear(spec.linear_1, second.weight, second.bias)


def pieces(processor: spm.SentencePieceProcessor) -> list[str]:
    """A vocabulary's pieces by id, as CTranslate2's vocabulary files list them."""
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def build_spec(model, src_pieces: list[str], tgt_pieces: list[str]):
    """A `TransformerSpec` holding `model`'s weights and the vocabularies (pieces by id)."""
    import_ctranslate2()
    from ctranslate2.specs import TransformerSpec

    cfg = model.cfg
    spec = TransformerSpec.from_config((cfg.enc_layers, cfg.dec_layers), cfg.heads,
                                       pre_norm=cfg.norm == "pre")
    spec.config.layer_norm_epsilon = model.encoder_layers[0].attn_block.norm.eps
    table = model.positions.table.float().numpy()
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = model.src_embed.weight.detach().float().numpy()
    decoder.embeddings.weight = model.tgt_embed.weight.detach().float().numpy()
    encoder.position_encodings.encodings = table
    decoder.position_encodings.encodings = table
    for layer_spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, layer.attn_block.norm)
        _feed_forward(layer_spec.ffn, layer.ff, layer.ff_block.norm)
    for layer_spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, layer.self_block.norm)
        _attention(layer_spec.attention, layer.cross_attn, layer.cross_block.norm)
        _feed_forward(layer_spec.ffn, layer.ff, layer.ff_block.norm)
    if cfg.norm == "pre":
        _norm(encoder.layer_norm, model.encoder_norm)
        _norm(decoder.layer_norm, model.decoder_norm)
    _linear(decoder.projection, model.output_weight, model.output_bias)
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    return spec


def write_spec(spec, folder: Path, quantization: str) -> None:
    """CTranslate2's converter writes the model folder (checks, quantization, files)."""
    ct2 = import_ctranslate2()

    class _FromSpec(ct2.converters.Converter):
        def _load(self):
            return spec

    _FromSpec().convert(str(folder), quantization=quantization, force=True)  # folder: empty


def open_translator(folder: Path, threads: int):
    """A CPU `ctranslate2.Translator`: one thread per batch and as many batches at once as
    threads, since attncli's limit groups are small batches (benchmarks/MEASUREMENTS.md)."""
    return import_ctranslate2().Translator(str(folder), device="cpu",
                                           inter_threads=max(1, threads), intra_threads=1)


def _read_metadata(path: Path) -> dict[str, Any]:
    """What `export` recorded beside the model, checked: a damaged file is one line."""
    try:
        metadata = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as err:
        raise AttncliError(f"{path}: unreadable ({err}); export again with `attncli export RUN "
                           "--to ctranslate2 --force`") from None
    missing = [key for key in ("checkpoint", "quantization", "max_positions")
               if not isinstance(metadata, dict) or key not in metadata]
    if missing or not isinstance(metadata["max_positions"], int):
        raise AttncliError(f"{path}: not what attncli export writes (missing or wrong: "
                           f"{', '.join(missing) or 'max_positions'}); export again with "
                           "`attncli export RUN --to ctranslate2 --force`")
    return metadata


class CTranslate2Engine:
    """Translates with an exported folder: same tokenizer, beam, length penalty and output
    limits as attncli's own search (`search.translate_ids`), hypotheses in its `Hypothesis`.
    N-gram blocking bans the same tokens, but CTranslate2 normalises the probabilities again
    over the tokens left, where attncli (as fairseq) keeps the model's own log-probabilities:
    with blocking, beam scores, and sometimes the hypothesis ranked first, differ."""

    def __init__(self, folder: Path, tokenizer, decode_cfg, threads: int = 0):
        if not (folder / "model.bin").is_file() or not (folder / METADATA).is_file():
            raise AttncliError(f"{folder}: no CTranslate2 model exported by attncli here; make "
                               f"one with `attncli export RUN --to ctranslate2`")
        self.folder, self.metadata = folder, _read_metadata(folder / METADATA)
        try:
            self.translator = open_translator(folder, threads)
        except RuntimeError as err:  # CTranslate2's own: a damaged or truncated model.bin
            raise AttncliError(f"{folder / 'model.bin'}: unreadable ({err}); export again with "
                               "`attncli export RUN --to ctranslate2 --force`") from None
        self.tokenizer, self.cfg = tokenizer, decode_cfg

    def translate_ids(self, src_ids: Sequence[Sequence[int]], *, beam: int, nbest: int,
                      done: SentenceDone | None = None) -> list:
        """Source ids (ending in EOS) -> `nbest` `Hypothesis` per sentence, in input order;
        `done(i, hypotheses)`, when given, as each sentence's arrive.

        CTranslate2 takes one length limit per batch; attncli's limit grows with each
        sentence's length, so sentences go in groups of equal limit, translated side by side.
        """
        groups: dict[int, list[int]] = {}
        for i, ids in enumerate(src_ids):
            groups.setdefault(self._limit(len(ids)), []).append(i)
        pending = [(rows, self.translator.translate_batch(
            [[self.tokenizer.src.id_to_piece(t) for t in src_ids[i]] for i in rows],
            beam_size=beam, num_hypotheses=nbest, max_decoding_length=limit,
            length_penalty=self.cfg.length_penalty, return_scores=True, max_batch_size=64,
            suppress_sequences=banned_pieces(self.tokenizer.tgt.id_to_piece),
            no_repeat_ngram_size=self.cfg.no_repeat_ngram_size, asynchronous=True))
            for limit, rows in groups.items()]
        results: list = [None] * len(src_ids)
        for rows, futures in pending:
            for i, future in zip(rows, futures, strict=True):
                result = future.result()
                results[i] = [Hypothesis([self.tokenizer.tgt.piece_to_id(p) for p in tokens],
                                         score, float("nan"))
                              for tokens, score in zip(result.hypotheses, result.scores,
                                                       strict=True)]
                if done is not None:
                    done(i, results[i])
        return results

    def _limit(self, src_len: int) -> int:
        """`search.max_output_lengths` for one sentence."""
        import math

        limit = self.metadata["max_positions"] - 1
        return max(1, min(limit, math.floor(self.cfg.max_len_a * src_len + self.cfg.max_len_b)))


def banned_pieces(id_to_piece) -> list[list[str]]:
    """PAD and BOS, which attncli's search never generates (`search._restrict`), banned in
    CTranslate2 too: it chose `<s>` where the model ranked it first, and outputs differed."""
    return [[id_to_piece(PAD_ID)], [id_to_piece(BOS_ID)]]


def open_engine(run_dir: Path, folder: Path | None, tokenizer, decode_cfg) -> CTranslate2Engine:
    """The exported model of `run_dir` (its `ctranslate2/` folder unless `folder` is given)."""
    target = folder or Path(run_dir) / DEFAULT_FOLDER
    if not target.is_dir():
        raise AttncliError(f"{run_dir}: never exported to CTranslate2 ({target} is missing); run "
                           f"`attncli export {run_dir} --to ctranslate2` first")
    return CTranslate2Engine(target, tokenizer, decode_cfg, torch.get_num_threads())
