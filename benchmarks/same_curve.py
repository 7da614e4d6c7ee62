"""Does this code train exactly as another commit does? Loss curves side by side.

Runs `attncli train configs/small.yaml` (or `--config`) for a few updates with
`train.log_every=1` from this tree and from a git commit (checked out with `git archive` into a
temporary folder), once per precision asked, and compares every figure of metrics.jsonl that
is not a timing or a memory figure: loss, learning rate and gradient norm at each update,
validation loss and BLEU at the end. A refactor that claims "behaviour unchanged" must show 0
differences here.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/same_curve.py --ref HEAD~3
    python benchmarks/same_curve.py --ref HEAD~3 --precision fp32 --precision bf16 --steps 20
    python benchmarks/same_curve.py --ref 16bf37f --config configs/multi30k.yaml \
        --ref-config configs/small.yaml       # a recipe that moved to another file

small.yaml was Multi30k until 0.6 and is Tatoeba en→de since: against a commit before that,
compare `--config configs/multi30k.yaml --ref-config configs/small.yaml`. bf16 is skipped (and
said so) on a CPU without bf16 support. Needs the corpus the configs name.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TIMINGS = {"tokens_per_s", "seconds", "rss_mb", "cuda_peak_mb"}  # and memory: not arithmetic


def checkout(ref: str, into: Path) -> Path:
    """The tree of `ref` in a fresh folder (no .git, nothing of this work tree)."""
    archive = subprocess.run(["git", "-C", str(HERE), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def train_curve(tree: Path, precision: str, *, steps: int, work: Path,
                extra: list[str] = (), config: str = "configs/small.yaml") -> list[dict]:
    """metrics.jsonl of a short run of `config` (in `tree`) trained by the code in `tree`."""
    runs = work / f"runs-{precision}"
    settings = [f"train.max_steps={steps}", "train.log_every=1", f"train.eval_every={steps}",
                f"train.precision={precision}", "data.valid_limit=100", "train.tensorboard=false",
                *extra]
    command = [sys.executable, "-m", "attncli", "train", str(tree / config),
               "--name", "curve", "--runs-dir", str(runs)]
    for setting in settings:
        command += ["--set", setting]
    env = {**os.environ, "PYTHONPATH": str(tree)}  # this tree's attncli, whatever is installed
    subprocess.run(command, check=True, cwd=work, env=env, stdout=subprocess.DEVNULL)
    lines = (runs / "curve" / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]


def compare(ours: list[dict], theirs: list[dict]) -> list[str]:
    """Every event and figure that differs, one line each."""
    differences = [f"{len(ours)} events here, {len(theirs)} there"] if len(ours) != len(
        theirs) else []
    for mine, other in zip(ours, theirs, strict=False):
        if mine != other:
            differences.append(f"here {mine}\n  there {other}")
    return differences


def largest_loss_gap(ours: list[dict], theirs: list[dict]) -> float:
    """The largest |difference| of the training loss at the same update."""
    mine = {e["step"]: e["loss"] for e in ours if e.get("event") == "train"}
    other = {e["step"]: e["loss"] for e in theirs if e.get("event") == "train"}
    return max((abs(mine[s] - other[s]) for s in mine.keys() & other.keys()), default=0.0)


def bf16_supported() -> bool:
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="git commit to compare with")
    parser.add_argument("--precision", action="append", choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--config", default="configs/small.yaml",
                        help="the config trained here (a path in this tree)")
    parser.add_argument("--ref-config", help="the config trained by --ref (default: --config)")
    parser.add_argument("--set", action="append", default=[], dest="settings",
                        help="a config override for both trees, e.g. train.pad_multiple=8")
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for folder in ("ref", "here", "there"):
            (work / folder).mkdir()
        other = checkout(args.ref, work / "ref")
        for precision in args.precision or ["fp32", "bf16"]:
            if precision == "bf16" and not bf16_supported():
                print("bf16: skipped, this CPU has no bf16 support")
                continue
            ours = train_curve(HERE, precision, steps=args.steps, work=work / "here",
                               extra=args.settings, config=args.config)
            theirs = train_curve(other, precision, steps=args.steps, work=work / "there",
                                 extra=args.settings, config=args.ref_config or args.config)
            differences = compare(ours, theirs)
            losses = [f"{e['loss']:.6f}" for e in ours if e.get("event") == "train"]
            print(f"{precision}: {len(ours)} events, {len(differences)} differences "
                  f"(largest loss difference {largest_loss_gap(ours, theirs):.2e}); "
                  f"losses {' '.join(losses[:3])} ... {losses[-1]}")
            for line in differences:
                print("  " + line)
            failures += bool(differences)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
