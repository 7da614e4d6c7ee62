"""Translate with Argos Translate itself: install attncli's packages with argostranslate's own
`install_from_path` into a packages folder of its own, offline, and translate lines with them.

    /root/venvs/argos/bin/python benchmarks/argos_translate.py < request.json > answer.json

Runs in argostranslate's virtual environment (argostranslate 1.11.0, onnx for the MiniSBD
placeholder: `argos_offline.py`), not attncli's. The request is JSON on standard input:
{"packages": [".../en_de.argosmodel", ...], "translate": [{"from": "en", "to": "de",
"texts": [...]}, ...]}; the answer, on standard output: the versions, what got installed
(metadata and whether the card came along), and one list of translations per request item,
each line of a text translated by `translate.translate` as a user's code would call it.
`tests/test_argos_package.py` and `benchmarks/argos_same.py` start it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

import argos_offline


def _sources(packages: list[str]) -> list[str]:
    """The source languages of the packages (each one's metadata.json in its zip)."""
    found = []
    for package in packages:
        with zipfile.ZipFile(package) as archive:
            name = next(n for n in archive.namelist() if n.endswith("/metadata.json"))
            found.append(json.loads(archive.read(name))["from_code"])
    return sorted(set(found))


def _compute_type(model: Path) -> str:
    """The type CTranslate2 computes in when opened as argostranslate opens it (its
    ARGOS_COMPUTE_TYPE setting, "auto" by default): a type other than the stored one changes
    the numbers, and so can change a translation."""
    import ctranslate2
    from argostranslate import settings

    return ctranslate2.Translator(str(model), device="cpu",
                                  compute_type=settings.compute_type).compute_type


def main() -> None:
    request = json.load(sys.stdin)
    with tempfile.TemporaryDirectory(prefix="argos-home-") as home:
        sources = _sources(request["packages"])
        argos_offline.use_environment(argos_offline.prepare(Path(home), sources))
        from argostranslate import package, translate  # after the environment is set

        for path in request["packages"]:
            package.install_from_path(Path(path))
        installed = [{"from": p.from_code, "to": p.to_code, "name": p.from_name + " → "
                      + p.to_name, "card": bool(p.get_readme()),
                      "computes_in": _compute_type(p.package_path / "model")}
                     for p in package.get_installed_packages()]
        answers, started = [], time.perf_counter()
        for item in request["translate"]:
            answers.append([translate.translate(text, item["from"], item["to"])
                            for text in item["texts"]])
        seconds = time.perf_counter() - started
    print(json.dumps({"versions": {name: metadata.version(name) for name in (
        "argostranslate", "ctranslate2", "sentencepiece", "minisbd", "onnxruntime")},
        "installed": installed, "translations": answers, "seconds": round(seconds, 2)},
        ensure_ascii=False))


if __name__ == "__main__":
    main()
