"""Paragraphs through a run: given whole (as before 0.6), split by the sentence splitter, and
split at the true sentence boundaries (the best a splitter can do on this data).

    python benchmarks/documents.py runs/en-de --data ../shared/data/tatoeba-en-de/test.jsonl
    python benchmarks/documents.py runs/en-zh --data ../shared/data/dailydialog-en-zh/test.jsonl \\
        --json out.json

Paragraphs are 2 to 6 consecutive test lines (sizes drawn with a fixed seed), the source side
joined the source language's way and the references the target's (a space between English or
German sentences, nothing between Chinese ones), after adjacent lines with the same source are
dropped (Tatoeba lists a sentence once per translation). DailyDialog's test turns follow each
other in dialogue order, but its files do not mark where a dialogue ends, so a paragraph may
span two dialogues. Each paragraph is translated three ways:

    whole   the paragraph as one sentence (`Translator.translate(split=False)`; cut to the
            model's positions, as attncli translated any line before 0.6)
    split   split by the sentence splitter, decoded in one batch, joined (`split=True`)
    lines   each test line translated as one sentence and joined the target's way

and scored per paragraph with sacreBLEU (13a; `zh` for Chinese targets) and chrF, with each
paragraph's output-to-reference length ratio (characters) and the share of paragraphs under
0.7 (text left out) and over 1.4 (text repeated). Speed: sentences per second of `split` with
the sentences of 256 paragraphs decoded in one batch, and one paragraph per call.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from attncli import Translator
from attncli.data.sentences import sentence_joiner
from attncli.decoding.scoring import corpus_scores

SEED, SIZES = 1234, (2, 6)
DROPPED, REPEATED = 0.7, 1.4


def paragraphs(path: Path, src: str, tgt: str) -> list[tuple[list[str], list[str]]]:
    """(source lines, reference lines) of each paragraph (see the module doc)."""
    pairs = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
    kept = [p for i, p in enumerate(pairs) if i == 0 or p[src] != pairs[i - 1][src]]
    rng, found, start = random.Random(SEED), [], 0
    while start < len(kept):
        size = rng.randint(*SIZES)
        part = kept[start:start + size]
        if len(part) >= SIZES[0]:
            found.append(([p[src] for p in part], [p[tgt] for p in part]))
        start += size
    return found


def translate_ways(translator: Translator, paras: list[tuple[list[str], list[str]]]
                   ) -> dict[str, Any]:
    """Each way's outputs, and `split`'s sentences per second batched and not."""
    source_join = sentence_joiner(translator.source_language)
    target_join = sentence_joiner(translator.target_language)
    texts = [source_join.join(lines) for lines, _ in paras]
    outputs: dict[str, list[str]] = {}
    outputs["whole"] = [t.text for t in translator.translate_iter(texts, split=False)]
    started = time.perf_counter()
    split = list(translator.translate_iter(texts))
    batched = time.perf_counter() - started
    outputs["split"] = [t.text for t in split]
    sentences = sum(len(t.sentences) for t in split)
    started = time.perf_counter()
    for text in texts:
        translator.translate([text])
    alone = time.perf_counter() - started
    lines = list(translator.translate_iter([line for ls, _ in paras for line in ls],
                                           split=False))
    joined, taken = [], 0
    for source_lines, _ in paras:
        joined.append(target_join.join(t.text for t in lines[taken:taken + len(source_lines)]))
        taken += len(source_lines)
    outputs["lines"] = joined
    return {"outputs": outputs, "sentences": sentences,
            "sentences_per_second": {"batched": sentences / batched,
                                     "one_paragraph_a_call": sentences / alone}}


def scores(outputs: list[str], references: list[str], target: str) -> dict[str, float]:
    """BLEU, chrF and the length-ratio shares of one way's paragraphs."""
    found = corpus_scores(outputs, references, target)
    ratios = [len(o) / max(len(r), 1) for o, r in zip(outputs, references, strict=True)]
    return {"bleu": round(found["bleu"], 2), "chrf": round(found["chrf"], 2),
            "signature": found["signature"],
            "median_ratio": round(sorted(ratios)[len(ratios) // 2], 3),
            "under_0.7": round(100 * sum(r < DROPPED for r in ratios) / len(ratios), 1),
            "over_1.4": round(100 * sum(r > REPEATED for r in ratios) / len(ratios), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="a test split (JSON Lines)")
    parser.add_argument("--checkpoint", default="auto")
    parser.add_argument("--json", type=Path, help="write the figures and outputs here")
    args = parser.parse_args()
    translator = Translator(args.run, checkpoint=args.checkpoint, device="cpu")
    src, tgt = translator.source_language, translator.target_language
    paras = paragraphs(args.data, src, tgt)
    target_join = sentence_joiner(tgt)
    references = [target_join.join(refs) for _, refs in paras]
    done = translate_ways(translator, paras)
    table = {way: scores(outs, references, tgt) for way, outs in done["outputs"].items()}
    print(f"{args.run} ({translator.checkpoint}), {args.data}: {len(paras)} paragraphs, "
          f"{sum(len(ls) for ls, _ in paras)} lines, {done['sentences']} split sentences")
    print("| way | BLEU | chrF | median length ratio | under 0.7 | over 1.4 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for way, row in table.items():
        print(f"| {way} | {row['bleu']} | {row['chrf']} | {row['median_ratio']} | "
              f"{row['under_0.7']}% | {row['over_1.4']}% |")
    speed = done["sentences_per_second"]
    print(f"split, sentences/s: {speed['batched']:.1f} batched across paragraphs, "
          f"{speed['one_paragraph_a_call']:.1f} one paragraph a call")
    if args.json is not None:
        args.json.write_text(json.dumps({"run": str(args.run), "data": str(args.data),
                                         "paragraphs": len(paras), "scores": table, **done},
                                        ensure_ascii=False, indent=1), "utf-8")


if __name__ == "__main__":
    main()
