"""Synthetic English sentences of a fixed length, for timing decoders on long inputs.

Words are drawn (seeded) from the Multi30k training English, weighted by how often they occur
there, so the tokenizer knows them and the model sees familiar subwords; sentences start with a
capital and end with a full stop. The output is JSONL with ``en`` and ``de`` keys, ``de`` being
a copy of ``en`` (only for timing: BLEU on it means nothing).

    python benchmarks/synthetic_sentences.py --sentences 500 --words 40 --out /tmp/syn40.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
from collections import Counter
from pathlib import Path

WORD = re.compile(r"[A-Za-z]+")


def vocabulary(train_file: Path) -> tuple[list[str], list[int]]:
    """Lower-cased words of the training English and their counts, most frequent first."""
    counts: Counter[str] = Counter()
    with train_file.open(encoding="utf-8") as lines:
        for line in lines:
            counts.update(w.lower() for w in WORD.findall(json.loads(line)["en"]))
    words, weights = zip(*counts.most_common(), strict=True)
    return list(words), list(weights)


def sentences(words: list[str], weights: list[int], count: int, length: int,
              seed: int) -> list[str]:
    """``count`` sentences of ``length`` words each (the same ones for the same seed)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        drawn = rng.choices(words, weights=weights, k=length)
        out.append(" ".join([drawn[0].capitalize(), *drawn[1:]]) + ".")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train", type=Path, default=None,
                        help="training JSONL (default: $ATTNCLI_DATA_DIR/multi30k/train.jsonl)")
    args = parser.parse_args()
    train = args.train or Path(os.environ.get("ATTNCLI_DATA_DIR", "data")) / "multi30k/train.jsonl"
    words, weights = vocabulary(train)
    with args.out.open("w", encoding="utf-8") as out:
        for text in sentences(words, weights, args.sentences, args.words, args.seed):
            out.write(json.dumps({"en": text, "de": text}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
