"""Is a run's Chinese in one script? Counts the sentences that OpenCC's t2s conversion would
still change: every target sentence of the train, val and test splits as attncli reads them
for the run (its config's `data.chinese_script` applied), and every line of the run's
`attncli eval` output on test (eval/test*.hyp.txt: a mix has one per corpus). 0 everywhere:
all simplified.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/one_script.py runs/en-zh
    ATTNCLI_DATA_DIR=../shared/data python benchmarks/one_script.py runs/en-zh --set \\
        data.chinese_script=null                     # the same splits as stored
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attncli.core.config import corpora_of
from attncli.core.config_files import apply_overrides, parse_config, read_yaml
from attncli.core.errors import run_reporting
from attncli.data.sources import open_split, split_source


def changed(texts: list[str], convert) -> tuple[int, str | None]:
    """How many of `texts` t2s changes, and the first of them."""
    found = [text for text in texts if convert(text) != text]
    return len(found), found[0] if found else None


def main() -> None:
    import opencc

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--set", action="append", default=[], dest="settings",
                        help="a change to the run's config before reading, e.g. "
                             "data.chinese_script=null")
    args = parser.parse_args()
    path = args.run / "config.yaml"
    config = parse_config(apply_overrides(read_yaml(path), args.settings), str(path))
    convert = opencc.OpenCC("t2s").convert
    print(f"data.chinese_script: {config.data.chinese_script}; OpenCC {opencc.__version__}")
    for corpus in corpora_of(config.data):
        for split in ("train", "val", "test"):
            texts = [(t or "").strip()
                     for t in open_split(split_source(corpus.data, split))["tgt"]]
            count, first = changed(texts, convert)
            print(f"{corpus.name} {split}: {count:,} of {len(texts):,} target sentences change "
                  f"under t2s" + (f" (first: {first})" if first else ""))
    hyp_files = sorted((args.run / "eval").glob("test*.hyp.txt"))
    for hyps in hyp_files:
        lines = hyps.read_text("utf-8").splitlines()
        count, first = changed(lines, convert)
        print(f"eval outputs ({hyps.name}): {count:,} of {len(lines):,} change under t2s"
              + (f" (first: {first})" if first else ""))
    if not hyp_files:
        print(f"{args.run / 'eval'}: no test outputs (run `attncli eval {args.run}` first)")


if __name__ == "__main__":
    run_reporting(main)
