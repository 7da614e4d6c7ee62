"""How attncli's data path scales to a WMT-sized corpus: a synthetic corpus, then measurements.

1. A synthetic English-German corpus of `--pairs` pairs (default 4,500,000, WMT14's size) is
   written as JSON Lines in attncli's local layout, `<work>/data/synth/{train,val,test}.jsonl`
   (val and test 3,000 pairs each): 10-40 words a side drawn from a Zipf-like distribution
   over made-up word forms, the German side a fixed function of the English side (word for
   word, with some reordering). It is seeded and written only when `<work>/data/synth.meta.json`
   does not already record the same pairs and seed.
2. **First preparation**: with `<work>/cache` and `<work>/hf` removed, `attncli prepare`
   trains the tokenizer on a sample and tokenizes train and val into the cache: total seconds,
   the tokenizer and tokenization seconds it prints, and the peak resident memory of the
   largest process (its `datasets` workers included).
3. **Warm training**: `attncli train` for `--updates` updates with the cache in place: seconds
   to the first and to the last update, seconds for the whole run (with the end-of-run
   validation and checkpoint), the median target tokens/s of the updates after the first 20,
   peak resident memory.

Each command runs as its own process under a small wrapper that reports the largest
`ru_maxrss` among the processes it waited for, so every peak is that command's alone.
`--old-code --source DIR` instead times a cold `train` of an older checkout (no `prepare`, no
cache). Prints the machine and a Markdown table (GB = 1e9 bytes); `--json PATH` saves the
figures.

    python benchmarks/data_scale.py --pairs 4500000
    python benchmarks/data_scale.py --pairs 1000000 --tokenizer-type unigram  # small.yaml's
    python benchmarks/data_scale.py --pairs 20000 --updates 20            # a quick check
    python benchmarks/data_scale.py --skip-prepare --set train.threads=2  # warm training only
    python benchmarks/data_scale.py --old-code --source /tmp/attncli-old  # an older checkout
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
GB = 1e9
DATASET = "synth"
EVAL_PAIRS = 3_000
SKIP_LINES = 20  # logged updates left out of the median rate (warm-up, first kernels)

# -- the synthetic corpus ------------------------------------------------------------------------

CORPUS_FORMAT = 1  # bump when the generator changes, so an old corpus is written again
VOCAB = 32_000  # word forms per language
MIN_WORDS, MAX_WORDS = 10, 40
ZIPF_EXPONENT, ZIPF_OFFSET = 1.0, 2.7  # p(rank r) ~ 1 / (r + offset) ** exponent
CHUNK = 50_000  # pairs rendered at a time (about 20 MB of text)
LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
# Rough letter frequencies (percent, a..z) of English and German text.
EN_LETTERS = [8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0, 0.2, 0.8, 4.0, 2.4, 6.7, 7.5, 1.9,
              0.1, 6.0, 6.3, 9.1, 2.8, 1.0, 2.4, 0.2, 2.0, 0.1]
DE_LETTERS = [6.5, 1.9, 2.7, 5.1, 17.4, 1.7, 3.0, 4.8, 7.6, 0.3, 1.2, 3.4, 2.5, 9.8, 2.5, 0.8,
              0.1, 7.0, 7.3, 6.2, 4.4, 0.7, 1.9, 0.1, 0.1, 1.1]
NOUN_SHARE = 0.3  # German forms written capitalised everywhere
# Pieces besides the words: the JSON around the two sentences, and nothing (padding).
OPEN, MIDDLE, CLOSE, EMPTY = b'{"en": "', b'", "de": "', b'"}\n', b""


def word_forms(rng: np.random.Generator, count: int, letter_weights: list[float]) -> np.ndarray:
    """`count` distinct lowercase forms of 2-12 letters as a (count, 12) uint8 array padded
    with zeros, ordered roughly short to long so that frequent words tend to be short."""
    p = np.asarray(letter_weights) / sum(letter_weights)
    forms = np.empty((0, 12), dtype=np.uint8)
    while len(forms) < count:
        extra = int(count * 1.3)
        lengths = np.clip(np.rint(rng.gamma(5.0, 1.5, extra)) + 1, 2, 12).astype(int)
        letters = rng.choice(LETTERS, size=(extra, 12), p=p)
        letters[np.arange(12) >= lengths[:, None]] = 0
        pool = np.concatenate([forms, letters])
        _, first = np.unique(pool.view("S12").ravel(), return_index=True)
        forms = pool[np.sort(first)]
    forms = forms[:count]
    lengths = (forms > 0).sum(axis=1)
    return forms[np.argsort(lengths + rng.normal(0.0, 3.0, count), kind="stable")]


@dataclass
class Pieces:
    """Every byte string a line is made of, in one buffer: piece i is
    buffer[starts[i]:starts[i] + lengths[i]]."""

    buffer: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray


def _variants(form: bytes) -> list[bytes]:
    """A word inside a sentence, first (capitalised) and last (with the final period)."""
    return [form + b" ", form[:1].upper() + form[1:] + b" ", form + b"."]


def build_pieces(en: np.ndarray, de: np.ndarray, nouns: np.ndarray) -> Pieces:
    """Piece ids: English word w in variant k is k * VOCAB + w, German 3 * VOCAB + that, then
    OPEN, MIDDLE, CLOSE and EMPTY."""
    en_forms = [row.tobytes().rstrip(b"\0") for row in en]
    de_forms = [row.tobytes().rstrip(b"\0") for row in de]
    de_forms = [f.capitalize() if noun else f for f, noun in zip(de_forms, nouns, strict=True)]
    pieces = []
    for forms in (en_forms, de_forms):
        per_form = [_variants(form) for form in forms]
        pieces += [variants[k] for k in range(3) for variants in per_form]
    pieces += [OPEN, MIDDLE, CLOSE, EMPTY]
    lengths = np.array([len(piece) for piece in pieces], dtype=np.int32)
    starts = (np.cumsum(lengths) - lengths).astype(np.int32)
    return Pieces(np.frombuffer(b"".join(pieces), dtype=np.uint8), starts, lengths)


def german_order(words: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """For each sentence, the English positions in German order: pairs of words (2,3), (4,5)...
    swap where the first word's id is a multiple of 4, and the second word goes to the end."""
    count, width = words.shape
    col = np.arange(width)
    swap = (col % 2 == 0) & (col >= 2) & (col + 1 < lengths[:, None]) & (words % 4 == 0)
    swapped_in = np.zeros_like(swap)
    swapped_in[:, 1:] = swap[:, :-1]
    order = np.where(swap, col + 1, np.where(swapped_in, col - 1, col))
    shifted = np.concatenate([order[:, :1], order[:, 2:], order[:, :1]], axis=1)
    moved = np.where((col >= 1) & (col < lengths[:, None] - 1), shifted, order)
    moved[np.arange(count), lengths - 1] = order[:, 1]
    return moved


