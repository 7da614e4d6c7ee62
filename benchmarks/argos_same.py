"""Same translations? argostranslate with a run's Argos package against `attncli translate
--engine ctranslate2 --no-split` with Argos's search settings, sentence by sentence.

    python benchmarks/argos_same.py runs/small [runs/en-zh ...] --argos-python \\
        /root/venvs/argos/bin/python [--limit 200] [--json FILE]

For each run: the 17 everyday sentences (`everyday.tsv`, the source language's column) and the
first `--limit` sentences of the test split of its first corpus, translated by argostranslate
1.11.0 (the run's package, RUN/<from>_<to>.argosmodel, made first if missing; installed and run
by `argos_translate.py` in argostranslate's own environment, offline) and by attncli's
CTranslate2 engine with Argos's beam (4) and length penalty (0.2), one sentence per line, not
split, on the run's CTranslate2 export (RUN/ctranslate2, made first if missing) and on an int8
export (RUN/ctranslate2-int8, likewise).

argostranslate 1.11.0 opens the model with CTranslate2's compute type "auto", which on a CPU
with int8 instructions computes in int8_float32 whatever the stored type (attncli's engine:
the stored type). So three comparisons, each a table:

    float32  argostranslate with ARGOS_COMPUTE_TYPE=float32   vs attncli's float32 export
    int8     argostranslate as installed (auto: int8_float32) vs attncli's int8 export
    default  argostranslate as installed                     vs attncli's float32 export

Every output that differs is listed with its cause as tested here: `n-gram blocking` when
attncli's output with decode.no_repeat_ngram_size 0 (Argos blocks nothing) is Argos's;
`compute type` (default only) when the two agree computing in the same type; `unknown piece`
when attncli's holds SentencePiece's ⁇ (Argos has CTranslate2 replace an unknown piece by the
source piece it attends to most); `underscore` when Argos's is attncli's with "_" as spaces
(Argos's decoder turns underscores into spaces); else `other` (listed, to be read).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
from pathlib import Path

from attncli.core.config import corpora_of
from attncli.core.errors import run_reporting
from attncli.core.text import base_language
from attncli.data.sources import load_split
from attncli.decoding import argos
from attncli.export import export_command
from attncli.runs.translator import Translator

HERE = Path(__file__).resolve().parent
ARGOS_BEAM, ARGOS_LENGTH_PENALTY = 4, 0.2  # argostranslate 1.11.0 `apply_packaged_translation`
EXPORTS = {"float32": "ctranslate2", "int8": "ctranslate2-int8"}


def sources(run: Path, limit: int) -> tuple[list[str], str, str]:
    """The everyday sentences and the test sentences of the run; its languages."""
    translator = Translator(run, device="cpu")
    src, tgt = translator.source_language, translator.target_language
    with open(HERE / "everyday.tsv", encoding="utf-8") as f:
        everyday = [row[base_language(src)] for row in csv.DictReader(f, delimiter="\t")]
    first = corpora_of(translator.config.data)[0]
    return everyday + load_split(first.data, "test").src[:limit], src, tgt


def exports(run: Path, src: str, tgt: str) -> Path:
    """The run's package and CTranslate2 exports (float32, int8), made where missing."""
    package = run / argos.default_name(src, tgt)
    if not package.exists():
        export_command(run, to="argos", quantization="float32", output=None, force=False)
    for quantization, folder in EXPORTS.items():
        if not (run / folder).exists():
            export_command(run, to="ctranslate2", quantization=quantization,
                           output=run / folder, force=False)
    return package


def attncli_outputs(run: Path, texts: list[str], folder: str, no_repeat: int | None
                    ) -> list[str]:
    """`--no-repeat-ngram no_repeat` (None: the run's decode.no_repeat_ngram_size)."""
    translator = Translator(run, device="cpu", engine="ctranslate2", exported=run / folder,
                            no_repeat_ngram=no_repeat)
    translator.config.decode.length_penalty = ARGOS_LENGTH_PENALTY  # the engine reads it
    return [t.text for t in translator.translate(texts, beam=ARGOS_BEAM, split=False)]


