"""Infer suite: greedy and beam-5 decoding at batch 1 and 64 with a fixed output length."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attncli.bench.timing import measure
from attncli.bench.train_suite import SENTENCE_LENGTHS
from attncli.core.config import Config
from attncli.core.device import autocast
from attncli.core.errors import AttncliError
from attncli.core.text import EOS_ID, PAD_ID
from attncli.data.batching import pad
from attncli.decoding.ctranslate2 import (
    banned_pieces,
    build_spec,
    check_exportable,
    open_translator,
    write_spec,
)
from attncli.decoding.search import SearchSettings, beam_search, greedy_search
from attncli.model.transformer import Seq2SeqTransformer

INFER_OUTPUT_LEN = 20  # tokens every synthetic sentence decodes before its forced EOS


def _decode_runner(model: Seq2SeqTransformer, src: Tensor, settings: SearchSettings, *,
                   device: torch.device, precision: str, found: list[list[Any]]
                   ) -> Callable[[], object]:
    """One search call (greedy for beam 1); ``found`` keeps the last call's best hypotheses."""
    def run() -> None:
        with autocast(device, precision):
            if settings.beam == 1:
                best = greedy_search(model, src, settings)
            else:
                best = [hyps[0] for hyps in beam_search(model, src, settings)]
        found[:] = best
    return run


def _row(engine: str, beam: int, batch_size: int, *, timing, tokens: int) -> dict[str, Any]:
    return {"search": engine + ("greedy" if beam == 1 else f"beam {beam}"), "beam": beam,
            "batch": batch_size, "call": timing.to_json(),
            "sentences_per_s": batch_size / timing.median_s, "tgt_tokens": tokens,
            "tgt_tokens_per_s": tokens / timing.median_s}


def _ctranslate2_rows(model: Seq2SeqTransformer, vocab: int, sources: dict[int, Tensor], *,
                      beams: Sequence[int], output_len: int, warmup: int, repeats: int
                      ) -> list[dict[str, Any]]:
    """The same model and sources through its CTranslate2 export (float32), as
    `--engine ctranslate2` runs it: output_len + 1 decoder steps per sentence, as above."""
    import tempfile

    pieces = ["<pad>", "<unk>", "<s>", "</s>", *(f"t{i}" for i in range(EOS_ID + 1, vocab))]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        write_spec(build_spec(model.cpu(), pieces, pieces), Path(folder) / "model", "float32")
        translator = open_translator(Path(folder) / "model", torch.get_num_threads())
        for beam in beams:
            for batch_size, src in sources.items():
                batch = [[pieces[t] for t in row if t != PAD_ID] for row in src.tolist()]
                found: list[Any] = []

                def run(batch=batch, beam=beam, found=found) -> None:
                    found[:] = translator.translate_batch(
                        batch, beam_size=beam, max_decoding_length=output_len + 1,
                        max_batch_size=64, suppress_sequences=banned_pieces(pieces.__getitem__))

                timing = measure(run, warmup, repeats, torch.device("cpu"))
                rows.append(_row("ctranslate2 ", beam, batch_size, timing=timing,
                                 tokens=sum(len(r.hypotheses[0]) for r in found)))
    return rows


def run_infer_suite(cfg: Config, device: torch.device, precision: str, *, warmup: int,
                    repeats: int, batch_sizes: Sequence[int] = (1, 64),
                    beams: Sequence[int] = (1, 5), output_len: int = INFER_OUTPUT_LEN
                    ) -> dict[str, Any]:
    """Greedy (beam 1) and beam search throughput and per-call latency percentiles.

    Random weights would end sentences at random places, so the EOS logit is pushed down to
    -1e4 through the output bias: every hypothesis then runs ``output_len`` tokens and the
    forced EOS (max_len_a=0, max_len_b=output_len), a known number of decoder steps. Tokens
    are counted from what the search returned (best hypothesis, its EOS included, as the
    train suite counts target tokens). Both searches decode the same sources.
    """
    vocab = cfg.tokenizer.vocab_size
    torch.manual_seed(cfg.train.seed)
    model = Seq2SeqTransformer(cfg.model, vocab, vocab, PAD_ID).to(device).eval()
    with torch.no_grad():
        model.output_bias[EOS_ID] = -1e4
    rng = random.Random(cfg.train.seed)
    sources = {n: pad([[rng.randrange(EOS_ID + 1, vocab)
                        for _ in range(rng.randint(*SENTENCE_LENGTHS))] + [EOS_ID]
                       for _ in range(n)]).to(device)  # (n, src_len)
               for n in batch_sizes}
    rows = []
    for beam in beams:
        for batch_size, src in sources.items():
            found: list[Any] = []
            settings = SearchSettings(max_len_a=0, max_len_b=output_len, beam=beam)
            runner = _decode_runner(model, src, settings, device=device, precision=precision,
                                    found=found)
            timing = measure(runner, warmup, repeats, device)
            rows.append(_row("", beam, batch_size, timing=timing,
                             tokens=sum(len(h.tokens) + 1 for h in found)))
    skipped = _ctranslate2_problem(cfg)
    if device.type == "cpu" and importlib.util.find_spec("ctranslate2") is not None and not skipped:
        try:
            rows += _ctranslate2_rows(model, vocab, sources, beams=beams, output_len=output_len,
                                      warmup=warmup, repeats=repeats)
        except OSError as err:  # its export goes to a temporary folder (TMPDIR) first
            skipped = f"its export to a temporary folder failed ({err.strerror}); check TMPDIR"
    return {
        "config_model": cfg.model.model_dump(mode="json"),
        "vocab": vocab,
        "precision": precision,
        "source_lengths": list(SENTENCE_LENGTHS),
        "max_len_a": 0,
        "max_len_b": output_len,
        "eos_suppressed": True,
        "use_cache": True,
        "rows": rows,
        "ctranslate2_skipped": skipped,
    }


def _ctranslate2_problem(cfg: Config) -> str | None:
    """Why this model has no CTranslate2 export to time (None: it has one), as `export` says."""
    try:
        check_exportable(cfg)
    except AttncliError as err:
        return str(err)
    return None
