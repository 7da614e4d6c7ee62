"""Translate a split with a trained run and score it with sacreBLEU (BLEU and chrF).

The helpers are shared: the trainer scores greedy BLEU on validation with ``translate_texts``
and ``corpus_scores`` on the model it holds in memory; ``translate`` uses ``encode_sources``.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from attncli.core.config import DecodeConfig
from attncli.core.device import resolve_decode_precision, resolve_device
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_json, atomic_write_text, output_folder_problem
from attncli.core.text import base_language
from attncli.data.tokenizer import EOS_ID, Tokenizer
from attncli.decoding.search import Hypothesis, SentenceDone, translate_ids
from attncli.model.transformer import Seq2SeqTransformer
from attncli.runs.average import averaged_facts, describe
from attncli.runs.trained import TrainedModel, load_trained_model

# Positions kept free when a long source is cut: the model never saw sources near the limit,
# and a few spare positions cost nothing.
SOURCE_MARGIN = 8

# sacreBLEU tokenizers to try, best first, for targets that do not separate words by spaces.
_CJK_TOKENIZERS = {"zh": ("zh",), "ja": ("ja-mecab", "char"), "ko": ("ko-mecab", "char")}

# Called for each source that was cut: (index in the input, its subwords, the subwords kept;
# the EOS every source ends with is not counted).
TruncateHook = Callable[[int, int, int], None]


@functools.cache
def bleu_tokenizer(tgt_lang: str) -> str:
    """The sacreBLEU tokenizer for a target language: 13a, or zh / ja-mecab / ko-mecab / char.

    MeCab needs optional packages (``sacrebleu[ja]``, ``sacrebleu[ko]``); without them
    Japanese and Korean fall back to characters.
    """
    from sacrebleu.metrics import BLEU

    for name in _CJK_TOKENIZERS.get(base_language(tgt_lang), ("13a",)):
        try:
            BLEU(tokenize=name)
        except (ImportError, RuntimeError):
            continue
        return name
    return "char"


def corpus_scores(hyps: Sequence[str], refs: Sequence[str], tgt_lang: str) -> dict[str, Any]:
    """Corpus BLEU and chrF of detokenized hypotheses against one reference each.

    Returns bleu, chrf, signature (BLEU's sacreBLEU signature) and chrf_signature.
    """
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    if not hyps:
        raise AttncliError("nothing to score: no sentences")
    bleu, chrf = BLEU(tokenize=bleu_tokenizer(tgt_lang)), CHRF()
    bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    chrf_score = chrf.corpus_score(list(hyps), [list(refs)])
    return {
        "bleu": bleu_score.score,
        "chrf": chrf_score.score,
        "signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def encode_sources(tokenizer: Tokenizer, texts: Sequence[str], max_positions: int,
                   on_truncate: TruncateHook | None = None) -> list[list[int]]:
    """Source ids ending in EOS, each cut to fit the model's positions (minus a margin)."""
    kept = source_subword_limit(max_positions)
    ids = tokenizer.encode_src(texts)
    for i, seq in enumerate(ids):
        if len(seq) > kept + 1:
            ids[i] = [*seq[:kept], EOS_ID]
            if on_truncate is not None:
                on_truncate(i, len(seq) - 1, kept)
    return ids


def stdout_json(record: dict[str, Any]) -> str:
    """`record` as one JSON line for standard output: its text as it is where stdout is UTF-8,
    else as JSON escapes (the escapes that stdout falls back on are not JSON's)."""
    from attncli.core.console import writes_utf8

    return json.dumps(record, ensure_ascii=not writes_utf8(sys.stdout))


def source_subword_limit(max_positions: int) -> int:
    """The most subwords of a source that are translated (then its EOS)."""
    return max(max_positions - SOURCE_MARGIN, 2) - 1


def translate_texts(
    model: Seq2SeqTransformer,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    cfg: DecodeConfig,
    beam: int,
    nbest: int,
    device: torch.device | str,
    need_attention: bool = False,
    on_truncate: TruncateHook | None = None,
    progress: Callable[[int], None] | None = None,
    precision: str = "fp32",
) -> list[list[Hypothesis]]:
    """Tokenize, decode (greedy when ``beam == 1``) and return ``nbest`` hypotheses per text.

    Detokenize a hypothesis with ``tokenizer.decode_tgt(h.tokens)``.
    """
    src_ids = encode_sources(tokenizer, texts, model.cfg.max_positions, on_truncate)
    return translate_ids(model, src_ids, cfg, beam, nbest, device, need_attention, progress,
                         precision)


ENGINES = ("torch", "ctranslate2")


def load_for_decoding(run_dir: Path, device: str, checkpoint: str, engine: str = "torch",
                      exported: Path | None = None,
                      no_repeat_ngram: int | None = None) -> TrainedModel:
    """The run, ready to translate with attncli's own decoder (`torch`) or with its
    CTranslate2 export (`ctranslate2`, from `exported` or the run's `ctranslate2/` folder).

    ``no_repeat_ngram`` (``--no-repeat-ngram``) replaces the run's
    ``decode.no_repeat_ngram_size`` before either engine reads its decode settings."""
    if exported is not None and engine == "torch":  # it would be ignored: torch scored instead
        raise AttncliError(f"--exported {exported} needs --engine ctranslate2")
    if engine == "torch":
        trained = load_trained_model(Path(run_dir), resolve_device(device), checkpoint)
    elif device not in ("auto", "cpu"):
        raise AttncliError(f"--device {device}: attncli runs CTranslate2 on the CPU only")
    else:
        trained = load_trained_model(Path(run_dir), torch.device("cpu"), checkpoint,
                                     weights=False)
    if no_repeat_ngram is not None:
        trained.config.decode.no_repeat_ngram_size = no_repeat_ngram
    if engine == "torch":
        return trained
    from attncli.decoding.ctranslate2 import check_made_from, open_engine

    trained.engine = open_engine(trained.paths.root, exported, trained.tokenizer,
                                 trained.config.decode)
    made_from = trained.engine.metadata["checkpoint"]
    if checkpoint != "auto" and made_from != trained.checkpoint.name:
        raise AttncliError(
            f"--checkpoint {checkpoint} is {trained.checkpoint.name}, but the CTranslate2 "
            f"export was made from {made_from}: export it again (`attncli export {run_dir} "
            f"--to ctranslate2 --checkpoint {checkpoint}`), or leave --checkpoint out to use "
            f"the export as it is")
    check_made_from(trained.engine, Path(run_dir), trained.paths.checkpoints / made_from)
    trained.checkpoint = Path(made_from)
    return trained


def decode_ids(trained: TrainedModel, src_ids: list[list[int]], beam: int, nbest: int,
               need_attention: bool = False, progress: Callable[[int], None] | None = None,
               done: SentenceDone | None = None) -> list[list[Hypothesis]]:
    """`search.translate_ids` on the run's model, or the same through its exported engine;
    ``done(i, hypotheses)`` as soon as sentence i's are final."""
    if trained.engine is None:
        return translate_ids(trained.model, src_ids, trained.config.decode, beam, nbest,
                             trained.device, need_attention, progress, decode_precision(trained),
                             done)
    if need_attention:
        raise AttncliError("attention views need --engine torch (CTranslate2 returns no "
                           "attention weights here)")
    found = trained.engine.translate_ids(src_ids, beam, nbest, done)
    if progress is not None:
        progress(len(src_ids))
    return found


def decode_precision(trained: TrainedModel) -> str:
    """The precision eval and translate decode in (see ``device.resolve_decode_precision``);
    with CTranslate2, the type it computes in (float16 weights compute in float32 on a CPU
    without float16 kernels: the stored type would not say what ran)."""
    if trained.engine is not None:
        return trained.engine.translator.compute_type
    return resolve_decode_precision(trained.config.train.precision, trained.device)


def evaluate_split(
    trained: TrainedModel,
    texts_src: Sequence[str],
    texts_ref: Sequence[str],
    beam: int,
    on_truncate: TruncateHook | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Translate ``texts_src`` with the run's decode settings and precision and score against
    ``texts_ref``.

    Returns the scores (see ``corpus_scores``) plus beam, no_repeat_ngram_size, sentences,
    seconds, sentences_per_s, and ``hypotheses``: the detokenized best translations in input order.
    """
    cfg = trained.config
    start = time.perf_counter()
    src_ids = encode_sources(trained.tokenizer, texts_src, cfg.model.max_positions, on_truncate)
    found = decode_ids(trained, src_ids, beam, 1, progress=progress)
    seconds = time.perf_counter() - start
    hyps = [trained.tokenizer.decode_tgt(h[0].tokens) for h in found]
    return {
        **corpus_scores(hyps, texts_ref, cfg.data.tgt),
        "beam": beam,
        "no_repeat_ngram_size": cfg.decode.no_repeat_ngram_size,
        "sentences": len(hyps),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(hyps) / seconds, 2) if seconds > 0 else None,
        "hypotheses": hyps,
    }


def _averaged(trained: TrainedModel) -> dict[str, Any]:
    """{"averaged": its steps and validation scores} when the checkpoint is an averaged one
    (see `average.averaged_facts`), so the report says what was scored."""
    facts = averaged_facts(trained.checkpoint) if trained.engine is None else {}
    return {"averaged": facts} if facts else {}


def _blocking(cfg: DecodeConfig) -> str:
    """How a title names the n-gram blocking, when it is on."""
    return f", no repeated {n}-grams" if (n := cfg.no_repeat_ngram_size) else ""


def _data_label(data: str) -> str:
    """A file-name part for `--data`: its file or folder name, without the extension."""
    label = re.sub(r"\.(jsonl|json|tsv|txt)$", "", Path(data.rstrip("/")).name)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label) or "data"


def _warn(truncated: list[int], limit: int, left_out: int) -> None:
    """What the scores do not say by themselves: cut sources, pairs left out."""
    if truncated:
        print(f"warning: {len(truncated)} source sentence(s) longer than {limit} subwords were "
              f"cut to fit the model (first: line {truncated[0] + 1})", file=sys.stderr)
    if left_out:
        print(f"warning: {left_out} pair(s) with an empty side were left out of the scores and "
              "of the hypotheses file", file=sys.stderr)


def eval_command(run_dir: Path, split: str, data: str | None, beam: int | None, json_out: bool,
                 device: str, checkpoint: str = "auto", engine: str = "torch",
                 exported: Path | None = None, no_repeat_ngram: int | None = None) -> None:
    """`attncli eval`: score a split, write eval/<split>.hyp.txt and eval/<split>.json
    (eval/<split>-<data>.* for a split from --data, so the run's own scores stay)."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from attncli.data.sources import load_split

    trained = load_for_decoding(Path(run_dir), device, checkpoint, engine, exported,
                                no_repeat_ngram)
    if problem := output_folder_problem(trained.paths.eval_dir):  # before the decoding
        raise AttncliError(f"{trained.paths.eval_dir}: {problem}; eval writes its scores there")
    config = trained.config
    data_cfg = config.data.model_copy(update={split: data}) if data else config.data
    parallel = load_split(data_cfg, split)
    beam = beam or config.decode.beam
    err = Console(stderr=True)

    truncated: list[int] = []
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(f"translating {split} (beam {beam})", total=len(parallel.src))
        result = evaluate_split(
            trained, parallel.src, parallel.tgt, beam,
            on_truncate=lambda i, length, kept: truncated.append(parallel.rows[i]),
            progress=lambda done: bar.advance(task, done),
        )
    _warn(truncated, source_subword_limit(config.model.max_positions), parallel.dropped_empty)
    hyps = result.pop("hypotheses")
    report = {"run": str(run_dir), "checkpoint": trained.checkpoint.name, "data": parallel.name,
              "split": split, "engine": engine, "precision": decode_precision(trained), **result,
              "left_out_empty": parallel.dropped_empty, **_averaged(trained)}
    paths = trained.paths
    name = split if data is None else f"{split}-{_data_label(data)}"
    hyp_file = paths.eval_dir / f"{name}.hyp.txt"
    atomic_write_text(hyp_file, "".join(f"{h}\n" for h in hyps))
    atomic_write_json(paths.eval_dir / f"{name}.json", report)

    if json_out:
        print(stdout_json(report))
        return
    title = (f"{Path(run_dir).name} ({describe(trained.checkpoint)}): {parallel.name} {split}, "
             f"beam {beam}" + _blocking(config.decode))  # its own line: rich wraps table titles
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("BLEU", f"{report['bleu']:.2f}")
    table.add_row("chrF", f"{report['chrf']:.2f}")
    table.add_row("sentences", str(report["sentences"]))
    table.add_row("seconds", f"{report['seconds']:.1f}")
    table.add_row("sentences/s", f"{report['sentences_per_s']}")
    out = Console()
    out.print(title, markup=False, highlight=False, soft_wrap=True)
    out.print(table)
    out.print(f"[dim]{report['signature']}[/dim]")
    out.print(f"[dim]hypotheses: {hyp_file}[/dim]")
