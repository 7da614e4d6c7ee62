"""Argos Translate on a machine without a network: a packages folder of its own, and MiniSBD's
sentence splitter given a placeholder model instead of the one it would download.

Imported by `argos_translate.py` and `libretranslate_check.py`, which run in the clients' own
virtual environments (argostranslate and LibreTranslate's fork `argos-translate-lt` install the
same module name), never in attncli's: this file imports nothing of attncli.

argostranslate 1.11.0 splits a text into sentences with MiniSBD before translating, and MiniSBD
0.9.5 downloads an ONNX model per source language on first use into
`<argos data dir>/minisbd/<lang>.onnx` (`argostranslate.sbd`: `minisbd_models.cache_dir`), which
fails offline. The placeholder put there is an ONNX model in MiniSBD's input and output format
(inputs `units` [batch, chars] and `features` [batch, chars, 1]; output [batch, chars, 3] scores
of no boundary, token end, sentence end) that always scores "no boundary" highest: MiniSBD then
ends the one sentence at the end of the text, so each line is translated whole. argostranslate
and LibreTranslate run unchanged; a user online gets MiniSBD's real model, which splits a line
into its sentences.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# argostranslate's names of MiniSBD models for some codes (`MiniSBDSentencizer`)
MINISBD_NAMES = {"zh": "zh-hans", "zt": "zh-hant", "pb": "pt"}


def offline_environment(root: Path) -> dict[str, str]:
    """Environment variables that give Argos a home under `root` (settings, packages, MiniSBD
    models, caches) and a package index that is a local empty file: nothing of the user's
    own Argos folders is read or written, and no index is fetched."""
    data = root / "data"
    index = root / "index"
    index.mkdir(parents=True, exist_ok=True)
    (index / "index.json").write_text("[]\n")
    return {"XDG_DATA_HOME": str(data), "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_CACHE_HOME": str(root / "cache"), "HOME": str(root),
            "ARGOS_PACKAGES_DIR": str(data / "argos-translate" / "packages"),
            "ARGOS_PACKAGE_INDEX": (index.as_uri() + "/")}


def minisbd_model_path(environment: dict[str, str], language: str) -> Path:
    """Where argostranslate's MiniSBD looks for `language`'s model before downloading it."""
    name = MINISBD_NAMES.get(language, language)
    return Path(environment["XDG_DATA_HOME"]) / "argos-translate" / "minisbd" / f"{name}.onnx"


def write_placeholder_minisbd(path: Path, language: str) -> None:
    """The placeholder model (see the module's docstring), built with the `onnx` package."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    scores = numpy_helper.from_array(np.array([1.0, 0.0, 0.0], dtype=np.float32), "scores")
    nodes = [  # units (B, N) -> zeros (B, N, 1) + [1, 0, 0] -> (B, N, 3)
        helper.make_node("Cast", ["units"], ["as_float"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["as_float", "last"], ["column"]),
        helper.make_node("Mul", ["column", "zero"], ["zeros"]),
        helper.make_node("Add", ["zeros", "scores"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "no-boundary",
        [helper.make_tensor_value_info("units", TensorProto.INT64, ["batch", "chars"]),
         helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "chars", 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "chars", 3])],
        initializer=[scores, numpy_helper.from_array(np.array([-1], dtype=np.int64), "last"),
                     numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # read by every onnxruntime since 1.10 (MiniSBD's least)
    vocab = {"lang": language, "idx": 0, "cutoff": 0, "lower": False,
             "_unit2id": {"<PAD>": 0, "<UNK>": 1}, "_id2unit": ["<PAD>", "<UNK>"]}
    config = {"feat_funcs": ["space_before"], "batch_size": 1, "max_seqlen": 1000}
    for key, value in (("lang_code", language), ("config", json.dumps(config)),
                       ("vocab", json.dumps(vocab)), ("lexicon", "null")):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def prepare(root: Path, languages: list[str]) -> dict[str, str]:
    """The offline environment under `root`, with a placeholder MiniSBD model for each source
    language; returns the variables to set (before argostranslate is imported)."""
    environment = offline_environment(root)
    for language in languages:
        write_placeholder_minisbd(minisbd_model_path(environment, language), language)
    return environment


def use_environment(environment: dict[str, str]) -> None:
    """Set the variables in this process (before argostranslate is imported)."""
    os.environ.update(environment)
