"""`attncli export --to argos`: an Argos Translate package that CTranslate2, fed as Argos feeds
it, decodes as attncli does; the runs Argos cannot serve refused; bad input one line, nothing
half-written. With the real clients installed, each in its own environment (made by
`make argos-env` and `make lt-env`, or named by ATTNCLI_ARGOS_PYTHON / ATTNCLI_LT_PYTHON):
the package installed and translated by argostranslate, and served by LibreTranslate, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from helpers import REPO, SMALL, assert_one_line_error, run_cli, train

pytest.importorskip("ctranslate2")
AS_MADE = ["train.max_steps=60", "train.lr=1e-9"]  # weights as the seed made them (test_export)
PACKAGE_FILES = {"metadata.json", "sentencepiece.model", "README.md", "attncli.json",
                 "model/model.bin", "model/config.json", "model/shared_vocabulary.json"}


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir) -> Path:
    """A tiny small.yaml run (its licence set), exported to CTranslate2 and to Argos."""
    root = tmp_path_factory.mktemp("argos")
    result = train(data_dir, root, SMALL, "--name", "tiny", sets=AS_MADE)
    assert result.returncode == 0, result.stderr
    for to in ("ctranslate2", "argos"):
        exported = run_cli("export", str(root / "tiny"), "--to", to)
        assert exported.returncode == 0, exported.stderr
    return root / "tiny"


def _members(package: Path) -> dict[str, bytes]:
    """The package's files by their path under its one top folder (asserted to be one)."""
    with zipfile.ZipFile(package) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        tops = {n.split("/", 1)[0] for n in names}
        assert len(tops) == 1, tops
        return {n.split("/", 1)[1]: archive.read(n) for n in names}


def test_the_package_holds_what_argos_reads_and_what_attncli_adds(run):
    files = _members(run / "en_de.argosmodel")
    assert set(files) == PACKAGE_FILES
    metadata = json.loads(files["metadata.json"])
    assert {k: metadata[k] for k in ("from_code", "from_name", "to_code", "to_name", "type")} \
        == {"from_code": "en", "from_name": "English", "to_code": "de", "to_name": "German",
            "type": "translate"}
    assert metadata["package_version"] and metadata["argos_version"]
    assert files["sentencepiece.model"] == (run / "spm.model").read_bytes()
    made = json.loads(files["attncli.json"])
    assert made["run"] == "tiny" and made["quantization"] == "float32"
    assert len(made["weights_sha256"]) == 64
    card = files["README.md"].decode()
    assert "CC-BY 2.0 FR (check the terms)" in card and "tatoeba.org" in card
    assert str(run.parent) not in card + files["attncli.json"].decode()  # no absolute path


def test_argos_gets_the_source_eos_and_attncli_s_own_folder_keeps_its_config(run):
    """Argos adds no EOS; CTranslate2 appends it for the package, as attncli's engine does
    itself with its own folder (whose config stays as it was)."""
    package = json.loads(_members(run / "en_de.argosmodel")["model/config.json"])
    own = json.loads((run / "ctranslate2" / "config.json").read_text())
    assert package["add_source_eos"] is True and own["add_source_eos"] is False
    assert {k: v for k, v in package.items() if k != "add_source_eos"} == \
        {k: v for k, v in own.items() if k != "add_source_eos"}
    assert (run / "ctranslate2" / "README.md").is_file()


def _greedy(model: Path, spm_model: Path, texts: list[str], eos: list[str]) -> list[list[str]]:
    """Greedy outputs of the CTranslate2 `model` given each text's SentencePiece pieces
    followed by `eos`, with attncli's bans and its limit of tiny runs (half the source + 5:
    outputs of as-made weights then differ in length from sentence to sentence)."""
    import ctranslate2
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    translator = ctranslate2.Translator(str(model), device="cpu")
    found = []
    for text in texts:
        source = pieces.encode(text, out_type=str)
        result = translator.translate_batch(
            [source + eos], beam_size=1, max_decoding_length=(len(source) + 1) // 2 + 5,
            suppress_sequences=[["<pad>"], ["<s>"]])
        found.append(result[0].hypotheses[0])
    return found


def test_fed_as_argos_feeds_it_the_package_decodes_as_attncli_does(run, data_dir, tmp_path):
    """The package's model given bare pieces equals attncli's folder given pieces + EOS on
    40 test sentences; the same model without `add_source_eos` differs (so the config is
    what makes them equal, on these weights)."""
    with zipfile.ZipFile(run / "en_de.argosmodel") as archive:
        archive.extractall(tmp_path)
    model = next(tmp_path.glob("*/model"))
    texts = [json.loads(line)["en"] for line in
             (data_dir / "tatoeba-en-de" / "test.jsonl").read_text().splitlines()]
    packaged = _greedy(model, run / "spm.model", texts, [])  # as argostranslate feeds it
    assert packaged == _greedy(run / "ctranslate2", run / "spm.model", texts, ["</s>"])
    assert len({tuple(h) for h in packaged}) >= 10
    config = model / "config.json"
    config.write_text(config.read_text().replace('"add_source_eos": true',
                                                 '"add_source_eos": false'))
    assert _greedy(model, run / "spm.model", texts, []) != packaged


