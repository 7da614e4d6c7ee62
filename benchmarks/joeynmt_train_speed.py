"""Training speed against JoeyNMT 2.3: the same data, model size and batch size, one epoch each.

Why: the issue's bar is "target tokens per second, side by side on the same machine". A whole
Multi30k epoch of JoeyNMT takes ~12 minutes on a 2-core CPU, so both tools train one epoch of
the first N training pairs (default 8,000) and each reports its own epoch rate: JoeyNMT's
"num. of tokens ..., N[sec]" epoch line, and attncli's tokens/s over a log window that spans
the whole epoch. Both count real (non-pad) target tokens, end-of-sentence included.

    # once: the JoeyNMT venv and data from ../shared/anchors/joeynmt/run.sh DIR, then
    python benchmarks/joeynmt_train_speed.py prepare DIR            # writes DIR/joey_speed.yaml
    # alternate the two (A B A B ...), appending to two logs:
    attncli train benchmarks/configs/small-2026-11-24.yaml --set data.train_limit=8000 \\
        --set train.max_epochs=1 --set train.log_every=78 --set train.eval_every=100000 \\
        --runs-dir /tmp/speed >> ours.log
    DIR/venv/bin/python -m joeynmt train --skip-test DIR/joey_speed.yaml >> joey.log 2>&1
    python benchmarks/joeynmt_train_speed.py report ours.log joey.log

The config is 0.4's small.yaml, frozen in benchmarks/configs/ (the model JoeyNMT's anchor config
matches: 3+3 layers, d_model 256, 7.59M parameters, 2,048-token batches); the shipped
configs/small.yaml has since moved to Tatoeba en→de (0.6), and 0.5's smaller Multi30k model
is configs/multi30k.yaml. `--set train.log_every=78` must equal the
"batches per epoch" that attncli prints for the slice, so that one log window is the whole
epoch: 78 for the first 8,000 pairs when `pad_multiple` resolves to 8, a different count with
other multiples (4 on AMX CPUs, 1 in fp32 on CPU).
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

ANCHOR = Path(__file__).resolve().parents[2] / "shared/anchors/joeynmt/multi30k-en-de.yaml"
_OURS = re.compile(r"step\s+(\d+) \|.*\| ([\d,.]+) tgt tok/s")
_OURS_EPOCH = re.compile(r"(\d+) batches per epoch")
_JOEY = re.compile(r"num\. of tokens: (\d+), ([\d.]+)\[sec\]")


def prepare(joey_dir: Path, pairs: int, anchor: Path) -> Path:
    """Write the first ``pairs`` training pairs and a one-epoch JoeyNMT config into ``joey_dir``."""
    subset = joey_dir / f"m30k{pairs}"
    subset.mkdir(exist_ok=True)
    for lang in ("en", "de"):
        lines = (joey_dir / "m30k" / f"train.{lang}").read_text(encoding="utf-8").splitlines(True)
        (subset / f"train.{lang}").write_text("".join(lines[:pairs]), encoding="utf-8")
    text = anchor.read_text(encoding="utf-8").replace("ANCHOR_DIR", str(joey_dir))
    text = text.replace(f"{joey_dir}/m30k/train", f"{subset}/train")
    text = text.replace(f"{joey_dir}/joey_model", f"{joey_dir}/joey_speed_model")
    for key, value in (("epochs", 1), ("updates", 100000), ("validation_freq", 100000)):
        text, count = re.subn(rf"(\n\s+{key}:\s*)\S+", rf"\g<1>{value}", text)
        if count != 1:
            raise SystemExit(f"{anchor}: expected one '{key}:' line, found {count}")
    config = joey_dir / "joey_speed.yaml"
    config.write_text(text, encoding="utf-8")
    return config


def ours_epoch_rates(log: str) -> list[float]:
    """attncli tokens/s of each run's log line at its last step of the epoch."""
    rates: list[float] = []
    epoch_steps = None
    for line in log.splitlines():
        if found := _OURS_EPOCH.search(line):
            epoch_steps = int(found.group(1))
        elif (found := _OURS.search(line)) and int(found.group(1)) == epoch_steps:
            rates.append(float(found.group(2).replace(",", "")))
    return rates


def joey_epoch_rates(log: str) -> list[float]:
    """JoeyNMT target tokens per second of each epoch summary line."""
    return [int(tokens) / float(seconds) for tokens, seconds in _JOEY.findall(log)]


def report(ours_log: Path, joey_log: Path) -> None:
    ours = ours_epoch_rates(ours_log.read_text(encoding="utf-8"))
    joey = joey_epoch_rates(joey_log.read_text(encoding="utf-8"))
    if not ours or not joey:
        raise SystemExit("no epoch figures found: check train.log_every = batches per epoch")
    print("attncli tgt tok/s per epoch:", ", ".join(f"{r:,.0f}" for r in ours))
    print("JoeyNMT tgt tok/s per epoch:", ", ".join(f"{r:,.0f}" for r in joey))
    pairs = [o / j for o, j in zip(ours, joey, strict=False)]
    print("paired ratios (run i / run i):", ", ".join(f"{r:.2f}x" for r in pairs))
    print(f"median: {statistics.median(ours):,.0f} vs {statistics.median(joey):,.0f} tok/s "
          f"= {statistics.median(ours) / statistics.median(joey):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="write the training slice and a one-epoch config")
    prep.add_argument("joey_dir", type=Path)
    prep.add_argument("--pairs", type=int, default=8000)
    prep.add_argument("--anchor", type=Path, default=ANCHOR)
    rep = sub.add_parser("report", help="epoch rates from the two logs and their ratio")
    rep.add_argument("ours_log", type=Path)
    rep.add_argument("joey_log", type=Path)
    args = parser.parse_args()
    if args.command == "prepare":
        print(prepare(args.joey_dir.resolve(), args.pairs, args.anchor))
    else:
        report(args.ours_log, args.joey_log)


if __name__ == "__main__":
    main()
