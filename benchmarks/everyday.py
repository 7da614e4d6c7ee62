"""Everyday sentences through a run: what someone who types "Hello, how are you?" gets back.

    python benchmarks/everyday.py runs/m30k [--checkpoint auto|best|...] [--target de|zh|en]
    python benchmarks/everyday.py runs/en-zh --sentences FILE          # one sentence a line
    python benchmarks/everyday.py runs/en-zh --from-jsonl ../shared/data/tatoeba-en-zh/test.jsonl \\
        --key en --limit 200
    ATTNCLI_DATA_DIR=../shared/data python benchmarks/everyday.py --check-overlap

Corpus scores on a test split say little about the short, conversational input a user tries
first, nor about outputs that say one phrase over and over. With the list (`everyday.tsv`, next
to this file: columns en, de, de_accepted, zh, zh_accepted, en_accepted) this prints a markdown
table (source, output, reference, sentence chrF, right or not, in the run's training data or not),
corpus chrF (sacreBLEU), how many outputs are right, and how many outputs repeat a word 3-gram.
Words are split on whitespace; for Chinese, Japanese and Korean they are characters. With
`--sentences` or `--from-jsonl` only the repetition counts are printed. Translation goes the
way `attncli translate` goes (`runs.trained.load_for_decoding`, `encode_sources`, `decode_ids`,
`decode_tgt`). A run from Chinese (configs/zh-en.yaml) translates the `zh` column and is judged
against `en` and `en_accepted` (written before any zh-en output existed).

A row is "right" when its output equals the reference or one of the variants in the
`<target>_accepted` column (`|`-separated), punctuation and spaces aside; the variants were
written before any output was read. Sentences whose source is in the run's own training splits
(lower-cased, punctuation removed, exact match) are counted apart: a model that answers them
recalls, one that answers the others translates.

`--check-overlap` lists the list's English sentences that occur in a Multi30k split or in the
Tatoeba en-zh, Tatoeba en-de or DailyDialog en-zh train split (lower-cased, punctuation removed,
exact match), and exits 1 if any (4 of the 17 are in tatoeba-en-de's train split:
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import unicodedata
from pathlib import Path

from attncli.core.config import Config, corpora_of
from attncli.core.config_files import load_config
from attncli.core.errors import AttncliError, run_reporting
from attncli.core.text import base_language
from attncli.data.sources import open_split, split_source
from attncli.decoding.scoring import corpus_scores
from attncli.decoding.texts import encode_sources
from attncli.runs.trained import decode_ids, load_for_decoding

LIST = Path(__file__).with_name("everyday.tsv")
CJK = ("zh", "ja", "ko")
# Training corpora whose overlap with the list is reported (under $ATTNCLI_DATA_DIR).
CORPORA = ("multi30k/train.jsonl", "multi30k/val.jsonl", "multi30k/test.jsonl",
           "tatoeba-en-zh/train.jsonl", "tatoeba-en-de/train.jsonl",
           "dailydialog-en-zh/train.jsonl")


def normalise(text: str, lower: bool = False) -> str:
    """NFKC, punctuation removed, whitespace collapsed (and lower-cased when asked)."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    return " ".join((text.lower() if lower else text).split())


def words(text: str, cjk: bool) -> list[str]:
    """Whitespace-separated words, or for a CJK target its characters (spaces left out)."""
    return [ch for ch in text if not ch.isspace()] if cjk else text.split()


def repeated_trigrams(units: list[str]) -> int:
    """Occurrences of word 3-grams beyond each one's first (0: no 3-gram repeats)."""
    grams = [tuple(units[i : i + 3]) for i in range(len(units) - 2)]
    return len(grams) - len(set(grams))


def translate(args: argparse.Namespace, texts: list[str]) -> tuple[list[str], Config]:
    """The run's best translations of ``texts`` and the run's config."""
    trained = load_for_decoding(Path(args.run), args.device, args.checkpoint,
                                no_repeat_ngram=args.no_repeat_ngram)
    ids = encode_sources(trained.tokenizer, texts, trained.config.model.max_positions)
    found = decode_ids(trained, ids, args.beam, 1)
    return [trained.tokenizer.decode_tgt(h[0].tokens) for h in found], trained.config


def seen_in_training(config: Config, sentences: list[str]) -> list[bool] | None:
    """Whether each source sentence is in the run's training split(s), every corpus of a mix
    (None: a split is not found here, e.g. ATTNCLI_DATA_DIR unset)."""
    known = set()
    for corpus in corpora_of(config.data):
        try:
            rows = open_split(split_source(corpus.data, "train"))
        except AttncliError:
            return None
        known |= {normalise(text or "", lower=True) for text in rows["src"]}
    return [normalise(sentence, lower=True) in known for sentence in sentences]


def is_right(output: str, row: dict[str, str], target: str) -> bool:
    """The output equals the reference or an accepted variant, punctuation and spaces aside."""
    cjk = target in CJK
    accepted = [row[target], *(v for v in row.get(f"{target}_accepted", "").split("|")
                               if v.strip())]
    mine = words(normalise(output), cjk)
    return any(mine == words(normalise(variant), cjk) for variant in accepted)


