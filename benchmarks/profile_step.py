"""Where a training step goes: torch.profiler's per-op table of a few updates, the time outside
any op (Python, dispatch), the ops per update and the data feed's time.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/profile_step.py --real    # small.yaml
    python benchmarks/profile_step.py --config configs/en-zh.yaml --real --steps 40
    python benchmarks/profile_step.py --precision bf16 --steps 20 --rows 30     # synthetic

The model, optimizer and `train_step` are attncli's own, in the config's precision (`auto`
decided as training decides it, from the CPU's kind; `--precision` overrides). With `--real`
the updates are the run's first ones: the config's training data from the token cache (made
as `attncli train` makes it), batched and collated by the trainer's `UpdateFeed`, whose time
is the data feed's. Without it, batches are synthetic sentences cut by the trainer's
`token_batches` (`attncli.bench.train_suite.synthetic_batches`). Every update is stepped once
before profiling (`--skip` of them), so oneDNN's per-shape kernel generation is not counted,
each at the rate the run gives that update (its warm-up), as the weights a run has then matter
to the arithmetic's speed; the profiled updates are first timed without the profiler: that wall
time minus the ops' summed time is what runs outside any op. Prints the machine first: label
every table with it in benchmarks/MEASUREMENTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from attncli.bench.train_suite import synthetic_batches
from attncli.core.config_files import load_config
from attncli.core.cpu_kind import detect_cpu_kind
from attncli.core.device import device_name, resolve_pad_multiple, resolve_precision
from attncli.core.host import host_description
from attncli.core.malloc import keep_freed_memory
from attncli.core.text import PAD_ID
from attncli.model import loss
from attncli.model.transformer import Seq2SeqTransformer
from attncli.training.distributed import SummedLoss, World
from attncli.training.lr_schedule import inverse_sqrt_lr
from attncli.training.optim import make_optimizer
from attncli.training.step import UpdateShare, compile_loss, train_step

REPO = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")


@dataclass
class Updates:
    """The updates to step: each a list of batches and its share, and the feed's seconds."""

    batches: list[list]
    shares: list[UpdateShare]
    feed_s: list[float]
    model: Seq2SeqTransformer


