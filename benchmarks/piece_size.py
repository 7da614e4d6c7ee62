"""How long the pieces of a sentence too long for the model should be: `decode.piece_subwords`
chosen on validation lines.

    python benchmarks/piece_size.py runs/small --data ../shared/data/tatoeba-en-de/val.jsonl
    python benchmarks/piece_size.py runs/en-zh --data ../shared/data/tatoeba-en-zh/val.jsonl \\
        --sizes 12,16,24,32,48 --json out.json

A text without punctuation gives the splitter nothing to split at, and a sentence longer than
the training sources (`data.max_len`) is cut into pieces of at most `piece_subwords` subwords.
The lines here are consecutive validation sentences (adjacent repeated sources dropped) with
their punctuation removed, run together (a space between English or German ones, nothing
between Chinese ones) until a line holds at least 2,000 characters; the reference is the
sentences' targets joined the target's way. Each line is translated with each piece size and
scored with sacreBLEU and chrF over all lines, with the output's length against the length the
split's median target/source character ratio predicts. `sentences` is the ceiling: the same
sentences with their punctuation, translated one by one and joined.
"""

from __future__ import annotations

import argparse
import json
import statistics
import unicodedata
from pathlib import Path

from attncli import Translator
from attncli.data.sentences import sentence_joiner
from attncli.decoding.scoring import corpus_scores

LINE_CHARS, LINES = 2000, 8


def unpunctuated(text: str) -> str:
    """`text` without punctuation marks, its whitespace runs made single spaces."""
    kept = "".join(c for c in text if not unicodedata.category(c).startswith("P"))
    return " ".join(kept.split())


def long_lines(path: Path, src: str, tgt: str) -> list[tuple[list[str], list[str]]]:
    """(source sentences, targets) of each line: `LINES` lines of `LINE_CHARS` or more."""
    pairs = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
    kept = [p for i, p in enumerate(pairs) if i == 0 or p[src] != pairs[i - 1][src]]
    join, found, sources, targets = sentence_joiner(src), [], [], []
    for pair in kept:
        if not unpunctuated(pair[src]):
            continue
        sources.append(pair[src])
        targets.append(pair[tgt])
        if len(join.join(unpunctuated(s) for s in sources)) >= LINE_CHARS:
            found.append((sources, targets))
            sources, targets = [], []
            if len(found) == LINES:
                break
    return found


def measure(translator: Translator, lines: list[tuple[list[str], list[str]]],
            sizes: list[int], ratio: float) -> dict[str, dict[str, float]]:
    """Per piece size (and `sentences`): BLEU, chrF and output length / predicted length."""
    src_join = sentence_joiner(translator.source_language)
    tgt_join = sentence_joiner(translator.target_language)
    sources = [src_join.join(unpunctuated(s) for s in sents) for sents, _ in lines]
    references = [tgt_join.join(targets) for _, targets in lines]
    outputs = {}
    for size in sizes:
        translator.config.decode.piece_subwords = size
        outputs[str(size)] = [t.text for t in translator.translate(sources, beam=None)]
    outputs["sentences"] = [
        tgt_join.join(t.text for t in translator.translate(sents, split=False))
        for sents, _ in lines]
    predicted = ratio * sum(len(s) for s in sources)
    table = {}
    for way, outs in outputs.items():
        found = corpus_scores(outs, references, translator.target_language)
        table[way] = {"bleu": round(found["bleu"], 2), "chrf": round(found["chrf"], 2),
                      "length": round(sum(len(o) for o in outs) / predicted, 3)}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="a validation split (JSON Lines)")
    parser.add_argument("--sizes", default="12,16,24,32,48,99",
                        help="piece sizes to try, in subwords (comma-separated)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    translator = Translator(args.run, device="cpu")
    src, tgt = translator.source_language, translator.target_language
    pairs = [json.loads(line) for line in args.data.read_text("utf-8").splitlines() if line]
    ratio = statistics.median(len(p[tgt]) / len(p[src]) for p in pairs if p[src])
    lines = long_lines(args.data, src, tgt)
    table = measure(translator, lines, [int(s) for s in args.sizes.split(",")], ratio)
    print(f"{args.run} ({translator.checkpoint}), {args.data}: {len(lines)} lines of "
          f"{LINE_CHARS}+ characters, median {tgt}/{src} length ratio {ratio:.3f}")
    print("| piece subwords | BLEU | chrF | output / predicted length |")
    print("| --- | --- | --- | --- |")
    for way, row in table.items():
        print(f"| {way} | {row['bleu']} | {row['chrf']} | {row['length']:.0%} |")
    if args.json is not None:
        args.json.write_text(json.dumps({"run": str(args.run), "data": str(args.data),
                                         "lines": len(lines), "ratio": ratio, "scores": table},
                                        indent=1), "utf-8")


if __name__ == "__main__":
    main()