@pytest.mark.parametrize(("make", "args", "expected"), [
    ("none", ["{tmp}/nope", "--to", "argos"], "nope: run folder does not exist"),
    ("bare", ["{tmp}/bare", "--to", "argos"], "no checkpoint"),
    ("none", ["{run}", "--to", "onnx"], "--to onnx: the export targets are ctranslate2 and argos"),
    ("none", ["{run}", "--to", "argos"], "en_de.argosmodel exists; give --force"),
    ("text", ["{run}", "--to", "argos", "--output", "{tmp}/notes.argosmodel", "--force"],
     "not an Argos package made by attncli"),
    ("zip", ["{run}", "--to", "argos", "--output", "{tmp}/other.argosmodel", "--force"],
     "not an Argos package made by attncli"),
    ("none", ["{run}", "--to", "argos", "--output", "{tmp}", "--force"], "is a folder"),
])
def test_bad_argos_export_input_is_one_line_and_writes_nothing(run, tmp_path, make, args,
                                                               expected):
    if make == "bare":  # a run folder whose run never saved a checkpoint
        (tmp_path / "bare").mkdir()
        for name in ("config.yaml", "spm.model"):
            shutil.copy(run / name, tmp_path / "bare" / name)
    (tmp_path / "notes.argosmodel").write_text("keep me")
    with zipfile.ZipFile(tmp_path / "other.argosmodel", "w") as archive:
        archive.writestr("theirs/metadata.json", "{}")
    before = {p: p.read_bytes() for p in [*tmp_path.rglob("*"), *run.rglob("*")] if p.is_file()}
    filled = [a.format(run=run, tmp=tmp_path) for a in args]
    assert_one_line_error(run_cli("export", *filled), expected)
    after = {p: p.read_bytes() for p in [*tmp_path.rglob("*"), *run.rglob("*")] if p.is_file()}
    assert after == before  # nothing written, nothing half-written, nothing replaced


def test_force_replaces_a_package_attncli_wrote_whole(run, tmp_path):
    target = tmp_path / "pair.argosmodel"
    for quantization in ("float32", "int8"):
        result = run_cli("export", str(run), "--to", "argos", "--output", str(target),
                         "--quantization", quantization, "--force")
        assert result.returncode == 0, result.stderr
        assert json.loads(_members(target)["attncli.json"])["quantization"] == quantization
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pair.argosmodel.lock",
                                                          "pair.argosmodel"]


def test_separate_vocabularies_are_refused_as_argos_would_decode_them_wrong(data_dir, tmp_path):
    """Argos decodes the target with the one SentencePiece model of the package: with a model
    per language, the target's ids read as source pieces make other text (measured here)."""
    import torch

    from attncli.runs.trained import load_trained_model

    result = train(data_dir, tmp_path, SMALL, "--name", "two",
                   sets=[*AS_MADE, "tokenizer.joint=false", "model.tie_embeddings=false",
                         "tokenizer.vocab_size=200"])
    assert result.returncode == 0, result.stderr
    assert_one_line_error(run_cli("export", str(tmp_path / "two"), "--to", "argos"),
                          "tokenizer.joint: false: an Argos package holds one SentencePiece")
    assert not list((tmp_path / "two").glob("*.argosmodel"))
    tokenizer = load_trained_model(tmp_path / "two", torch.device("cpu"), weights=False).tokenizer
    ids = tokenizer.encode_tgt(["Der Mann sieht einen roten Ball."])[0]
    try:
        read_as_source = tokenizer.src.decode(ids)
    except IndexError:  # an id past the source model's pieces
        read_as_source = None
    assert read_as_source != tokenizer.tgt.decode(ids) == "Der Mann sieht einen roten Ball."


def test_a_chinese_source_converted_when_read_is_refused(tmp_path):
    """A zh -> en run read its sources in simplified script; Argos would hand a traditional
    source to the model as written, which SentencePiece encodes otherwise (measured here)."""
    pytest.importorskip("opencc")
    import torch

    from attncli.runs.trained import load_trained_model
    from tests.test_chinese_script import _write

    corpus = _write(tmp_path / "data" / "en-zh")
    result = train(corpus.parent, tmp_path, str(REPO / "configs" / "zh-en.yaml"), "--name",
                   "zh-en", sets=[f"data.dataset={corpus}", "train.max_steps=2"])
    assert result.returncode == 0, result.stderr
    assert_one_line_error(run_cli("export", str(tmp_path / "zh-en"), "--to", "argos"),
                          "data.chinese_script: simplified: this run's zh sources were converted")
    tokenizer = load_trained_model(tmp_path / "zh-en", torch.device("cpu"), weights=False).tokenizer
    traditional = "我們有3個蘋果。"
    assert tokenizer.src.encode(traditional) + [3] != tokenizer.encode_src([traditional])[0]


