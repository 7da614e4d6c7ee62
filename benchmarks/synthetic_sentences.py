"""Synthetic English sentences of a fixed length, for timing decoders on long inputs.

Each sentence strings together (seeded) random Multi30k training sentences, joined by "and",
and is cut at the wanted number of words, so the tokenizer knows every word and the text
reads like the corpus (not a bag of random words). The output is JSONL with ``en`` and ``de``
keys, ``de`` being a copy of ``en`` (only for timing: BLEU on it means nothing).

    python benchmarks/synthetic_sentences.py --sentences 500 --words 40 --out /tmp/syn40.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path


def training_sentences(train_file: Path) -> list[list[str]]:
    """The words of each training English sentence, final full stops dropped."""
    with train_file.open(encoding="utf-8") as lines:
        return [json.loads(line)["en"].rstrip(" .").split() for line in lines]


def sentences(corpus: list[list[str]], count: int, length: int, seed: int) -> list[str]:
    """``count`` sentences of ``length`` words each (the same ones for the same seed)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words: list[str] = []
        while len(words) < length:
            if words:
                words.append("and")
            part = rng.choice(corpus)
            words += [part[0].lower(), *part[1:]] if words else part
        out.append(" ".join(words[:length]) + ".")
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
    with args.out.open("w", encoding="utf-8") as out:
        for text in sentences(training_sentences(train), args.sentences, args.words, args.seed):
            out.write(json.dumps({"en": text, "de": text}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