def chunk_pieces(rng: np.random.Generator, count: int, cdf: np.ndarray) -> np.ndarray:
    """(count, 2 * MAX_WORDS + 3) piece ids: one JSON line per row."""
    lengths = rng.integers(MIN_WORDS, MAX_WORDS + 1, count)
    words = np.minimum(np.searchsorted(cdf, rng.random((count, MAX_WORDS)), side="right"),
                       VOCAB - 1)
    col = np.arange(MAX_WORDS)
    variant = np.where(col == 0, 1, np.where(col == lengths[:, None] - 1, 2, 0))
    inside = col < lengths[:, None]
    german = np.take_along_axis(words, german_order(words, lengths), axis=1)
    special = 6 * VOCAB
    rows = np.empty((count, 2 * MAX_WORDS + 3), dtype=np.int32)
    rows[:, 0], rows[:, MAX_WORDS + 1], rows[:, -1] = special, special + 1, special + 2
    rows[:, 1:MAX_WORDS + 1] = np.where(inside, variant * VOCAB + words, special + 3)
    rows[:, MAX_WORDS + 2:-1] = np.where(inside, (3 + variant) * VOCAB + german, special + 3)
    return rows


def render(rows: np.ndarray, pieces: Pieces) -> bytes:
    """The bytes of the pieces of `rows`, concatenated row by row."""
    ids = rows.ravel()
    lengths = pieces.lengths[ids]
    ids, lengths = ids[lengths > 0], lengths[lengths > 0]
    out_starts = np.cumsum(lengths, dtype=np.int32) - lengths  # a chunk is ~20 MB: int32 fits
    total = int(out_starts[-1] + lengths[-1])
    offsets = pieces.starts[ids] - out_starts
    return pieces.buffer[np.repeat(offsets, lengths) + np.arange(total, dtype=np.int32)].tobytes()


def zipf_cdf() -> np.ndarray:
    weights = 1.0 / (np.arange(VOCAB) + ZIPF_OFFSET) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def write_split(path: Path, pairs: int, rng: np.random.Generator, *, pieces: Pieces,
                cdf: np.ndarray) -> int:
    """Write `pairs` lines to `path` (through a temp file); returns its size in bytes."""
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "wb") as f:
        for start in range(0, pairs, CHUNK):
            f.write(render(chunk_pieces(rng, min(CHUNK, pairs - start), cdf), pieces))
    os.replace(temp, path)
    return path.stat().st_size