def repetition_line(outputs: list[str], cjk: bool) -> str:
    counts = [repeated_trigrams(words(out, cjk)) for out in outputs]
    return (f"{sum(c > 0 for c in counts)} of {len(outputs)} outputs repeat a word 3-gram; "
            f"{sum(counts)} repeated 3-grams in all (occurrences beyond the first)")


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or " "


def score_list(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The table and the counts for the everyday list."""
    from sacrebleu.metrics import CHRF

    with LIST.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    run_config = load_config(Path(args.run) / "config.yaml")
    source = base_language(run_config.data.src)
    if source not in ("en", "zh"):
        parser.error(f"{args.run}: translates from {source}; {LIST.name} has sources in en and "
                     f"zh only")
    target = args.target or base_language(run_config.data.tgt)
    if target not in rows[0] or target == source:
        parser.error(f"--target {target}: {LIST.name} has references in de, zh and en only")
    sources = [row[source] for row in rows]
    outputs, config = translate(args, sources)
    refs, chrf = [row[target] for row in rows], CHRF()
    right = [is_right(out, row, target) for out, row in zip(outputs, rows, strict=True)]
    seen = seen_in_training(config, sources)
    print("| # | source | output | reference | chrF | right | in training |\n"
          "| --- | --- | --- | --- | ---: | --- | --- |")
    for i, (out, ref) in enumerate(zip(outputs, refs, strict=True)):
        score = chrf.sentence_score(out, [ref]).score
        known = "?" if seen is None else "yes" if seen[i] else "no"
        print(f"| {i + 1} | {_cell(sources[i])} | {_cell(out)} | {_cell(ref)} | {score:.1f} | "
              f"{'yes' if right[i] else 'no'} | {known} |")
    corpus = corpus_scores(outputs, refs, target)
    print(f"\ncorpus chrF {corpus['chrf']:.1f} ({corpus['chrf_signature']})")
    print(f"{sum(right)} of {len(rows)} outputs right (the reference or an accepted variant, "
          f"punctuation and spaces aside)")
    if seen is not None:
        fresh = [r for r, s in zip(right, seen, strict=True) if not s]
        print(f"  {sum(fresh)} of the {len(fresh)} sentences not in the training split; "
              f"{sum(right) - sum(fresh)} of the {len(rows) - len(fresh)} that are")
    print(repetition_line(outputs, target in CJK))


def read_sentences(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The lines of --sentences, or the --key field of --from-jsonl (first --limit)."""
    path = Path(args.sentences or args.from_jsonl)
    if not path.is_file():
        parser.error(f"{path}: no such file")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if args.from_jsonl:
        try:
            lines = [json.loads(line)[args.key] for line in lines]
        except (ValueError, KeyError) as err:
            parser.error(f"--from-jsonl {path}: not JSON lines with a {args.key!r} key ({err})")
    return lines[: args.limit]


def check_overlap(data_dir: Path) -> int:
    """Print each list sentence found in the corpora; 1 when any is, else 0."""
    with LIST.open(encoding="utf-8", newline="") as f:
        wanted = {normalise(row["en"], lower=True): row["en"]
                  for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)}
    found = 0
    for name in CORPORA:
        with (data_dir / name).open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                key = normalise(json.loads(line)["en"], lower=True)
                if key in wanted:
                    found += 1
                    print(f"{wanted[key]!r} is in {name} (line {number})")
    print(f"{found} occurrence(s) of the {len(wanted)} English sentences in {', '.join(CORPORA)}")
    return 1 if found else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", help="a run folder (not needed for --check-overlap)")
    parser.add_argument("--checkpoint", default="auto")
    parser.add_argument("--target", choices=("de", "zh", "en"),
                        help="the reference column (default: the run's target language)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--no-repeat-ngram", type=int, default=None, metavar="N",
                        help="as `attncli translate --no-repeat-ngram` (default: the run's)")
    parser.add_argument("--device", default="auto")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sentences", help="translate these lines instead (repetition only)")
    source.add_argument("--from-jsonl", help="translate the --key field of these JSON lines")
    parser.add_argument("--key", default="en")
    parser.add_argument("--limit", type=int, default=None, help="the first N sentences only")
    parser.add_argument("--check-overlap", action="store_true",
                        help="check the list against the corpora in $ATTNCLI_DATA_DIR")
    args = parser.parse_args()
    if args.check_overlap:
        sys.exit(check_overlap(Path(os.environ.get("ATTNCLI_DATA_DIR", "data"))))
    if args.run is None:
        parser.error("give a run folder (or --check-overlap)")
    if args.sentences or args.from_jsonl:
        outputs, config = translate(args, read_sentences(args, parser))
        print(repetition_line(outputs, base_language(config.data.tgt) in CJK))
    else:
        score_list(args, parser)


if __name__ == "__main__":
    run_reporting(main)
