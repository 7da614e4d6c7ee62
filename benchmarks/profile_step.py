"""Where a small.yaml training step goes: torch.profiler's per-op table of a few real updates.

    python benchmarks/profile_step.py --precision fp32            # the path of AVX2-only CPUs
    python benchmarks/profile_step.py --precision bf16 --steps 20 --rows 30

The model, optimizer and `train_step` are attncli's own; batches are synthetic sentences cut by
the trainer's `token_batches` (see `attncli.bench.train_suite.synthetic_batches`), padded to
the multiple `train.pad_multiple: auto` picks for that precision. Each shape is stepped once
before profiling, so oneDNN's per-shape kernel generation is not counted. Prints the machine
line first: label every table with it in benchmarks/MEASUREMENTS.md.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from pathlib import Path

import torch

from attncli.bench.train_suite import synthetic_batches
from attncli.core.config_files import load_config
from attncli.core.device import cpu_supports_bf16, resolve_pad_multiple
from attncli.core.malloc import keep_freed_memory
from attncli.core.text import PAD_ID
from attncli.model import loss
from attncli.model.transformer import Seq2SeqTransformer
from attncli.training.distributed import SummedLoss
from attncli.training.optim import make_optimizer
from attncli.training.step import compile_loss, train_step

REPO = Path(__file__).resolve().parent.parent


def machine_line() -> str:
    """CPU model, torch's kernel level, bf16 support, threads: the label of every figure."""
    model = platform.processor() or "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return (f"{model}; torch {torch.__version__}, capability "
            f"{torch.backends.cpu.get_cpu_capability()}, bf16 {cpu_supports_bf16()}, "
            f"{torch.get_num_threads()} threads")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "small.yaml"))
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=10, help="profiled updates")
    parser.add_argument("--batches", type=int, default=8, help="distinct batch shapes")
    parser.add_argument("--rows", type=int, default=25, help="ops in the table")
    parser.add_argument("--compile", action="store_true", help="train.compile (inductor)")
    parser.add_argument("--chunk-rows", type=int, help="the chunked loss's rows per chunk")
    parser.add_argument("--flush-denormal", action="store_true",
                        help="torch.set_flush_denormal(True) before training")
    parser.add_argument("--shapes", action="store_true", help="one row per op and input shape")
    args = parser.parse_args()
    keep_freed_memory()  # as the CLI does before any command
    if args.flush_denormal:
        torch.set_flush_denormal(True)
    cfg = load_config(Path(args.config), [])
    if args.chunk_rows:
        loss.CHUNK_ROWS = args.chunk_rows
    device, vocab = torch.device("cpu"), cfg.tokenizer.vocab_size
    multiple = resolve_pad_multiple(cfg.train.pad_multiple, device, args.precision)
    batches = synthetic_batches(vocab, cfg.train.batch_tokens, args.batches, cfg.train.seed,
                                multiple=multiple)
    torch.manual_seed(cfg.train.seed)
    model = Seq2SeqTransformer(cfg.model, vocab, vocab, PAD_ID)
    if args.compile:
        compile_loss(model)
    loss_fn, optimizer = SummedLoss(model), make_optimizer(model, cfg.train)

    def step(i: int) -> None:
        train_step(loss_fn, optimizer, [batches[i % len(batches)]], cfg=cfg.train,
                   lr=cfg.train.lr, device=device, precision=args.precision)

    for i in range(2 * len(batches)):  # every shape seen (and compiled) before profiling
        step(i)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=args.shapes) as prof:
        for i in range(args.steps):
            step(i)
    tokens = sum(batches[i % len(batches)].num_tgt_tokens for i in range(args.steps))
    ops = sorted(prof.key_averages(group_by_input_shape=args.shapes),
                 key=lambda e: e.self_cpu_time_total, reverse=True)
    total_us = sum(e.self_cpu_time_total for e in ops)
    print(machine_line())
    print(f"{args.precision}, pad multiple {multiple}, compile {args.compile}: {args.steps} "
          f"updates, {tokens} target tokens, {total_us / 1e3 / args.steps:.1f} ms of ops per "
          f"update\n")
    print("| op | shapes | ms per update | share | calls per update |")
    print("| --- | --- | ---: | ---: | ---: |")
    for e in ops[: args.rows]:
        shapes = str(e.input_shapes) if args.shapes else ""
        print(f"| {e.key} | {shapes} | {e.self_cpu_time_total / 1e3 / args.steps:.1f} | "
              f"{e.self_cpu_time_total / total_us:.1%} | {e.count / args.steps:g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
