"""An Argos Translate package (`.argosmodel`), the model format argostranslate and LibreTranslate
install: what a run's package holds, which runs it can hold, and writing it as one zip.

    attncli export runs/small --to argos [--quantization int8] [--output FILE] [--force]

A package is a zip of one folder (argostranslate 1.11.0 `package.install_from_path` extracts
it into its packages folder) holding `metadata.json` (languages, versions, type), `model/` (a
CTranslate2 model), `sentencepiece.model` (one model that encodes the source and decodes the
target), and here `README.md` (the model card) and `attncli.json` (what it was made from).

Argos encodes with the SentencePiece model and hands the pieces to CTranslate2 as they are: it
adds no end-of-sentence piece, where attncli's models learnt every source with EOS appended
(`Tokenizer.encode_src`). So the package's model config asks CTranslate2 to append it
(`add_source_eos`), which attncli's own CTranslate2 folder does not (its engine appends EOS
itself, and that folder stays as it was).

The package's position table is the run's own, extended to `ARGOS_POSITIONS` rows: Argos
never cuts a source and lets CTranslate2 decode up to 256 pieces.

Refused, with the reason, because Argos would translate them wrongly: a run with one
SentencePiece model per language (Argos decodes the target with the source's model, whose
ids mean other pieces), and a run whose Chinese sources were converted to simplified script
when read (Argos has no step that would convert a traditional source first).
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from attncli.core.errors import AttncliError
from attncli.core.files import replacing_file
from attncli.core.text import (
    BOS_ID,
    EOS_ID,
    UNK_ID,
    base_language,
    converted_sides,
    is_traditional,
    language_name,
)
from attncli.decoding.ctranslate2 import METADATA, write_spec
from attncli.model.layers import SinusoidalPositions

SUFFIX = ".argosmodel"
PACKAGE_VERSION = "1.0"  # the package's own version (Argos updates installed ones by it)
ARGOS_VERSION = "1.11"  # the argostranslate whose format it follows, and was tested with
# Positions the package's model covers at least. Argos cuts no source and lets CTranslate2
# decode up to its default of 256 pieces; a run of fewer model.max_positions (the tiny test
# runs' 128) made CTranslate2 fail on a long output (LibreTranslate answered 500). The signals
# are sinusoidal, a formula and not weights: the table is the model's own, made longer.
ARGOS_POSITIONS = 1024


def default_name(src: str, tgt: str) -> str:
    """`en_de.argosmodel`: Argos's language codes, as its own packages are named."""
    return f"{argos_code(src)}_{argos_code(tgt)}{SUFFIX}"


def argos_code(code: str) -> str:
    """The code Argos uses for a language: its base code ('en'), 'zt' for Chinese in
    traditional script (Argos's 'zh' is simplified)."""
    base = base_language(code)
    return "zt" if base == "zh" and is_traditional(code) else base


def check_servable(config) -> None:
    """One line naming why Argos could not translate with this run as it was trained."""
    if not config.tokenizer.joint:
        raise AttncliError(
            "tokenizer.joint: false: an Argos package holds one SentencePiece model, which "
            "Argos uses to decode the target too, but this run has one per language (the "
            "target's ids would be read as source pieces); train with a joint tokenizer to "
            "export to Argos")
    data = config.data
    if "src" in converted_sides(data.chinese_script, data.src, data.tgt):
        raise AttncliError(
            f"data.chinese_script: {data.chinese_script}: this run's {data.src} sources were "
            f"converted to {data.chinese_script} script when read, which Argos cannot do "
            "before translating (traditional input would reach the model as it is); serve it "
            "with `attncli serve` instead")


def package_metadata(config, attncli_version: str) -> dict[str, Any]:
    """metadata.json: the fields argostranslate's `Package` reads, from the run's config."""
    src, tgt = config.data.src, config.data.tgt
    return {"package_version": PACKAGE_VERSION, "argos_version": ARGOS_VERSION,
            "from_code": argos_code(src), "from_name": language_name(src),
            "to_code": argos_code(tgt), "to_name": language_name(tgt), "type": "translate",
            "links": [], "made_by": f"attncli {attncli_version}"}


def configure_for_argos(spec, tokenizer, d_model: int) -> None:
    """The CTranslate2 config Argos needs: EOS appended to every source by CTranslate2 (see
    the module's docstring), the special pieces named as the run's SentencePiece model names
    them, and position signals for as many positions as Argos may ask for."""
    table = spec.encoder.position_encodings.encodings
    if len(table) < ARGOS_POSITIONS:
        longer = SinusoidalPositions(d_model, ARGOS_POSITIONS).table.numpy()
        spec.encoder.position_encodings.encodings = longer
        spec.decoder.position_encodings.encodings = longer
    pieces = tokenizer.src.id_to_piece
    spec.config.add_source_eos = True
    spec.config.add_source_bos = False
    spec.config.unk_token = pieces(UNK_ID)
    spec.config.bos_token = spec.config.decoder_start_token = pieces(BOS_ID)
    spec.config.eos_token = pieces(EOS_ID)


def is_attncli_package(path: Path) -> bool:
    """A zip whose one top folder holds attncli.json: a package `--force` may replace."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    tops = {name.split("/", 1)[0] for name in names}
    return len(tops) == 1 and f"{next(iter(tops))}/{METADATA}" in names


def package_folder(metadata: dict[str, Any]) -> str:
    """The zip's one top folder, which argostranslate installs under that name: one per
    language pair (a later attncli package of the pair replaces an earlier one's files)."""
    return f"attncli-{metadata['from_code']}_{metadata['to_code']}"


def write_package(target: Path, spec, quantization: str, files: dict[str, bytes]) -> None:
    """Convert `spec` into `model/` and zip it with `files` (name -> bytes: metadata.json,
    sentencepiece.model, README.md, attncli.json) under one folder, into `target` through a
    temporary file beside it: an error or a kill leaves the old file or none, never half a
    zip."""
    top = package_folder(json.loads(files["metadata.json"]))
    with tempfile.TemporaryDirectory(prefix=".attncli-argos-") as scratch:
        model = Path(scratch) / "model"
        write_spec(spec, model, quantization)
        with replacing_file(target) as out, zipfile.ZipFile(
                out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
            for path in sorted(model.iterdir()):
                archive.write(path, f"{top}/model/{path.name}")
            for name, data in files.items():
                archive.writestr(f"{top}/{name}", data)


def metadata_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
