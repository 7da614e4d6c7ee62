"""SentencePiece's trainer alone on the first N characters of a JSON Lines corpus, to read its
peak memory per character (what `tokenizer.sample_bytes`'s default rests on).

Feeds both sides of the first pairs, up to N characters, to the trainer with attncli's
options (data/tokenizer.py `_train_one`: input_sentence_size=0, so it keeps every sentence).
Run it under `/usr/bin/time -v` and read "Maximum resident set size", for example on
benchmarks/data_scale.py's synthetic corpus:

    for n in 25e6 50e6 100e6; do /usr/bin/time -v python benchmarks/spm_memory.py \\
        /tmp/attncli-data-scale/data/synth/train.jsonl $n unigram 2>&1 | grep -E "Maxi|spm"; done
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Iterator

import sentencepiece as spm


def texts(path: str, chars: int) -> Iterator[str]:
    """Both sides of the first pairs of `path`, stopping before `chars` characters."""
    total = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            for text in json.loads(line).values():
                total += len(text)
                if total > chars:
                    return
                yield text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="JSON Lines, one object of two languages a line")
    parser.add_argument("chars", type=float, help="characters to feed (e.g. 50e6)")
    parser.add_argument("type", choices=("unigram", "bpe"))
    parser.add_argument("--vocab-size", type=int, default=8000)
    args = parser.parse_args()
    started = time.perf_counter()
    spm.SentencePieceTrainer.train(
        sentence_iterator=texts(args.corpus, int(args.chars)), model_writer=io.BytesIO(),
        model_type=args.type, vocab_size=args.vocab_size, character_coverage=1.0, pad_id=0,
        unk_id=1, bos_id=2, eos_id=3, input_sentence_size=0, shuffle_input_sentence=True,
        hard_vocab_limit=False, num_threads=2, minloglevel=2)
    print(f"spm {args.type} {int(args.chars):,} characters: "
          f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