def argos_outputs(argos_python: str, package: Path, codes: tuple[str, str],
                  texts: list[str], *, compute_type: str | None = None) -> dict:
    """argostranslate's answer (`argos_translate.py`), with ARGOS_COMPUTE_TYPE when given."""
    request = {"packages": [str(package)],
               "translate": [{"from": codes[0], "to": codes[1], "texts": texts}]}
    environment = {**os.environ, **({"ARGOS_COMPUTE_TYPE": compute_type} if compute_type
                                    else {})}
    done = subprocess.run([argos_python, str(HERE / "argos_translate.py")], check=True,
                          input=json.dumps(request), capture_output=True, text=True,
                          env=environment)
    return json.loads(done.stdout)


def cause(ours: str, unblocked: str, theirs: str, same_type: str | None = None) -> str:
    """Why attncli's output `ours` is not argostranslate's `theirs` (see the docstring)."""
    if same_type is not None and same_type == ours:
        return "compute type"
    if unblocked == theirs:
        return "n-gram blocking"
    if "⁇" in ours or "⁇" in unblocked:
        return "unknown piece"
    if ours.replace("_", " ") == theirs or unblocked.replace("_", " ") == theirs:
        return "underscore"
    return "other"


def table(texts: list[str], ours: tuple[list[str], list[str]], theirs: list[str],
          same_type: list[str] | None = None) -> dict:
    """One comparison: identical outputs, and each difference with its cause."""
    differences = []
    for i, text in enumerate(texts):
        if ours[0][i] != theirs[i]:
            differences.append({"line": i + 1, "source": text, "attncli": ours[0][i],
                                "argos": theirs[i], "cause": cause(
                                    ours[0][i], ours[1][i], theirs[i],
                                    same_type[i] if same_type else None)})
    return {"identical": len(texts) - len(differences), "sentences": len(texts),
            "differences": differences}


def compare(run: Path, argos_python: str, limit: int) -> dict:
    texts, src, tgt = sources(run, limit)
    package, codes = exports(run, src, tgt), (argos.argos_code(src), argos.argos_code(tgt))
    ours = {kind: (attncli_outputs(run, texts, folder, None),
                   attncli_outputs(run, texts, folder, 0)) for kind, folder in EXPORTS.items()}
    installed = argos_outputs(argos_python, package, codes, texts)
    in_float32 = argos_outputs(argos_python, package, codes, texts, compute_type="float32")
    theirs = installed["translations"][0], in_float32["translations"][0]
    return {"run": run.name, "argos": installed["versions"],
            "computes_in": installed["installed"][0]["computes_in"],
            "float32": table(texts, ours["float32"], theirs[1]),
            "int8": table(texts, ours["int8"], theirs[0]),
            "default": table(texts, ours["float32"], theirs[0], same_type=theirs[1])}


def _print(report: dict) -> None:
    print(f"\n## {report['run']} (argostranslate computes in {report['computes_in']} by "
          f"default; {report['argos']})")
    for kind in ("float32", "int8", "default"):
        found = report[kind]
        print(f"\n{kind}: {found['identical']} of {found['sentences']} identical "
              f"({found['identical'] / found['sentences']:.1%})\n")
        print("| line | source | attncli | argostranslate | cause |\n"
              "| --- | --- | --- | --- | --- |")
        for d in found["differences"]:
            print(f"| {d['line']} | {d['source']} | {d['attncli']} | {d['argos']} | "
                  f"{d['cause']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--argos-python", required=True,
                        help="the python of a virtual environment with argostranslate and onnx")
    parser.add_argument("--limit", type=int, default=200, help="test sentences per run")
    parser.add_argument("--json", type=Path, help="also write the reports here")
    args = parser.parse_args()
    reports = [compare(run, args.argos_python, args.limit) for run in args.runs]
    for report in reports:
        _print(report)
    if args.json:
        args.json.write_text(json.dumps(reports, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    run_reporting(main)
