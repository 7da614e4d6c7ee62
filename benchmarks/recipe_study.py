"""The 30-minute recipe study: train variants of a config for `train.max_minutes`, evaluate each,
and print one table row per run (the host, seed, updates reached, validation and test BLEU).

Each variant is a name and `--set` overrides of the config; every run trains alone (one at a
time, the machine to itself) and is then scored by `attncli eval` (beam 5, the checkpoint eval
picks by default: the average of the last saves when it validated better, else the best).
Recipes are chosen on validation BLEU; test BLEU is reported, never chosen on.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/recipe_study.py configs/small.yaml \
        --runs-dir /tmp/study --variant base= --variant tiny=model.d_model=128,model.ff_dim=256
    python benchmarks/recipe_study.py --collect /tmp/study/*     # rows of runs already made
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

from attncli.core.cpu_kind import detect_cpu_kind
from attncli.evaluate import eval_reports
from attncli.runs.card import calibration_fact, host_facts
from attncli.runs.layout import RunPaths, read_machines

COLUMNS = ("run", "host", "seed", "updates", "best val (greedy)", "averaged val (greedy)",
           "each corpus's last val (a mix)", "test BLEU (beam 5; a mix: each corpus's)",
           "test chrF", "checkpoint")


def cpu_kind() -> str:
    """What decides a run's speed here: the CPU's kind (`core.cpu_kind`) and torch's kernel
    capability."""
    import torch

    return (f"{detect_cpu_kind().describe()}, ATen "
            f"{torch.backends.cpu.get_cpu_capability()}")


def host(run: Path, fallback: str) -> str:
    """The host the run trained on, as its machine.json recorded it (the last session's CPU,
    family/model/stepping, usable CPUs, flags, threads and calibration; issue 63: hosts of one
    CPU name differed 1.6 times in speed); `fallback`, this machine's `cpu_kind`, for a run
    made before machine.json named the host."""
    sessions = read_machines(RunPaths(run))
    if not sessions or "calibration" not in sessions[-1]:
        return fallback
    entry = sessions[-1]
    return f"{entry.get('cpu')} ({'; '.join([*host_facts(entry), *calibration_fact(entry)])})"


def train_and_eval(config: Path, runs_dir: Path, name: str, *, overrides: list[str],
                   minutes: float) -> Path:
    """One variant: trained for `minutes`, then `attncli eval` (writes RUN/eval/test.json, or
    test-<corpus>.json for each corpus of a mix)."""
    run = runs_dir / name
    if run.exists():  # train would name its run NAME-2, and this would score the old one
        raise SystemExit(f"{run} exists: name the variant otherwise or move that run")
    sets = [f"train.max_minutes={minutes}", *overrides]
    command = [sys.executable, "-m", "attncli", "train", str(config), "--runs-dir",
               str(runs_dir), "--name", name]
    for item in sets:
        command += ["--set", item]
    subprocess.run(command, check=True)
    subprocess.run([sys.executable, "-m", "attncli", "eval", str(run)], check=True,
                   stdout=subprocess.DEVNULL)
    return run


def row(run: Path, cpu: str) -> list[str]:
    """The table row of a finished, evaluated run folder."""
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    vals = [e for e in events if e["event"] == "val"]
    averaged = next((e for e in reversed(events) if e["event"] == "averaged"), None)
    tests = eval_reports(run)
    seed = yaml.safe_load((run / "config.yaml").read_text())["train"]["seed"]
    best = max(vals, key=lambda e: e["val_bleu"])
    last = vals[-1].get("corpora", {})  # a mix: each corpus's greedy BLEU at the end
    return [run.name, host(run, cpu), str(seed), f"{vals[-1]['step']:,}",
            f"{best['val_bleu']:.2f} (step {best['step']:,})",
            "" if averaged is None else f"{averaged['val_bleu']:.2f}",
            " / ".join(f"{name} {v['val_bleu']:.2f}" for name, v in last.items()),
            " / ".join(f"{t['bleu']:.2f}" for t in tests.values()),
            " / ".join(f"{t['chrf']:.2f}" for t in tests.values()),
            next(iter(tests.values()))["checkpoint"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, nargs="?")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs-study"))
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=KEY=VALUE,KEY=VALUE (NAME= for the config as it is)")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--collect", type=Path, nargs="+", default=[],
                        help="only print the rows of these finished, evaluated run folders")
    args = parser.parse_args()
    cpu = cpu_kind()
    runs = list(args.collect)
    for variant in args.variant:
        name, _, sets = variant.partition("=")
        overrides = [s for s in sets.split(",") if s]
        runs.append(train_and_eval(args.config, args.runs_dir, name, overrides=overrides,
                                   minutes=args.minutes))
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + " --- |" * len(COLUMNS))
    for run in runs:
        print("| " + " | ".join(row(run, cpu)) + " |")


if __name__ == "__main__":
    main()
