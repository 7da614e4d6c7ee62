"""One training process against two (torchrun's launcher, gloo) on this machine's CPU: the same
updates, so the same losses; correctness is the point, not speed (two processes share the
same cores).

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/processes_cpu.py [--steps 100]

Both runs: configs/multi30k.yaml (small.yaml before 0.6), `train.accum_steps=2` (one process
accumulates the two batches of an update, two processes take one each), fp32 and no dropout
(each process draws its own dropout masks), the same seed. Prints, per run, the wall time, the
median logged target tokens/s and the final loss, then the largest loss difference over all
updates.
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

REPO = Path(__file__).resolve().parents[1]


def train(runs: Path, name: str, *, steps: int, processes: int, extra: list[str]) -> dict:
    sets = [f"train.max_steps={steps}", "train.accum_steps=2", "train.precision=fp32",
            "model.dropout=0", "train.log_every=1", "train.eval_every=1000000",
            "data.valid_limit=50", *extra]
    command = [sys.executable, "-m", "attncli", "train", "configs/multi30k.yaml", "--runs-dir",
               str(runs), "--name", name, "--nproc", str(processes)]
    for item in sets:
        command += ["--set", item]
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    events = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines()]
    train_events = [e for e in events if e["event"] == "train"]
    return {"processes": processes, "wall_s": round(wall, 1),
            "tgt_tokens_per_s": statistics.median(e["tokens_per_s"] for e in train_events[5:]),
            "losses": {e["step"]: e["loss"] for e in train_events}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="extra config override for both runs (repeatable)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores")
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        one = train(runs, "one", steps=args.steps, processes=1, extra=args.sets)
        two = train(runs, "two", steps=args.steps, processes=2, extra=args.sets)
    for run in (one, two):
        print(f"{run['processes']} process(es): wall {run['wall_s']} s, median "
              f"{run['tgt_tokens_per_s']:,.0f} tgt tok/s, loss at step {args.steps} "
              f"{run['losses'][args.steps]:.5f}")
    gaps = [abs(one["losses"][s] - two["losses"][s]) for s in sorted(one["losses"])]
    print(f"updates compared: {len(gaps)}; max |loss difference| over the first 20 "
          f"{max(gaps[:20]):.2e}, over all {max(gaps):.2e} (rounding differences of the gradient "
          f"sums grow as training goes on)")


if __name__ == "__main__":
    main()
