"""Training speed of this code against another commit: paired whole-process runs.

Each round trains the same config for the same number of updates once with the other commit's
code and once with this tree's, each in a fresh process, alternating so that a drift of the
machine's speed hits both alike. Reported per run: target tokens per second over the whole
training (tokens counted from metrics.jsonl, training seconds without validation or saving),
whole-process wall time, peak resident memory, and the loss at the last update; per pair the
tokens/s ratio. Quote the median ratio. Nothing else heavy may run beside it.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/train_speed.py --ref d483db1
    python benchmarks/train_speed.py --ref d483db1 --set train.precision=fp32 --pairs 1

Each side trains its own tree's copy of the config (as same_curve.py does), so a change of a
shipped config, such as its padding, is part of what is compared; a config the other commit
lacks, or one outside the repository, is used by both. The default config is configs/small.yaml
as it was at d483db1 (benchmarks/configs/), so a later change of the shipped config does not
move the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from same_curve import HERE, checkout

DEFAULT_CONFIG = HERE / "benchmarks" / "configs" / "small-2026-11-24.yaml"


@dataclass
class RunFigures:
    tokens_per_s: float
    wall_s: float
    peak_mib: float
    last_loss: float


def training_throughput(metrics: Path) -> tuple[float, float]:
    """(target tokens per training second over the whole run, loss at the last update).

    Each train event holds the tokens/s of the interval since the one before, so the interval's
    tokens are that rate times its seconds."""
    events = [json.loads(line) for line in metrics.read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    tokens, before = 0.0, 0.0
    for event in train:
        tokens += event["tokens_per_s"] * (event["seconds"] - before)
        before = event["seconds"]
    if not before:
        raise SystemExit(f"{metrics}: no train event to time; give --steps at least the "
                         f"config's train.log_every")
    return tokens / before, train[-1]["loss"]


def train_once(tree: Path, config: Path, settings: list[str], work: Path) -> RunFigures:
    """One fresh `attncli train` process with `tree`'s code; its figures."""
    runs = Path(tempfile.mkdtemp(dir=work))
    command = [sys.executable, "-m", "attncli", "train", str(config), "--name", "speed",
               "--runs-dir", str(runs)]
    for setting in settings:
        command += ["--set", setting]
    env = {**os.environ, "PYTHONPATH": str(tree)}  # cwd is `work`, so PYTHONPATH decides
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: attncli train failed (exit {status})")
    rate, loss = training_throughput(runs / "speed" / "metrics.jsonl")
    return RunFigures(rate, wall, usage.ru_maxrss / 1024, loss)


def config_in(tree: Path, config: Path) -> Path:
    """`tree`'s copy of `config` (a path in this repository), or `config` itself."""
    if not config.is_relative_to(HERE):
        return config
    own = tree / config.relative_to(HERE)
    return own if own.is_file() else config


def row(name: str, runs: list[RunFigures]) -> str:
    rates = [r.tokens_per_s for r in runs]
    return (f"| {name} | {statistics.median(rates):,.0f} ({min(rates):,.0f}–{max(rates):,.0f}) | "
            f"{statistics.median(r.wall_s for r in runs):.1f} | "
            f"{statistics.median(r.peak_mib for r in runs):,.0f} | "
            f"{', '.join(f'{r.last_loss:.6f}' for r in runs)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="git commit to compare with")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=3, help="counted rounds")
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first, not counted")
    parser.add_argument("--set", action="append", default=[], dest="settings")
    args = parser.parse_args()
    config = args.config.resolve()  # the runs' working folder is a temporary one
    settings = [f"train.max_steps={args.steps}", "train.tensorboard=false", *args.settings]
    results: dict[str, list[RunFigures]] = {"ref": [], "here": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        other = checkout(args.ref, Path(tempfile.mkdtemp(dir=work)))
        configs = {"ref": config_in(other, config), "here": config}
        whose = "its own copy" if configs["ref"] != config else "this tree's copy"
        print(f"{args.ref} trains {whose} of {config.name}", flush=True)
        for round_ in range(args.warmup + args.pairs):
            trees = {"ref": other, "here": HERE}
            order = ["ref", "here"] if round_ % 2 == 0 else ["here", "ref"]  # alternate who starts
            pair = {name: train_once(trees[name], configs[name], settings, work)
                    for name in order}
            counted = round_ >= args.warmup
            if counted:
                for name, figures in pair.items():
                    results[name].append(figures)
            print(f"round {round_ + 1}{'' if counted else ' (warm-up)'}: "
                  f"{args.ref} {pair['ref'].tokens_per_s:,.0f}, this tree "
                  f"{pair['here'].tokens_per_s:,.0f} target tokens/s", flush=True)
    ratios = [h.tokens_per_s / r.tokens_per_s
              for h, r in zip(results["here"], results["ref"], strict=True)]
    print("\n| code | target tokens/s, median (min–max) | wall s | peak MiB | last loss |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(row(args.ref, results["ref"]))
    print(row("this tree", results["here"]))
    print(f"\nthis tree / {args.ref}, target tokens/s, pair by pair: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
