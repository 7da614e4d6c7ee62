"""attncli's own decoder against its CTranslate2 export (float32 and int8) on one run's test
split: agreement, BLEU, speed and memory, each engine a whole `attncli eval` process.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/engines.py runs/m30k [--rounds 3]

Exports the run's best checkpoint to RUN/ctranslate2 (float32) and RUN/ctranslate2-int8 when
they are missing. Then:
1. greedy (`--beam 1`) with each engine: the share of test sentences whose translation is the
   same text as attncli's own;
2. `--rounds` rounds of beam 5 (the run's length penalty and limits), the three engines in turn
   within each round: BLEU, sentences/s as `eval` reports it (decoding only), the process's wall
   time and its peak resident memory (from the kernel's accounting of the finished child).
Run it on an otherwise idle machine; it prints the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGINES = {"attncli (torch fp32)": [],
           "CTranslate2 float32": ["--engine", "ctranslate2"],
           "CTranslate2 int8": ["--engine", "ctranslate2", "--exported", "{run}/ctranslate2-int8"]}


def attncli(words: list[str]) -> list[str]:
    """The command line running `attncli` with these words, in this Python."""
    return [sys.executable, "-m", "attncli", *words]


def timed(command: list[str]) -> tuple[str, float, float]:
    """stdout, wall seconds and peak RSS (MiB, the kernel's figure for this child) of one run."""
    with tempfile.TemporaryFile(mode="w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read()}")
    return out, wall, usage.ru_maxrss / 1024


def evaluate(run: Path, beam: int, engine_args: list[str]) -> tuple[dict, list[str], float, float]:
    args = [a.format(run=run) for a in engine_args]
    out, wall, peak = timed(attncli(["eval", str(run), "--beam", str(beam), "--json", *args]))
    hyps = (run / "eval" / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    return json.loads(out), hyps, wall, peak


def export_missing(run: Path) -> None:
    for folder, quantization in (("ctranslate2", "float32"), ("ctranslate2-int8", "int8")):
        if not (run / folder).is_dir():
            subprocess.run(attncli(["export", str(run), "--quantization", quantization,
                                    "--output", str(run / folder)]), check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores")
    export_missing(args.run)
    greedy = {name: evaluate(args.run, 1, extra)[1] for name, extra in ENGINES.items()}
    ours = greedy["attncli (torch fp32)"]
    for name, hyps in greedy.items():
        same = sum(a == b for a, b in zip(hyps, ours, strict=True))
        print(f"greedy, {name}: {same} of {len(ours)} translations identical to attncli's")
    runs: dict[str, list] = {name: [] for name in ENGINES}
    for _ in range(args.rounds):
        for name, extra in ENGINES.items():
            report, _, wall, peak = evaluate(args.run, args.beam, extra)
            runs[name].append((report["bleu"], report["sentences_per_s"], wall, peak))
    print(f"beam {args.beam}, {args.rounds} rounds, medians:")
    for name, rows in runs.items():
        bleu, rate, wall, peak = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"  {name}: BLEU {bleu:.2f}, {rate:.1f} sentences/s (per round: "
              f"{', '.join(f'{r[1]:.1f}' for r in rows)}), process {wall:.1f} s, "
              f"peak {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