def machine_line() -> str:
    """The label of every figure: the CPU's name, identity, threads per core, kernel flags and
    kind, torch's version and kernel level, and the threads it runs."""
    host = host_description()
    return (f"{device_name(CPU)} (family {host['cpu_family']} model {host['cpu_model']}, "
            f"{host['threads_per_core']} thread(s) per core, flags "
            f"{' '.join(host['cpu_flags']) or 'none of the kernel flags'}, CPU kind "
            f"{detect_cpu_kind().describe()}); torch {torch.__version__}, ATen "
            f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads")


def real_updates(cfg, count: int, multiple: int) -> Updates:
    """The run's first `count` updates, from the token cache through the trainer's feed."""
    from attncli.data.corpus import prepare_training_data
    from attncli.model.build import build_model
    from attncli.training.feed import UpdateFeed

    data = prepare_training_data(cfg, lambda line: None)
    feed = UpdateFeed(data.train, cfg.train, World(), pad_multiple=multiple, workers=0,
                      device=CPU)
    stream, found = feed.updates(0, 0), Updates([], [], [], None)
    for _ in range(count):
        start = time.perf_counter()
        update = next(stream)
        found.feed_s.append(time.perf_counter() - start)
        found.batches.append(update.batches)
        found.shares.append(UpdateShare(update.tokens, 1, update.counted))
    torch.manual_seed(cfg.train.seed)
    found.model = build_model(cfg, data.models.tokenizer())
    return found


def synthetic_updates(cfg, count: int, shapes: int, multiple: int) -> Updates:
    vocab = cfg.tokenizer.vocab_size
    batches = synthetic_batches(vocab, cfg.train.batch_tokens, shapes, cfg.train.seed,
                                multiple=multiple)
    torch.manual_seed(cfg.train.seed)
    model = Seq2SeqTransformer(cfg.model, vocab, vocab, PAD_ID)
    return Updates([[batches[i % len(batches)]] for i in range(count)],
                   [UpdateShare() for _ in range(count)], [0.0] * count, model)


def profiled(step: Callable[[int], None], first: int, steps: int):
    """(the profiler's op averages, the unprofiled wall seconds) of updates first.. first+steps:
    timed first without the profiler, then profiled (stepped again: the same shapes)."""
    start = time.perf_counter()
    for i in range(first, first + steps):
        step(i)
    wall_s = time.perf_counter() - start
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(first, first + steps):
            step(i)
    return prof.key_averages(), wall_s


def print_table(ops, wall_s: float, updates: Updates, args, *, header: str) -> None:
    ops = sorted(ops, key=lambda e: e.self_cpu_time_total, reverse=True)
    total_us = sum(e.self_cpu_time_total for e in ops)
    steps, first = args.steps, args.skip
    tokens = sum(b.num_tgt_tokens for i in range(first, first + steps)
                 for b in updates.batches[i])
    feed = sum(updates.feed_s[first: first + steps])
    per = 1e3 / steps
    print(machine_line())
    print(f"{header}: {steps} updates after {first}, {tokens:,} target tokens; per update: "
          f"{wall_s * per:.1f} ms wall unprofiled, {total_us / 1e3 / steps:.1f} ms in ops, "
          f"{wall_s * per - total_us / 1e3 / steps:.1f} ms outside any op "
          f"({1 - total_us / 1e6 / wall_s:.1%}), {sum(e.count for e in ops) / steps:,.0f} op "
          f"calls; data feed {feed * per:.1f} ms (not in the wall figure)\n")
    print("| op | ms per update | share of op time | calls per update |")
    print("| --- | ---: | ---: | ---: |")
    for e in ops[: args.rows]:
        print(f"| {e.key} | {e.self_cpu_time_total / 1e3 / steps:.2f} | "
              f"{e.self_cpu_time_total / total_us:.1%} | {e.count / steps:g} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "small.yaml"))
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"])
    parser.add_argument("--real", action="store_true", help="the run's first updates")
    parser.add_argument("--steps", type=int, default=20, help="profiled updates")
    parser.add_argument("--skip", type=int, default=20, help="updates stepped before them")
    parser.add_argument("--batches", type=int, default=8, help="synthetic batch shapes")
    parser.add_argument("--rows", type=int, default=25, help="ops in the table")
    parser.add_argument("--compile", action="store_true", help="train.compile (inductor)")
    parser.add_argument("--chunk-rows", type=int, help="the chunked loss's rows per chunk")
    args = parser.parse_args()
    keep_freed_memory()  # as the CLI does before any command
    cfg = load_config(Path(args.config), [])
    if args.chunk_rows:
        loss.CHUNK_ROWS = args.chunk_rows
    precision = resolve_precision(args.precision or cfg.train.precision, CPU)
    multiple = resolve_pad_multiple(cfg.train.pad_multiple, CPU, precision)
    count = args.skip + args.steps
    updates = (real_updates(cfg, count, multiple) if args.real
               else synthetic_updates(cfg, count, args.batches, multiple))
    if args.compile:
        compile_loss(updates.model)
    loss_fn, optimizer = SummedLoss(updates.model), make_optimizer(updates.model, cfg.train)

    def step(i: int) -> None:  # the rate of the run's update i + 1 (warm-up): not the peak
        lr = inverse_sqrt_lr(i + 1, cfg.train.lr, cfg.train.warmup_steps)
        train_step(loss_fn, optimizer, updates.batches[i], cfg=cfg.train, lr=lr,
                   device=CPU, precision=precision, share=updates.shares[i])

    for i in range(count):  # every update seen (its shapes compiled) before profiling
        step(i)
    ops, wall_s = profiled(step, args.skip, args.steps)
    source = "real batches" if args.real else f"{args.batches} synthetic batch shapes"
    print_table(ops, wall_s, updates, args,
                header=f"{Path(args.config).name}, {precision}, pad multiple {multiple}, "
                f"compile {args.compile}, {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
