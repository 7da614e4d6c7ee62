"""Infer suite: greedy and beam-5 decoding at batch 1 and 64 with a fixed output length."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from attncli.batching import pad
from attncli.bench.train_suite import SENTENCE_LENGTHS
from attncli.config import Config
from attncli.device import autocast
from attncli.model.transformer import Seq2SeqTransformer
from attncli.timing import measure
from attncli.tokenizer import EOS_ID, PAD_ID


def _decode_runner(model: Seq2SeqTransformer, src: Tensor, beam: int, output_len: int,
                   device: torch.device, precision: str, found: list[list[Any]]
                   ) -> Callable[[], object]:
    """One search call (greedy for beam 1); ``found`` keeps the last call's best hypotheses."""
    from attncli.search import beam_search, greedy_search

    def run() -> None:
        with autocast(device, precision):
            if beam == 1:
                best = greedy_search(model, src, 0, output_len)
            else:
                best = [hyps[0] for hyps in beam_search(model, src, beam, 0, output_len)]
        found[:] = best
    return run


def run_infer_suite(cfg: Config, device: torch.device, precision: str, warmup: int,
                    repeats: int, batch_sizes: Sequence[int] = (1, 64),
                    beams: Sequence[int] = (1, 5), output_len: int = 20) -> dict[str, Any]:
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
            timing = measure(_decode_runner(model, src, beam, output_len, device, precision,
                                            found), warmup, repeats, device)
            tokens = sum(len(h.tokens) + 1 for h in found)
            rows.append({
                "search": "greedy" if beam == 1 else f"beam {beam}",
                "beam": beam,
                "batch": batch_size,
                "call": timing.to_json(),
                "sentences_per_s": batch_size / timing.median_s,
                "tgt_tokens": tokens,
                "tgt_tokens_per_s": tokens / timing.median_s,
            })
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
    }
