"""Train suite: tokens/s and MFU of a full train_step, ours next to the torch peer."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from attncli.bench.flops import FWD_BWD_FLOP_FACTOR, seq2seq_forward_flops
from attncli.bench.peer import TorchTransformerPeer
from attncli.bench.timing import MEMORY_METHOD, Timing, measure
from attncli.core.config import Config
from attncli.core.device import resolve_pad_multiple
from attncli.core.memory import peak_resident_bytes
from attncli.core.text import EOS_ID, PAD_ID
from attncli.data.batching import Batch, collate, token_batches
from attncli.model.transformer import Seq2SeqTransformer
from attncli.training.distributed import SummedLoss
from attncli.training.optim import make_optimizer
from attncli.training.step import train_step

SENTENCE_LENGTHS = (20, 30)  # synthetic sentences: subwords, like a typical Multi30k pair
FLOPS_CONVENTION = ("3 x forward model FLOPs (see attncli.bench.seq2seq_forward_flops): matmuls "
                    "of projections, feed-forward, output layer and attention over real tokens")
PROCESS_MEMORY_METHOD = ("the bench process's peak resident memory so far (getrusage ru_maxrss), "
                         "after the row's timing: what a system monitor sees, libraries and "
                         "earlier rows included")


def synthetic_batches(vocab: int, batch_tokens: int, count: int, seed: int, *,
                      lengths: tuple[int, int] = SENTENCE_LENGTHS, multiple: int = 1
                      ) -> list[Batch]:
    """``count`` token batches of random sentences, cut by the trainer's own `token_batches`.

    Target lengths are uniform in ``lengths``, sources within ±3 of their target, ids drawn
    from the real (non-special) vocabulary: realistic shapes and padding, no data needed.
    The ``count`` batches with the most target tokens are kept (the last batch of a cut is
    often short); by sentence count they were the batches of the shortest sentences only.
    """
    rng = random.Random(seed)
    n = count * (batch_tokens // (lengths[0] + 1) + 1) * 2
    tgt = [[rng.randrange(EOS_ID + 1, vocab) for _ in range(rng.randint(*lengths))]
           for _ in range(n)]
    src = [[rng.randrange(EOS_ID + 1, vocab)
            for _ in range(max(1, len(t) + rng.randint(-3, 3)))] + [EOS_ID] for t in tgt]
    cut = token_batches([len(s) for s in src], [len(t) for t in tgt], batch_tokens, seed=seed,
                        epoch=0, multiple=multiple)
    cut.sort(key=lambda ids: sum(len(tgt[i]) for i in ids), reverse=True)
    return [collate([src[i] for i in ids], [tgt[i] for i in ids], multiple)
            for ids in cut[:count]]


def _train_runner(model: nn.Module, cfg: Config, batches: list[Batch], *, device: torch.device,
                  precision: str, seen: list[Batch]) -> Callable[[], object]:
    """One optimizer update per call, cycling through ``batches``; ``seen`` logs which."""
    optimizer = make_optimizer(model, cfg.train)
    loss_fn = SummedLoss(model)

    def step() -> None:
        batch = batches[len(seen) % len(batches)]
        seen.append(batch)
        train_step(loss_fn, optimizer, [batch], cfg=cfg.train, lr=cfg.train.lr, device=device,
                   precision=precision)
    return step


def run_train_suite(cfg: Config, device: torch.device, precision: str, *, warmup: int,
                    repeats: int, peak: tuple[float, str], num_batches: int = 4
                    ) -> dict[str, Any]:
    """Tokens/s and MFU of `train_step` for our model and the `TorchTransformerPeer`.

    Both see the same batches in the same order, the same precision and optimizer. Rates are
    per timed step (its own target tokens and FLOPs over its own time), then the median.
    Warm-up covers every batch at least once: the first step of each new shape pays for
    kernel selection (oneDNN builds a kernel per shape on CPU), which is not training speed.
    """
    vocab = cfg.tokenizer.vocab_size
    multiple = resolve_pad_multiple(cfg.train.pad_multiple, device, precision)
    batches = synthetic_batches(vocab, cfg.train.batch_tokens, num_batches, cfg.train.seed,
                                multiple=multiple)
    warmup_steps = max(warmup, len(batches))
    flops = {id(b): FWD_BWD_FLOP_FACTOR * seq2seq_forward_flops(cfg.model, vocab, b)
             for b in batches}
    peak_flops, peak_source = peak
    rows = []
    peer_skipped = _peer_problem(cfg)
    for name, build in _timed_models(peer_skipped):
        torch.manual_seed(cfg.train.seed)
        model = build(cfg.model, vocab, vocab, PAD_ID).to(device)
        seen: list[Batch] = []
        runner = _train_runner(model, cfg, batches, device=device, precision=precision,
                               seen=seen)
        timing = measure(runner, warmup_steps, repeats, device, memory=True)
        timed = seen[warmup_steps: warmup_steps + repeats]
        tokens_per_s = [b.num_tgt_tokens / t for b, t in zip(timed, timing.times_s, strict=True)]
        flops_per_s = [flops[id(b)] / t for b, t in zip(timed, timing.times_s, strict=True)]
        rows.append({
            "model": name,
            "parameters": sum(p.numel() for p in model.parameters()),
            "step": timing.to_json(),
            "tgt_tokens_per_s": _median(tokens_per_s),
            "model_tflops": _median(flops_per_s) / 1e12,
            "mfu": _median(flops_per_s) / peak_flops,
            "process_peak_rss_bytes": peak_resident_bytes(),
        })
        del model
    return {
        "config_model": cfg.model.model_dump(mode="json"),
        "vocab": vocab,
        "batch_tokens": cfg.train.batch_tokens,
        "batches": [_batch_shape(b) for b in batches],
        "precision": precision,
        "pad_multiple": multiple,
        "warmup_steps": warmup_steps,
        "optimizer": "AdamW (attncli.training.optim.make_optimizer)",
        "compile": False,
        "peak_tflops": peak_flops / 1e12,
        "peak_source": peak_source,
        "flops_convention": FLOPS_CONVENTION,
        "memory_method": MEMORY_METHOD[device.type],
        "process_memory_method": PROCESS_MEMORY_METHOD,
        "rows": rows,
        "ours_over_peer": (None if peer_skipped
                           else rows[0]["tgt_tokens_per_s"] / rows[1]["tgt_tokens_per_s"]),
        "peer_skipped": peer_skipped,
    }


def _batch_shape(batch: Batch) -> dict[str, int]:
    return {"sentences": batch.src.size(0), "tgt_tokens": batch.num_tgt_tokens,
            "src_tokens": batch.num_src_tokens, "padded_tgt_len": batch.tgt_out.size(1)}


def _timed_models(peer_skipped: str | None) -> list[tuple[str, type]]:
    models: list[tuple[str, type]] = [("attncli Seq2SeqTransformer", Seq2SeqTransformer)]
    if not peer_skipped:
        models.append(("torch.nn.Transformer peer", TorchTransformerPeer))
    return models


def _peer_problem(cfg: Config) -> str | None:
    """Why the torch.nn.Transformer peer would not be the same model (None: it is)."""
    if cfg.model.scoring != "dot":
        return (f"model.scoring={cfg.model.scoring}: torch.nn.Transformer has dot-product "
                "attention only, so it would time another model")
    return None


def _median(xs: Sequence[float]) -> float:
    return Timing(list(xs)).median_s
