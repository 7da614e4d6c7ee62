"""Decoding speed of this tree against another commit, and whether their outputs are identical.

For a run folder, decodes (greedy and beam 5, the Python API as `attncli eval` calls it, with
glibc malloc tuned as the CLI tunes it) the Multi30k test split and synthetic 10-word and
40-word sentences (made by `benchmarks/synthetic_sentences.py`), with the code of this tree
and with the code of a git commit (checked out with `git archive` into a temporary folder and
run with PYTHONPATH pointing at it, as in benchmarks/same_curve.py). Each round runs both
trees in fresh processes, one after the other; the table gives the median time per sentence,
the growth from 10-word to 40-word sentences and the speed-up, and every difference of tokens
or score between the two trees is counted (the goal: none).

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/decode_speed.py RUN --ref d483db1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "benchmarks"))
from same_curve import checkout  # noqa: E402


def worker(run: Path, files: list[Path], beams: list[int], out: Path) -> None:
    """Decode every file with every beam with whichever attncli PYTHONPATH gives; JSON out."""
    import torch

    import attncli

    try:  # attncli's packages (0.5 on), or the flat modules of a --ref tree from before them
        from attncli.core.malloc import keep_freed_memory
        from attncli.decoding.texts import encode_sources
        from attncli.runs.trained import decode_ids, load_for_decoding
    except ImportError:
        from attncli.malloc import keep_freed_memory

        from attncli.evaluate import decode_ids, encode_sources, load_for_decoding

    keep_freed_memory()  # as the CLI does before any command
    torch.manual_seed(0)
    import inspect

    # Trees from before n-gram blocking decode without it: so do newer ones, for equal outputs.
    off = ({"no_repeat_ngram": 0}
           if "no_repeat_ngram" in inspect.signature(load_for_decoding).parameters else {})
    trained = load_for_decoding(run, "cpu", "best", **off)
    report: dict = {"attncli": str(Path(attncli.__file__).parent), "results": {}}
    for path in files:
        texts = [json.loads(line)["en"] for line in path.read_text("utf-8").splitlines()]
        src_ids = encode_sources(trained.tokenizer, texts, trained.model.cfg.max_positions)
        decode_ids(trained, src_ids[:16], 1, 1)  # warm-up
        for beam in beams:
            start = time.perf_counter()
            found = decode_ids(trained, src_ids, beam, 1)
            seconds = time.perf_counter() - start
            report["results"][f"{path.name} beam {beam}"] = {
                "ms_per_sentence": 1e3 * seconds / len(texts),
                "tokens": [h[0].tokens for h in found],
                "scores": [h[0].score for h in found],
            }
    out.write_text(json.dumps(report))


def run_tree(tree: Path, args: argparse.Namespace, files: list[Path], out: Path) -> dict:
    command = [sys.executable, __file__, str(args.run), "--worker", str(out),
               "--beams", *map(str, args.beams), "--files", *map(str, files)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(command, check=True, env=env)
    return json.loads(out.read_text())


def inputs(args: argparse.Namespace, work: Path) -> list[Path]:
    """Multi30k test and the synthetic sentence files (made in ``work`` when not given)."""
    data = Path(os.environ.get("ATTNCLI_DATA_DIR", "data"))
    files = [data / "multi30k/test.jsonl"]
    for words in (10, 40):
        path = work / f"synthetic{words}.jsonl"
        subprocess.run([sys.executable, str(HERE / "benchmarks/synthetic_sentences.py"),
                        "--sentences", str(args.sentences), "--words", str(words),
                        "--out", str(path)], check=True)
        files.append(path)
    return files


def differences(ours: dict, theirs: dict) -> tuple[int, int, float]:
    """Sentences whose best hypothesis differs in tokens, sentences whose score differs at all,
    and the largest score difference, between two reports."""
    tokens = scores = 0
    largest = 0.0
    for key, mine in ours["results"].items():
        other = theirs["results"][key]
        for a, b, s, t in zip(mine["tokens"], other["tokens"], mine["scores"], other["scores"],
                              strict=True):
            tokens += a != b
            scores += s != t
            if a == b:
                largest = max(largest, abs(s - t))
    return tokens, scores, largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--ref", default="d483db1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--files", type=Path, nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.run, args.files, args.beams, args.worker)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "ref").mkdir()
        ref_tree = checkout(args.ref, work / "ref")
        files = inputs(args, work)
        reports: dict[str, list[dict]] = {"ref": [], "this": []}
        for r in range(args.rounds):
            reports["ref"].append(run_tree(ref_tree, args, files, work / f"ref{r}.json"))
            reports["this"].append(run_tree(HERE, args, files, work / f"this{r}.json"))
        print(f"code: this tree = {reports['this'][0]['attncli']}, ref {args.ref} = "
              f"{reports['ref'][0]['attncli']}; {args.rounds} rounds, median ms per sentence")
        print(f"{'input':>28} {'ref':>8} {'this':>8} {'speed-up':>9}")
        median: dict[tuple[str, str], float] = {}
        for key in reports["this"][0]["results"]:
            for side in ("ref", "this"):
                median[side, key] = statistics.median(
                    rep["results"][key]["ms_per_sentence"] for rep in reports[side])
            print(f"{key:>28} {median['ref', key]:8.2f} {median['this', key]:8.2f} "
                  f"{median['ref', key] / median['this', key]:8.2f}x")
        for beam in args.beams:
            k10, k40 = f"synthetic10.jsonl beam {beam}", f"synthetic40.jsonl beam {beam}"
            print(f"growth 10 -> 40 words, beam {beam}: ref "
                  f"{median['ref', k40] / median['ref', k10]:.2f}x, this "
                  f"{median['this', k40] / median['this', k10]:.2f}x")
        tokens, scores, largest = differences(reports["this"][0], reports["ref"][0])
        print(f"sentences whose best hypothesis differs: in tokens {tokens}, in score {scores} "
              f"(largest score difference where the tokens agree: {largest:.2g})")


if __name__ == "__main__":
    main()
