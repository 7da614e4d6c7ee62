"""Which sentence splitter attncli uses (issue 55, item 2): measured on en, de and zh.

    python3.11 -m venv /tmp/splitvenv
    /tmp/splitvenv/bin/pip install -e . pysbd blingfire syntok spacy    # attncli: its fix-ups
    /tmp/splitvenv/bin/python benchmarks/splitter_choice.py [--json FILE] [--extra-out FILE]

A candidate that is not installed is left out (its row says so). Candidates: sentencex
(`get_sentence_boundaries(lang, text)`), pysbd (`Segmenter(language=lang, clean=False)`),
blingfire (`text_to_sentences_and_offsets(text)`, no language parameter), syntok
(`segmenter.analyze(text)`, no language parameter), spacy-sentencizer (`spacy.blank(lang)` with
the rule-based "sentencizer" pipe, no model download), and sentencex+fixup (sentencex with the
fix-ups of `attncli.data.sentences.fixup_cuts`, which attncli uses: German ordinals, a closing
quote followed by a speech tag, everyday words it takes for abbreviations).
Every candidate is turned into a function from a text to the character spans of its sentences:
the package's own offsets where it gives them, else each piece found in order in the original
(`spans_from_pieces`).

What it measures, per language (data in $ATTNCLI_DATA_DIR, default ../shared/data; Tatoeba
test: en and de from tatoeba-en-de, zh from tatoeba-en-zh; a sentence equal to the one before it
is dropped):
1. recall: the sentences are joined in consecutive groups of 2-6 (sizes drawn with a fixed
   seed), en/de with one space, zh with nothing; a join is found when a cut of the splitter falls
   on it (whitespace around the cut allowed). Also the recall over joins whose left sentence
   ends in terminal punctuation (the others no rule-based splitter can find).
2. extra splits: each Tatoeba sentence alone; how many come back in more than one piece, and
   the extra pieces in all (`--extra-out` writes them, to be classed right or wrong by eye).
3. hand cases (`HAND_CASES`): right when the stripped pieces equal one of the accepted lists.
4. speed: MB/s (UTF-8) splitting dailydialog-en-zh test (en, zh) and tatoeba-en-de test (de)
   one line a call, median of `--repeats` (CPU time of the process); and microseconds per call
   on one-sentence lines (the first 500 Tatoeba sentences), median of the repeats.
5. spans: whether the pieces map back to the original text (spans in order, no overlap, only
   whitespace left between them), over the hand cases and the dailydialog lines.
6. with --pool: the distinct Tatoeba train sentences (en, de) cut right after a number with a
   period or an abbreviation of `SUSPECT_END` (sentences a reader classes right or wrong); and
   recall as in 1 on 20,000 distinct Tatoeba train sentences per language (`pool_recall`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from attncli.data.sentences import fixup_cuts

Span = tuple[int, int]
SplitFn = Callable[[str], list[Span]]  # text -> character spans of its sentences, in order
Maker = Callable[[str], SplitFn]  # language code -> that language's splitter

LANGS = ("en", "de", "zh")
DATA = Path(os.environ.get("ATTNCLI_DATA_DIR",
                          Path(__file__).resolve().parent.parent.parent / "shared" / "data"))
SEED = 55
TERMINAL = set(".!?。！？…;；")
CLOSERS = set("\"'”’」』）)》")

# (language, text, accepted splits); a split is the list of stripped pieces.
HAND_CASES: list[tuple[str, str, list[list[str]]]] = [
    ("de", "Am 3. Okt. 2020 kam er an. Dann ging er.",
     [["Am 3. Okt. 2020 kam er an.", "Dann ging er."]]),
    ("de", "Er mag Obst, z. B. Äpfel. Sie nicht.", [["Er mag Obst, z. B. Äpfel.", "Sie nicht."]]),
    ("de", "„Komm!“, rief er. Sie kam.", [["„Komm!“, rief er.", "Sie kam."]]),
    ("de", "Im 19. Jahrhundert war das so. Heute nicht.",
     [["Im 19. Jahrhundert war das so.", "Heute nicht."]]),
    ("de", "Er liebt mich. Sie nicht.", [["Er liebt mich.", "Sie nicht."]]),
    ("en", "Help me. I am lost.", [["Help me.", "I am lost."]]),
    ("en", "Dr. Smith is here. He is late.", [["Dr. Smith is here.", "He is late."]]),
    ("en", "He lives in the U.S. now. She does not.",
     [["He lives in the U.S. now.", "She does not."]]),
    ("en", "It costs 3.5 euros. That is cheap.", [["It costs 3.5 euros.", "That is cheap."]]),
    ("en", '"Hi!" she said. "Go."', [['"Hi!" she said.', '"Go."']]),
    ("en", "Well... I don't know. Maybe.",
     [["Well... I don't know.", "Maybe."], ["Well...", "I don't know.", "Maybe."]]),
    ("en", "Hello how are you", [["Hello how are you"]]),
    ("en", "Hello. how are you", [["Hello.", "how are you"], ["Hello. how are you"]]),
    ("zh", "好的。", [["好的。"]]),
    ("zh", "好的。谢谢！", [["好的。", "谢谢！"]]),
    ("zh", "“你好！”他说。我笑了。", [["“你好！”他说。", "我笑了。"]]),
    ("zh", "「你好！」他說。我笑了。", [["「你好！」他說。", "我笑了。"]]),
    ("zh", "你好！你好吗？我很好……谢谢。",
     [["你好！", "你好吗？", "我很好……谢谢。"], ["你好！", "你好吗？", "我很好……", "谢谢。"]]),
    ("zh", "我很累；我想睡觉。", [["我很累；我想睡觉。"], ["我很累；", "我想睡觉。"]]),
    ("zh", "他说：“我来了。”然后走了。", [["他说：“我来了。”", "然后走了。"],
                                       ["他说：“我来了。”然后走了。"]]),
    ("zh", "你是谁?我是汤姆。", [["你是谁?", "我是汤姆。"]]),
]


def spans_from_pieces(text: str, pieces: list[str], lost: list[int]) -> list[Span]:
    """Each stripped piece found in `text` in order; a piece not found adds one to lost[0]."""
    spans: list[Span] = []
    pos = 0
    for piece in pieces:
        p = piece.strip()
        if not p:
            continue
        i = text.find(p, pos)
        if i < 0:
            lost[0] += 1
            continue
        spans.append((i, i + len(p)))
        pos = i + len(p)
    return spans


def make_sentencex(lang: str) -> SplitFn:
    import sentencex

    def split(text: str) -> list[Span]:
        return [(b["start_index"], b["end_index"])
                for b in sentencex.get_sentence_boundaries(lang, text)]
    return split


def make_pysbd(lang: str, lost: list[int]) -> SplitFn:
    import pysbd

    seg = pysbd.Segmenter(language=lang, clean=False)
    return lambda text: spans_from_pieces(text, seg.segment(text), lost)


def make_blingfire(lang: str) -> SplitFn:
    import blingfire

    def split(text: str) -> list[Span]:
        if not text.strip():
            return []
        return [(s, e) for s, e in blingfire.text_to_sentences_and_offsets(text)[1]]
    return split


def make_syntok(lang: str) -> SplitFn:
    import syntok.segmenter as segmenter

    def split(text: str) -> list[Span]:
        return [(s[0].offset, s[-1].offset + len(s[-1].value))
                for para in segmenter.analyze(text) for s in para if s]
    return split


def make_spacy(lang: str) -> SplitFn:
    import spacy

    nlp = spacy.blank(lang)
    nlp.add_pipe("sentencizer")
    return lambda text: [(s.start_char, s.end_char) for s in nlp(text).sents]


def candidates() -> dict[str, tuple[str, Maker, list[int]]]:
    """name -> (distribution, maker, lost-piece counter)."""
    lost = [0]

    def sentencex_fixup(lang: str) -> SplitFn:
        base = make_sentencex(lang)
        return lambda text: fixup_cuts(lang, text, base(text))
    return {
        "sentencex": ("sentencex", make_sentencex, [0]),
        "sentencex+fixup": ("sentencex", sentencex_fixup, [0]),
        "pysbd": ("pysbd", lambda lang: make_pysbd(lang, lost), lost),
        "blingfire": ("blingfire", make_blingfire, [0]),
        "syntok": ("syntok", make_syntok, [0]),
        "spacy-sentencizer": ("spacy", make_spacy, [0]),
    }


def skip_space(text: str, i: int) -> int:
    """The first index at or after i that is not whitespace."""
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def cut_points(text: str, spans: list[Span]) -> set[int]:
    """Where the splitter cuts `text`: each sentence start after the first non-blank one,
    moved past whitespace; the text's own start and end are not cuts."""
    first = skip_space(text, 0)
    cuts = {skip_space(text, s) for s, e in spans if text[s:e].strip()}
    return {c for c in cuts if first < c < len(text)}


