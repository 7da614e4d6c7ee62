"""Where a training run's memory goes: resident memory over N updates for several pad multiples,
with the caches of compiled kernels (oneDNN's and ideep's) and glibc malloc's settings varied
(issue 42).

Each case is one `attncli train CONFIG --set train.max_steps=N --set train.pad_multiple=P` in a
fresh process, with the environment the case names, the machine to itself. Its train events'
`rss_mb` (every --log-every updates) show the growth, the run's last log line its peak (the
process's, preparation included: run `attncli prepare CONFIG` first so that the tokenizer and
token cache exist). Steady = the median `rss_mb` of the last quarter of the updates. A markdown
table goes to stdout, the figures of each case to --json. With --count-kernels each run also
has oneDNN say every primitive it executes (`ONEDNN_VERBOSE=1`, which slows it a little), and
the table counts the distinct matrix-product problems met: each is a kernel compiled and cached.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/memory_growth.py --steps 600
    python benchmarks/memory_growth.py --pad 1 --pad 8 --case default --case unbounded
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from attncli.core.kernel_caches import IDEEP_CACHE_VARIABLE

HERE = Path(__file__).resolve().parent.parent

# Every case names both cache capacities, so that a row means the same whatever attncli's own
# bounds (core/kernel_caches.py) are; 1,024 is oneDNN's and ideep's default, attncli's until 0.7.
def caches(onednn: int, ideep: int) -> dict[str, str]:
    """oneDNN's primitive cache and ideep's computation cache (torch's matmul and linear), in
    entries."""
    return {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(onednn), IDEEP_CACHE_VARIABLE: str(ideep)}


UNBOUNDED = caches(1024, 1024)


CASES = {
    "default": {},  # attncli as it is: its own cache bounds and malloc settings
    "unbounded": UNBOUNDED,
    "glibc-defaults": {**UNBOUNDED, "ATTNCLI_KEEP_FREED_MEMORY": "0"},  # no mallopt calls
    "arenas-1": {**UNBOUNDED, "MALLOC_ARENA_MAX": "1"},  # every thread on glibc's main heap
    "ideep-1": caches(1024, 1),
    "ideep-64": caches(1024, 64),
    "onednn-64": caches(64, 1024),
    "both-64-1": caches(64, 1),
    "both-128-16": caches(128, 16),
    "both-256-64": caches(256, 64),
}


def run_case(config: str, case: str, *, pad: int, args: argparse.Namespace, work: Path) -> dict:
    """Train one case and read its memory figures from metrics.jsonl and train.log."""
    name = f"{case}-pad{pad}"
    settings = [f"train.max_steps={args.steps}", f"train.pad_multiple={pad}",
                f"train.log_every={args.log_every}", f"train.eval_every={args.steps}",
                "train.average_last=0", "train.tensorboard=false", "data.valid_limit=100",
                "train.max_minutes=null", *args.set]
    command = [sys.executable, "-m", "attncli", "train", config, "--name", name,
               "--runs-dir", str(work)]
    for setting in settings:
        command += ["--set", setting]
    env = {**os.environ, **CASES[case]}
    verbose = work / f"{name}.stdout.txt"
    if args.count_kernels:
        env["ONEDNN_VERBOSE"] = "1"
    with verbose.open("w") as out:
        subprocess.run(command, check=True, cwd=HERE, env=env, stdout=out)
    run = work / name
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    peak = re.search(r"^peak memory: ([\d.]+) GB", (run / "train.log").read_text(), re.M)
    rss = [e["rss_mb"] for e in train]
    return {"case": case, "pad_multiple": pad, "env": CASES[case], "updates": train[-1]["step"],
            "tokens_per_s": statistics.median(e["tokens_per_s"] for e in train[1:] or train),
            "rss_mb": {e["step"]: e["rss_mb"] for e in train},
            "steady_mb": statistics.median(rss[-max(1, len(rss) // 4):]),
            "peak_mb": float(peak[1]) * 1000 if peak else None,
            "last_loss": train[-1]["loss"],
            "kernels": distinct_problems(verbose) if args.count_kernels else None}


def distinct_problems(verbose: Path) -> dict[str, int]:
    """Distinct oneDNN problems executed, per rank of the product (2: a linear layer's, 3: a
    batched one, as attention's), from `ONEDNN_VERBOSE=1` output: one compiled kernel each."""
    problems: dict[str, set[str]] = {}
    with verbose.open() as lines:
        for line in lines:
            if line.startswith("onednn_verbose,v1,primitive,exec,"):
                fields = line.rstrip("\n").split(",")
                shape = fields[-2]  # e.g. 2040x256:256x768, or 680x12x12:680x12x64
                rank = str(shape.split(":")[0].count("x") + 1)
                problems.setdefault(rank, set()).add(",".join(fields[5:-1]))  # all but time
    return {rank: len(found) for rank, found in sorted(problems.items())}


def table(rows: list[dict]) -> str:
    lines = ["| case | pad multiple | updates | median tgt tok/s | RSS at first log, MB | "
             "at half, MB | steady (last quarter), MB | peak, MB | loss at the end | "
             "oneDNN kernels (2-D + 3-D) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        by_step = list(row["rss_mb"].values())
        lines.append(f"| {row['case']} | {row['pad_multiple']} | {row['updates']:,} | "
                     f"{row['tokens_per_s']:,.0f} | {by_step[0]:,.0f} | "
                     f"{by_step[len(by_step) // 2]:,.0f} | {row['steady_mb']:,.0f} | "
                     f"{row['peak_mb'] or float('nan'):,.0f} | {row['last_loss']:.4f} | "
                     f"{_kernels(row['kernels'])} |")
    return "\n".join(lines)


def _kernels(counts: dict[str, int] | None) -> str:
    if counts is None:
        return "(not counted)"
    return f"{sum(counts.values()):,} ({counts.get('2', 0):,} + {counts.get('3', 0):,})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/small.yaml")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--pad", type=int, action="append", help="pad multiples (1 2 4 8)")
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="environments to try (default: all)")
    parser.add_argument("--set", action="append", default=[], help="another config override")
    parser.add_argument("--count-kernels", action="store_true",
                        help="count the distinct oneDNN matrix products (ONEDNN_VERBOSE=1)")
    parser.add_argument("--json", type=Path, help="write every case's figures here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="memory-growth-") as work:
        for case in args.case or list(CASES):
            for pad in args.pad or [1, 2, 4, 8]:
                rows.append(run_case(args.config, case, pad=pad, args=args, work=Path(work)))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