def corpus_matches(meta_path: Path, folder: Path, recorded: dict) -> bool:
    """Whether the corpus on disk was written for these settings and is complete."""
    try:
        meta = json.loads(meta_path.read_text("utf-8"))
        sizes = meta.pop("bytes")
        return meta == recorded and all((folder / name).stat().st_size == size
                                        for name, size in sizes.items())
    except (OSError, ValueError, KeyError, AttributeError):
        return False


def make_corpus(data_dir: Path, pairs: int, seed: int) -> tuple[Path, bool]:
    """`<data_dir>/synth/` with train, val and test; returns it and whether it was written now."""
    folder, meta_path = data_dir / DATASET, data_dir / f"{DATASET}.meta.json"
    recorded = {"pairs": pairs, "seed": seed, "format": CORPUS_FORMAT}
    if corpus_matches(meta_path, folder, recorded):
        return folder, False
    meta_path.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 0])
    pieces = build_pieces(word_forms(rng, VOCAB, EN_LETTERS), word_forms(rng, VOCAB, DE_LETTERS),
                          rng.random(VOCAB) < NOUN_SHARE)
    cdf, sizes = zipf_cdf(), {}
    for index, (split, count) in enumerate((("train", pairs), ("val", EVAL_PAIRS),
                                            ("test", EVAL_PAIRS)), start=1):
        name = f"{split}.jsonl"
        sizes[name] = write_split(folder / name, count, np.random.default_rng([seed, index]),
                                  pieces=pieces, cdf=cdf)
    meta_path.write_text(json.dumps({**recorded, "bytes": sizes}, indent=1) + "\n", "utf-8")
    return folder, True


# -- the config ----------------------------------------------------------------------------------

SETTINGS = {
    "data.dataset": DATASET, "data.src": "en", "data.tgt": "de", "data.valid_limit": 200,
    "data.max_len": 128, "model.max_positions": 256,
    "tokenizer.vocab_size": 8000, "train.eval_every": 1_000_000, "train.max_epochs": None,
}


def write_config(base: Path, path: Path, updates: int, tokenizer_type: str = "bpe") -> list[str]:
    """`base` with SETTINGS, tokenizer.type and train.max_steps written to `path`; returns the
    keys that `base` does not have (left out: an older checkout may not know them)."""
    config = yaml.safe_load(base.read_text("utf-8"))
    missing = []
    settings = {**SETTINGS, "tokenizer.type": tokenizer_type, "train.max_steps": updates}
    for key, value in settings.items():
        section, name = key.split(".")
        if name in config.get(section, {}):
            config[section][name] = value
        else:
            missing.append(key)
    path.write_text(yaml.safe_dump(config, sort_keys=False), "utf-8")
    return missing


# -- running a command and measuring it ----------------------------------------------------------