def client_python(variable: str, folder: str) -> str | None:
    """A client's own environment: `variable`, else REPO/`folder` (made by make)."""
    found = os.environ.get(variable) or str(REPO / folder / "bin" / "python")
    return found if Path(found).is_file() else None


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_dir) -> Path:
    """A tiny run trained until it translates the toy language, its outputs limited as
    small.yaml's (1.5 × source + 10) rather than the tiny tests' (0.5 × source + 5), which cut
    sentences that Argos, with no limit of its own but CTranslate2's 256, lets end."""
    root = tmp_path_factory.mktemp("trained")
    result = train(data_dir, root, SMALL, "--name", "toy",
                   sets=["train.max_steps=150", "train.lr=0.005", "train.eval_every=150",
                         "decode.max_len_a=1.5", "decode.max_len_b=10"])
    assert result.returncode == 0, result.stderr
    return root / "toy"


def test_argostranslate_installs_the_package_and_translates_as_attncli(trained, tmp_path):
    """argostranslate 1.11.0, offline, with its own `install_from_path` and `translate`: the
    package of a trained tiny run says what `attncli translate --engine ctranslate2` says with
    Argos's search (beam 4, length penalty 0.2, no n-gram blocking), line by line, both
    computing in float32 (argostranslate's default "auto" computes in int8 where the CPU has
    it: benchmarks/argos_same.py compares that too)."""
    python = client_python("ATTNCLI_ARGOS_PYTHON", ".venv-argos")
    if python is None:
        pytest.skip("argostranslate is not installed (make argos-check, or ATTNCLI_ARGOS_PYTHON)")
    from attncli.runs.translator import Translator

    package = tmp_path / "en_de.argosmodel"
    for to, output in (("argos", package), ("ctranslate2", tmp_path / "ct2")):
        result = run_cli("export", str(trained), "--to", to, "--output", str(output))
        assert result.returncode == 0, result.stderr
    texts = ["The man sees a red ball.", "A dog holds the old car in the park.",
             "The cat likes a small boat.", "A girl paints the green tree at the beach."]
    request = {"packages": [str(package)], "translate": [{"from": "en", "to": "de",
                                                          "texts": texts}]}
    done = subprocess.run([python, str(REPO / "benchmarks" / "argos_translate.py")],
                          input=json.dumps(request), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ARGOS_COMPUTE_TYPE": "float32"})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["versions"]["argostranslate"] == "1.11.0"
    assert answer["installed"][0]["card"] is True
    translator = Translator(trained, device="cpu", engine="ctranslate2",
                            exported=tmp_path / "ct2", no_repeat_ngram=0)
    translator.config.decode.length_penalty = 0.2
    ours = [t.text for t in translator.translate(texts, beam=4, split=False)]
    assert answer["translations"][0] == ours, (answer["translations"][0], ours)


def test_libretranslate_serves_two_packages_offline(trained, data_dir, tmp_path):
    """LibreTranslate 1.9.6 (its own environment: ATTNCLI_LT_PYTHON, else .venv-lt/) started
    with two exported packages on loopback answers languages, translate and detect through
    libretranslatepy, quickly, without trying the network; its translation is attncli's
    with Argos's search, LibreTranslate's capital and final-punctuation rewriting aside."""
    python = client_python("ATTNCLI_LT_PYTHON", ".venv-lt")
    if python is None:
        pytest.skip("LibreTranslate is not installed (make lt-env, or ATTNCLI_LT_PYTHON)")
    from attncli.runs.translator import Translator

    reverse = train(data_dir, tmp_path, SMALL, "--name", "de-en",
                    sets=[*AS_MADE, "data.src=de", "data.tgt=en"])
    assert reverse.returncode == 0, reverse.stderr
    packages = [tmp_path / "en_de.argosmodel", tmp_path / "de_en.argosmodel"]
    for run, package in zip((trained, tmp_path / "de-en"), packages, strict=True):
        result = run_cli("export", str(run), "--to", "argos", "--output", str(package))
        assert result.returncode == 0, result.stderr
    result = run_cli("export", str(trained), "--output", str(tmp_path / "ct2"))
    assert result.returncode == 0, result.stderr
    done = subprocess.run([python, str(REPO / "benchmarks" / "libretranslate_check.py"),
                           *map(str, packages)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["versions"]["libretranslate"] == "1.9.6" and report["startup_s"] < 30
    assert {lang["code"] for lang in report["languages"]} == {"en", "de"}
    assert report["connection_line_count"] == 0, report["connection_lines"]
    assert report["detect"][0]["language"] in ("en", "de")
    translator = Translator(trained, device="cpu", engine="ctranslate2",
                            exported=tmp_path / "ct2", no_repeat_ngram=0)
    translator.config.decode.length_penalty = 0.2
    ours = translator.translate(["Hello, how are you?"], beam=4, split=False)[0].text
    theirs = report["translate"]["en-de"]
    assert theirs.rstrip("?!.,;").lower() == ours.rstrip("?!.,;").lower(), (theirs, ours)