def read_column(path: Path, key: str) -> list[str]:
    """The values of `key` in a JSON Lines file, in order."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line)[key] for line in f if line.strip()]


def tatoeba(lang: str) -> list[str]:
    """Tatoeba test sentences of `lang`, each one equal to the one before it dropped."""
    pair = "tatoeba-en-zh" if lang == "zh" else "tatoeba-en-de"
    rows = read_column(DATA / pair / "test.jsonl", lang)
    return [s.strip() for i, s in enumerate(rows) if s.strip() and (i == 0 or s != rows[i - 1])]


def ends_terminal(sentence: str) -> bool:
    """Whether the sentence ends in terminal punctuation (closing quotes skipped)."""
    s = sentence.rstrip()
    while s and s[-1] in CLOSERS:
        s = s[:-1]
    return bool(s) and s[-1] in TERMINAL


def recall(split: SplitFn, sentences: list[str], lang: str,
           missed: list[str] | None = None) -> dict[str, float]:
    """Found joins among all joins and among joins after terminal punctuation; the left
    sentences of missed joins after terminal punctuation are appended to `missed`."""
    rng = random.Random(SEED)
    glue = "" if lang == "zh" else " "
    found = total = found_t = total_t = 0
    i = 0
    while i < len(sentences):
        group = sentences[i:i + rng.randint(2, 6)]
        i += len(group)
        text, joins = group[0], []
        for left, s in zip(group, group[1:], strict=False):
            text += glue
            joins.append((len(text), ends_terminal(left)))
            text += s
        cuts = cut_points(text, split(text))
        for pos, term in joins:
            hit = pos in cuts
            found, total = found + hit, total + 1
            found_t, total_t = found_t + (hit and term), total_t + term
            if term and not hit and missed is not None:
                missed.append(text[:pos].rstrip().rsplit("\n", 1)[-1])
    return {"recall": found / total, "recall_terminal": found_t / total_t, "joins": total,
            "joins_terminal": total_t}


def extra_splits(split: SplitFn, sentences: list[str]) -> tuple[int, int, list[list[str]]]:
    """(sentences cut in more than one piece, extra pieces in all, those sentences' pieces)."""
    n_split = extra = 0
    shown: list[list[str]] = []
    for s in sentences:
        spans = [(a, b) for a, b in split(s) if s[a:b].strip()]
        if len(spans) > 1:
            n_split += 1
            extra += len(spans) - 1
            shown.append([s[a:b].strip() for a, b in spans])
    return n_split, extra, shown


def hand_cases(makers: dict[str, SplitFn]) -> list[tuple[bool, list[str]]]:
    """(right, stripped pieces) for each of HAND_CASES."""
    out = []
    for lang, text, accepted in HAND_CASES:
        split = makers[lang]
        pieces = [text[a:b].strip() for a, b in split(text) if text[a:b].strip()]
        out.append((pieces in accepted, pieces))
    return out


def spans_ok(split: SplitFn, texts: list[str]) -> tuple[int, int]:
    """(texts whose spans are in order, non-overlapping and leave only whitespace between
    and around them, texts checked)."""
    good = 0
    for text in texts:
        spans = split(text)
        pos, ok = 0, True
        for a, b in spans:
            ok = ok and a >= pos and not text[pos:a].strip() and b >= a
            pos = max(pos, b)
        good += ok and not text[pos:].strip()
    return good, len(texts)


def median_seconds(split: SplitFn, lines: list[str], repeats: int) -> float:
    """Median CPU time of this process splitting every line once (after a warm-up pass): CPU
    time, not wall time, so that other work on the machine barely moves it (one thread: on an
    idle machine the two are the same)."""
    for line in lines[:200]:
        split(line)
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        for line in lines:
            split(line)
        times.append(time.process_time() - t0)
    return statistics.median(times)


def speed(makers: dict[str, SplitFn], repeats: int) -> dict[str, float]:
    """MB/s per language on the speed texts, and microseconds per one-sentence call."""
    dd = DATA / "dailydialog-en-zh" / "test.jsonl"
    texts = {"en": read_column(dd, "en"), "zh": read_column(dd, "zh"),
             "de": read_column(DATA / "tatoeba-en-de" / "test.jsonl", "de")}
    out: dict[str, float] = {}
    for lang in LANGS:
        mb = sum(len(t.encode()) for t in texts[lang]) / 1e6
        out[f"mbs_{lang}"] = mb / median_seconds(makers[lang], texts[lang], repeats)
        one = tatoeba(lang)[:500]
        out[f"us_{lang}"] = 1e6 * median_seconds(makers[lang], one, repeats) / len(one)
    return out


def install_info(dist: str) -> dict[str, str]:
    """Version and licence of a distribution, from its metadata."""
    md = metadata.metadata(dist)
    lic = md.get("License-Expression") or md.get("License") or ""
    if not lic or lic == "UNKNOWN" or len(lic) > 40:
        classifiers = [c.split(" :: ")[-1] for c in md.get_all("Classifier") or []
                       if c.startswith("License ::")]
        lic = ", ".join(classifiers) or lic[:40]
    return {"version": md["Version"], "licence": lic}


@dataclass
class Result:
    name: str
    info: dict[str, str]
    load_ms: float = 0.0
    rec: dict[str, dict[str, float]] = field(default_factory=dict)
    extra: dict[str, tuple[int, int]] = field(default_factory=dict)
    shown: dict[str, list[list[str]]] = field(default_factory=dict)
    hand: list[tuple[bool, list[str]]] = field(default_factory=list)
    speed: dict[str, float] = field(default_factory=dict)
    spans: tuple[int, int] = (0, 0)
    lost: int = 0
    pool: dict[str, list[str]] = field(default_factory=dict)
    pool_rec: dict[str, dict[str, object]] = field(default_factory=dict)


def measure(name: str, dist: str, make: Maker, lost: list[int], *, repeats: int,
            pool: bool = False) -> Result:
    """Every measurement of one candidate."""
    t0 = time.perf_counter()
    makers = {lang: make(lang) for lang in LANGS}
    res = Result(name, install_info(dist), load_ms=1e3 * (time.perf_counter() - t0))
    for lang in LANGS:
        sents = tatoeba(lang)
        res.rec[lang] = recall(makers[lang], sents, lang)
        n, extra, shown = extra_splits(makers[lang], sents)
        res.extra[lang], res.shown[lang] = (n, extra), shown
    res.hand = hand_cases(makers)
    dd = DATA / "dailydialog-en-zh" / "test.jsonl"
    span_texts = {"en": read_column(dd, "en"), "zh": read_column(dd, "zh")}
    checks = [spans_ok(makers[lang], span_texts[lang]) for lang in span_texts]
    checks += [spans_ok(makers[lang], [text]) for lang, text, _ in HAND_CASES]
    res.spans = (sum(g for g, _ in checks), sum(n for _, n in checks))
    res.speed = speed(makers, repeats)
    res.lost = lost[0]
    if pool:
        res.pool = pool_suspects(make)
        res.pool_rec = pool_recall(make)
    return res


SUSPECT_END = re.compile(
    r"(?:\d\.|\b(?:Dr|Mr|Mrs|Ms|St|Mt|Prof|Jr|Sr|Inc|Co|No|Nr|bzw|usw|ca|etc|vs|Str|Mio|Mrd|"
    r"evtl|ggf|inkl|vgl|Jan|Feb|Apr|Aug|Sept?|Okt|Nov|Dez|z\.\s?B|d\.\s?h|u\.\s?a|e\.g|i\.e|"
    r"a\.m|p\.m|U\.S|U\.K)\.)$")


def pool_recall(make: Maker, size: int = 20000) -> dict[str, dict[str, object]]:
    """`recall` on `size` distinct Tatoeba *train* sentences per language (shuffled with the
    seed), and the last words of the left sentences of the joins missed most often."""
    out: dict[str, dict[str, object]] = {}
    for lang in LANGS:
        pair = "tatoeba-en-zh" if lang == "zh" else "tatoeba-en-de"
        rows = list(dict.fromkeys(read_column(DATA / pair / "train.jsonl", lang)))
        random.Random(SEED).shuffle(rows)
        missed: list[str] = []
        res: dict[str, object] = dict(recall(make(lang), rows[:size], lang, missed))
        words = [m.split()[-1] if lang != "zh" else m[-3:] for m in missed]
        top = sorted(set(words), key=lambda w: (-words.count(w), w))[:6]
        res["most_missed"] = [f"{w} {words.count(w)}" for w in top]
        out[lang] = res
    return out


def pool_suspects(make: Maker) -> dict[str, list[str]]:
    """Tatoeba *train* sentences (en, de; distinct) cut right after a number with a period or a
    listed abbreviation: the pieces joined by ' ‖ ', for classing by eye."""
    out: dict[str, list[str]] = {}
    for lang in ("en", "de"):
        split = make(lang)
        rows = read_column(DATA / "tatoeba-en-de" / "train.jsonl", lang)
        out[lang] = []
        for s in dict.fromkeys(rows):
            pieces = [s[a:b].strip() for a, b in split(s) if s[a:b].strip()]
            if any(SUSPECT_END.search(p) for p in pieces[:-1]):
                out[lang].append(" ‖ ".join(pieces))
    return out


def table(results: list[Result]) -> str:
    """The markdown tables: the numbers, then the hand cases."""
    head = ("| candidate | version | licence | recall en / de / zh | recall after terminal "
            "punct. en / de / zh | sentences split (extra pieces) en / de / zh | hand cases "
            f"right (of {len(HAND_CASES)}) | MB/s en / de / zh | µs/call en / de / zh | "
            "spans map back | load ms |")
    lines = [head, "|" + " --- |" * 11]
    for r in results:
        rec = " / ".join(f"{r.rec[lg]['recall']:.3f}" for lg in LANGS)
        rect = " / ".join(f"{r.rec[lg]['recall_terminal']:.3f}" for lg in LANGS)
        ext = " / ".join(f"{r.extra[lg][0]} ({r.extra[lg][1]})" for lg in LANGS)
        mbs = " / ".join(f"{r.speed[f'mbs_{lg}']:.2f}" for lg in LANGS)
        us = " / ".join(f"{r.speed[f'us_{lg}']:.0f}" for lg in LANGS)
        spans = f"{r.spans[0]}/{r.spans[1]}" + (f", {r.lost} pieces lost" if r.lost else "")
        lines.append(f"| {r.name} | {r.info['version']} | {r.info['licence']} | {rec} | {rect} "
                     f"| {ext} | {sum(ok for ok, _ in r.hand)} | {mbs} | {us} | {spans} "
                     f"| {r.load_ms:.0f} |")
    lines += ["", "| lang | case | " + " | ".join(r.name for r in results) + " |",
              "|" + " --- |" * (2 + len(results))]
    for i, (lang, text, _) in enumerate(HAND_CASES):
        cells = " | ".join(("✓ " if r.hand[i][0] else "✗ ") + " ‖ ".join(r.hand[i][1])
                           for r in results)
        lines.append(f"| {lang} | {text} | {cells} |".replace("\n", " "))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="candidate names to run (default: all)")
    ap.add_argument("--json", type=Path, help="write every number here")
    ap.add_argument("--extra-out", type=Path, help="write the extra-split sentences here")
    ap.add_argument("--pool", action="store_true",
                    help="also count cuts after a number or abbreviation in Tatoeba train (slow)")
    args = ap.parse_args()
    results, missing = [], []
    for name, (dist, make, lost) in candidates().items():
        if args.only and name not in args.only:
            continue
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        results.append(measure(name, dist, make, lost, repeats=args.repeats, pool=args.pool))
    print(table(results))
    if args.pool:
        print("\ncuts after a number or abbreviation in Tatoeba train (en / de): "
              + "; ".join(f"{r.name} {len(r.pool['en'])} / {len(r.pool['de'])}" for r in results))
    if args.pool:
        print("\n| candidate | train recall en / de / zh | after terminal punct. | most missed |")
        print("| --- | --- | --- | --- |")
        for r in results:
            pr = r.pool_rec
            print(f"| {r.name} | " + " / ".join(f"{pr[lg]['recall']:.3f}" for lg in LANGS)
                  + " | " + " / ".join(f"{pr[lg]['recall_terminal']:.3f}" for lg in LANGS)
                  + " | " + "; ".join(f"{lg}: {', '.join(pr[lg]['most_missed'])}"
                                      for lg in LANGS) + " |")
    if missing:
        print(f"\nnot installed: {', '.join(missing)}")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], ensure_ascii=False,
                                        indent=1))
    if args.extra_out:
        args.extra_out.write_text(json.dumps({r.name: {"test": r.shown, "train": r.pool}
                                              for r in results},
                                             ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