# Runs argv[2:], then writes the largest peak resident set (kB on Linux) among the processes it
# waited for, which includes their own waited-for children (e.g. `datasets` workers), to argv[1].
WRAPPER = """\
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


@dataclass
class Run:
    """One command: its stdout lines with the seconds since its start, and what it cost."""

    returncode: int
    seconds: float
    peak_rss_kb: int | None
    lines: list[tuple[float, str]] = field(default_factory=list)

    def first(self, pattern: str) -> tuple[float, re.Match] | None:
        for seconds, line in self.lines:
            if found := re.search(pattern, line):
                return seconds, found
        return None

    @property
    def peak_rss_gb(self) -> float | None:
        return None if self.peak_rss_kb is None else self.peak_rss_kb * 1024 / GB


def measure(cmd: list[str], env: dict[str, str], cwd: Path) -> Run:
    """Run `cmd` under WRAPPER, echoing its output to stderr as it comes."""
    print(f"$ {shlex.join(cmd)}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as temp:
        rss_file = Path(temp) / "maxrss"
        lines = []
        start = time.perf_counter()
        with subprocess.Popen([sys.executable, "-c", WRAPPER, str(rss_file), *cmd], env=env,
                              cwd=cwd, stdout=subprocess.PIPE, text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append((time.perf_counter() - start, line.rstrip("\n")))
                print(f"    {line}", end="", file=sys.stderr, flush=True)
        seconds = time.perf_counter() - start
        peak = int(rss_file.read_text()) if rss_file.is_file() else None
    print(f"  ({seconds:.1f} s, exit {proc.returncode})", file=sys.stderr, flush=True)
    return Run(proc.returncode, seconds, peak, lines)


def command_env(work: Path, source: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, ATTNCLI_DATA_DIR=str(work / "data"),
               ATTNCLI_CACHE_DIR=str(work / "cache"), HF_DATASETS_CACHE=str(work / "hf"),
               HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    return env


def set_options(pairs: list[str]) -> list[str]:
    return [option for pair in pairs for option in ("--set", pair)]


def remove(*folders: Path) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


# -- the two measurements ------------------------------------------------------------------------

_SECONDS = r"in ([\d,]+(?:\.\d+)?) s\b"


def _parsed_seconds(run: Run, pattern: str) -> float | None:
    found = run.first(pattern + r".*?" + _SECONDS)
    return float(found[1].group(1).replace(",", "")) if found else None


def first_preparation(attncli: list[str], config: Path, work: Path, sets: list[str]) -> dict:
    remove(work / "cache", work / "hf")
    run = measure([*attncli, "prepare", str(config), *set_options(sets)], command_env(work), work)
    if run.returncode != 0:
        raise SystemExit(f"attncli prepare failed (exit {run.returncode}); see its output above")
    processes = run.first(r"^cache: tokenized the train split .* with (\d+) process")
    return {"seconds": run.seconds, "tokenizer_s": _parsed_seconds(run, r"^tokenizer: trained"),
            "tokenize_train_s": _parsed_seconds(run, r"^cache: tokenized the train split"),
            "tokenize_val_s": _parsed_seconds(run, r"^cache: tokenized the val split"),
            "processes": int(processes[1].group(1)) if processes else None,
            "peak_rss_gb": run.peak_rss_gb}


_STEP = r"^step\s+(\d+) \|.*\| ([\d,]+(?:\.\d+)?) tgt tok/s"


def median_rate(run: Run) -> float | None:
    """Median tgt tok/s of the logged updates after the first SKIP_LINES (None if none)."""
    rates = [float(found.group(2).replace(",", "")) for _, line in run.lines
             if (found := re.match(_STEP, line)) and int(found.group(1)) > SKIP_LINES]
    return statistics.median(rates) if rates else None


def training(cmd: list[str], env: dict[str, str], work: Path) -> dict:
    remove(work / "runs")
    run = measure(cmd, env, work)
    first = run.first(r"^step\s+1 \|")
    steps = [seconds for seconds, line in run.lines if re.match(r"^step\s+\d+ \|", line)]
    cold = run.first(r"^(tokenizer: trained|cache: tokenized)")
    return {"seconds": run.seconds, "first_update_s": first[0] if first else None,
            "last_update_s": steps[-1] if steps else None,
            "median_tgt_tok_s": median_rate(run), "peak_rss_gb": run.peak_rss_gb,
            "exit": run.returncode, "cache_was_warm": cold is None}


def train_command(prefix: list[str], config: Path, work: Path, *, updates: int,
                  sets: list[str]) -> list[str]:
    extra = [f"train.max_steps={updates}", "train.log_every=1", *sets]
    return [*prefix, "train", str(config), *set_options(extra), "--runs-dir", str(work / "runs")]


# -- the report ----------------------------------------------------------------------------------


def machine() -> dict:
    """CPU model, cores, bf16 instruction flags and memory, from /proc."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
    flags_set = set(flags.group(1).split()) if flags else set()
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    mem_kb = re.search(r"^MemTotal:\s*(\d+) kB", meminfo, re.M)
    return {"cpu": model.group(1).strip() if model else "unknown", "cores": os.cpu_count(),
            "avx512_bf16": "avx512_bf16" in flags_set, "amx_bf16": "amx_bf16" in flags_set,
            "memory_gb": int(mem_kb.group(1)) * 1024 / GB if mem_kb else None}


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def machine_label(info: dict) -> str:
    bf16 = ", ".join(f"{flag} {'yes' if info[flag] else 'no'}"
                     for flag in ("avx512_bf16", "amx_bf16"))
    return (f"{info['cpu']}, {info['cores']} cores, {bf16}, "
            f"{fmt(info['memory_gb'], ' GB')} memory")


def _prepare_rows(prep: dict) -> list[tuple[str, str]]:
    return [("first preparation: total", fmt(prep["seconds"], " s")),
            ("first preparation: tokenizer", fmt(prep["tokenizer_s"], " s")),
            ("first preparation: tokenization (train split)",
             f"{fmt(prep['tokenize_train_s'], ' s')} with {prep['processes']} process(es)"),
            ("first preparation: peak RSS, largest process",
             fmt(prep["peak_rss_gb"], " GB", 2))]


def _train_rows(train: dict, updates: int, old_code: bool) -> list[tuple[str, str]]:
    label = "cold start (old code)" if old_code else "warm start"
    rows = [(f"{label}: seconds to the first update", fmt(train["first_update_s"], " s")),
            (f"{label}: seconds to the last logged update", fmt(train["last_update_s"], " s")),
            (f"{label}: whole run of {updates} updates (final validation included)",
             fmt(train["seconds"], " s")),
            (f"{label}: peak RSS over {updates} updates", fmt(train["peak_rss_gb"], " GB", 2))]
    if not old_code and updates > SKIP_LINES:
        rows.append((f"{label}: median tgt tok/s (updates {SKIP_LINES + 1}-{updates})",
                     fmt(train["median_tgt_tok_s"], digits=0)))
    elif not old_code:
        rows.append((f"{label}: median tgt tok/s", f"n/a (needs over {SKIP_LINES} updates)"))
    if train["exit"] != 0:
        rows.append((f"{label}: exit status", str(train["exit"])))
    return rows


def table_rows(report: dict) -> list[tuple[str, str]]:
    corpus = report["corpus"]
    rows = [("corpus", f"{corpus['pairs']:,} pairs, train.jsonl {corpus['train_gb']:,.3f} GB"),
            ("tokenizer.type", report.get("tokenizer_type", "bpe"))]
    if report.get("prepare"):
        rows += _prepare_rows(report["prepare"])
    return rows + _train_rows(report["train"], report["updates"], report["old_code"])


def print_report(report: dict) -> None:
    print(f"Machine: {machine_label(report['machine'])}")
    print("GB = 1e9 bytes; peak RSS = the largest single process of the command.\n")
    print("| measure | value |\n|---|---|")
    for name, value in table_rows(report):
        print(f"| {name} | {value} |")
    if not report["old_code"] and not report["train"]["cache_was_warm"]:
        print("\nwarning: training tokenized data itself, so it did not start warm")


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4_500_000, help="training pairs")
    parser.add_argument("--updates", type=int, default=300, help="training updates to time")
    parser.add_argument("--work", type=Path, default=Path("/tmp/attncli-data-scale"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus")
    parser.add_argument("--tokenizer-type", choices=("bpe", "unigram"), default="bpe",
                        help="tokenizer.type (unigram, small.yaml's, needs more memory a "
                             "character than bpe)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="config override passed to both commands (repeatable)")
    parser.add_argument("--skip-prepare", action="store_true",
                        help="only the warm training (the cache is assumed present)")
    parser.add_argument("--attncli", help="the attncli command (default: next to this Python)")
    parser.add_argument("--old-code", action="store_true",
                        help="time a cold `train` of the checkout --source (no prepare, no cache)")
    parser.add_argument("--source", type=Path, help="the older checkout for --old-code")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.old_code and args.source is None:
        parser.error("--old-code needs --source DIR (the older checkout)")
    return args


def run_benchmark(args: argparse.Namespace) -> dict:
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    folder, written = make_corpus(work / "data", args.pairs, args.seed)
    print(f"corpus: {'wrote' if written else 'reusing'} {folder} "
          f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    base = (args.source if args.old_code else REPO) / "configs" / "small.yaml"
    config = work / "synth.yaml"
    missing = write_config(base if base.is_file() else REPO / "configs/small.yaml", config,
                           args.updates, args.tokenizer_type)
    if missing:
        print(f"config: {base} has no {', '.join(missing)}; left out", file=sys.stderr)
    report = {"machine": machine(), "old_code": args.old_code, "updates": args.updates,
              "tokenizer_type": args.tokenizer_type,
              "corpus": {"pairs": args.pairs, "seed": args.seed,
                         "train_gb": (folder / "train.jsonl").stat().st_size / GB}}
    if args.old_code:
        remove(work / "cache", work / "hf")
        cmd = train_command([sys.executable, "-m", "attncli"], config, work,
                            updates=args.updates, sets=args.sets)
        report["train"] = training(cmd, command_env(work, args.source.resolve()), work)
        return report
    attncli = shlex.split(args.attncli) if args.attncli else [
        str(Path(sys.executable).with_name("attncli"))]
    if not args.skip_prepare:
        report["prepare"] = first_preparation(attncli, config, work, args.sets)
    cmd = train_command(attncli, config, work, updates=args.updates, sets=args.sets)
    report["train"] = training(cmd, command_env(work), work)
    return report


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = run_benchmark(args)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()
