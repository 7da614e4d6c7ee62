"""A run exported to CTranslate2 translates as attncli does; bad input is one line.

CTranslate2 is an optional extra; the dev install (and so CI) has it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers import SMALL, assert_one_line_error, run_cli, train

from tests.test_no_repeat_ngram import repeats_an_ngram

pytest.importorskip("ctranslate2")
# 60 updates that leave the weights as the seed made them (see the `run` fixture)
AS_MADE = ["train.max_steps=60", "train.lr=1e-9"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir) -> Path:
    """A tiny run of 60 updates at a learning rate so low that its weights stay as they were
    made from the seed, exported: what it translates is then the same on every CPU kind, where
    what a trained tiny model says depends on the machine's arithmetic."""
    root = tmp_path_factory.mktemp("export")
    result = train(data_dir, root, SMALL, "--name", "tiny", sets=AS_MADE)
    assert result.returncode == 0, result.stderr
    exported = run_cli("export", str(root / "tiny"), "--to", "ctranslate2")
    assert exported.returncode == 0, exported.stderr
    return root / "tiny"


def _test_sources(data_dir: Path) -> list[str]:
    lines = (data_dir / "tatoeba-en-de" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["en"] for line in lines]


def _decoded(run: Path, engine: str, texts: list[str], beam: int = 1,
             n: int | None = None) -> list[list[int]]:
    """Each text's best hypothesis through `engine`, as ids."""
    from attncli.decoding.texts import encode_sources
    from attncli.runs.trained import decode_ids, load_for_decoding

    trained = load_for_decoding(run, "cpu", "auto", engine, no_repeat_ngram=n)
    src = encode_sources(trained.tokenizer, texts, trained.config.model.max_positions)
    return [h[0].tokens for h in decode_ids(trained, src, beam, 1)]


def assert_engines_agree(run: Path, data_dir: Path) -> None:
    """Greedy search through CTranslate2 finds attncli's ids for each of the 40 test
    sentences, and those differ from sentence to sentence (with weights as made from the seed:
    24 different outputs of 40 for small.yaml's shrunk model), so the agreement is on real
    translations on any CPU kind. (A trained 60-update model wrote 4 different ones on one CPU
    kind and 6 on another, and the check failed on the first.)"""
    texts = _test_sources(data_dir)
    ours, theirs = (_decoded(run, engine, texts) for engine in ("torch", "ctranslate2"))
    assert theirs == ours
    assert len({tuple(tokens) for tokens in ours}) >= 10


def _with_biases(run: Path, folder: Path, biases: dict[int, float]) -> Path:
    """A copy of `run` whose exported checkpoint has `biases` added to the output bias,
    exported again: a model made to prefer those ids, whatever it learnt."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    copy = Path(shutil.copytree(run, folder))
    made = json.loads((copy / "ctranslate2" / "attncli.json").read_text())
    weights = copy / "checkpoints" / made["checkpoint"] / "model.safetensors"
    with safe_open(str(weights), "pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()  # noqa: SIM118
    for token, bias in biases.items():
        tensors["output_bias"][token] += bias
    save_file(tensors, str(weights), metadata=metadata)
    exported = run_cli("export", str(copy), "--force", "--checkpoint", made["checkpoint"])
    assert exported.returncode == 0, exported.stderr
    return copy


def _hypotheses(run: Path, data_dir: Path, *args: str) -> tuple[list[str], dict]:
    result = run_cli("eval", str(run), "--json", *args, data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    return (run / "eval" / "test.hyp.txt").read_text().splitlines(), report


def test_exported_greedy_output_equals_attncli(run, data_dir):
    ours, our_report = _hypotheses(run, data_dir, "--beam", "1")
    theirs, report = _hypotheses(run, data_dir, "--beam", "1", "--engine", "ctranslate2")
    assert report["engine"] == "ctranslate2" and report["precision"] == "float32"
    assert len(ours) == 40 and theirs == ours
    assert report["bleu"] == our_report["bleu"]
    assert_engines_agree(run, data_dir)


def test_exported_beam_search_runs_with_the_runs_settings(run, data_dir):
    """Beam search may rank differently at the length limit (attncli forces and scores an EOS
    there, CTranslate2 stops); how close the two are on a real run is in the README."""
    theirs, report = _hypotheses(run, data_dir, "--beam", "4", "--engine", "ctranslate2")
    assert report["beam"] == 4 and len(theirs) == 40 and any(h.strip() for h in theirs)


def test_translate_with_either_engine(run, data_dir):
    sentence = "The man sees a red ball."
    ours = run_cli("translate", sentence, "--run", str(run), "--beam", "1")
    theirs = run_cli("translate", sentence, "--run", str(run), "--beam", "1",
                     "--engine", "ctranslate2")
    assert ours.returncode == theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == ours.stdout  # a line each (a 60-update model may say nothing)
    assert ours.stdout.endswith("\n") and ours.stdout.count("\n") == 1


def test_a_checkpoint_the_export_was_not_made_from_is_refused(run, data_dir, tmp_path):
    """`--checkpoint` with `--engine ctranslate2` names what the export must have been made
    from: another one is an error saying how to export it (it was silently ignored)."""
    copy = Path(shutil.copytree(run, tmp_path / "copy"))
    metadata = copy / "ctranslate2" / "attncli.json"
    made = json.loads(metadata.read_text())
    # the run's own export of a step since pruned: its weights cannot be checked, it is used
    metadata.write_text(json.dumps({**made, "checkpoint": "step-30", "run": str(copy)}))
    asked = run_cli("eval", str(copy), "--engine", "ctranslate2", "--checkpoint", "step-60",
                    "--beam", "1", data_dir=data_dir)
    assert_one_line_error(asked, "--checkpoint step-60 is step-60, but the CTranslate2 export "
                                 "was made from step-30: export it again")
    plain = run_cli("eval", str(copy), "--engine", "ctranslate2", "--beam", "1", "--json",
                    data_dir=data_dir)
    assert plain.returncode == 0 and json.loads(plain.stdout)["checkpoint"] == "step-30"


def test_an_export_of_other_weights_is_refused(run, data_dir, tmp_path):
    """Another run's export (--exported), or one made before the checkpoint it names was
    written again, was used as if it were this run's: its weights are recorded and checked."""
    copy = Path(shutil.copytree(run, tmp_path / "copy"))
    made = json.loads((copy / "ctranslate2" / "attncli.json").read_text())
    assert len(made["weights_sha256"]) == 64
    weights = copy / "checkpoints" / made["checkpoint"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes().replace(b"model_fingerprint", b"model_fingerprinT"))
    asked = run_cli("translate", "A cat.", "--run", str(copy), "--engine", "ctranslate2",
                    data_dir=data_dir)
    assert_one_line_error(asked, f"this export was made from other weights than {copy}'s "
                                 f"{made['checkpoint']} (another run's, or "
                                 f"{made['checkpoint']} before it was written again); export "
                                 f"this run: `attncli export {copy} --checkpoint "
                                 f"{made['checkpoint']}`")
    elsewhere = Path(shutil.copytree(copy / "ctranslate2", tmp_path / "elsewhere"))
    metadata = elsewhere / "attncli.json"  # another run's, of a step this one lacks
    metadata.write_text(json.dumps({**made, "checkpoint": "step-999"}))
    asked = run_cli("translate", "A cat.", "--run", str(copy), "--engine", "ctranslate2",
                    "--exported", str(elsewhere), data_dir=data_dir)
    # named as the other run's step (it read as this run's step-999)
    assert_one_line_error(asked, f"this export was made from another run's weights ({run}, its "
                                 f"step-999); export this run: `attncli export {copy}`")
    # an export made before digests were recorded: checked by the run it records (another
    # run's was used); one in the run's own folder, or recording a relative path (whose
    # working folder is not known), is the run's own
    legacy = {k: v for k, v in made.items() if k != "weights_sha256"}
    for where, recorded, refused in ((elsewhere, str(run), True), (elsewhere, "runs/x", False),
                                     (copy / "ctranslate2", str(run), False)):
        (where / "attncli.json").write_text(json.dumps({**legacy, "run": recorded}))
        asked = run_cli("translate", "A cat.", "--run", str(copy), "--engine", "ctranslate2",
                        "--exported", str(where), data_dir=data_dir)
        if refused:
            assert_one_line_error(asked, "this export was made from other weights than")
        else:
            assert asked.returncode == 0, (where, recorded, asked.stderr)


def test_a_damaged_model_file_is_one_line(run, data_dir, tmp_path):
    folder = Path(shutil.copytree(run / "ctranslate2", tmp_path / "damaged"))
    (folder / "model.bin").write_bytes(b"x")
    result = run_cli("translate", "hi", "--run", str(run), "--engine", "ctranslate2",
                     "--exported", str(folder))
    assert_one_line_error(result, f"{folder / 'model.bin'}: unreadable")


def test_the_exported_engine_never_writes_bos_or_pad_as_attncli_does(run, data_dir, tmp_path):
    """A model that ranks <s> first (a short run can): CTranslate2 wrote it where attncli's
    search bans it, and the detokenized outputs differed without a trace of why."""
    from attncli.core.text import BOS_ID

    copy = _with_biases(run, tmp_path / "bos", {BOS_ID: 6.0})
    made = json.loads((copy / "ctranslate2" / "attncli.json").read_text())
    args = ("--checkpoint", made["checkpoint"], "--beam", "1")
    ours, _ = _hypotheses(copy, data_dir, *args)
    theirs, _ = _hypotheses(copy, data_dir, *args, "--engine", "ctranslate2")
    assert theirs == ours


def test_an_unwritable_export_folder_is_refused_before_converting(run, tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    assert_one_line_error(run_cli("export", str(run), "--output",
                                  str(tmp_path / "notes.txt" / "ct2")),
                          "notes.txt is a file, not a folder")


def test_eval_reports_the_type_ctranslate2_computes_in_not_the_stored_one(run, data_dir,
                                                                          tmp_path):
    """float16 weights compute in float32 on a CPU without float16 kernels: the report said
    float16, what the file stores, beside torch's fp32 (what runs)."""
    import ctranslate2

    folder = tmp_path / "float16"
    result = run_cli("export", str(run), "--quantization", "float16", "--output", str(folder))
    assert result.returncode == 0, result.stderr
    _, report = _hypotheses(run, data_dir, "--beam", "1", "--engine", "ctranslate2",
                            "--exported", str(folder))
    runs_in = "float16" if "float16" in ctranslate2.get_supported_compute_types("cpu") else \
        "float32"
    assert report["precision"] == runs_in


def test_int8_export_translates(run, data_dir, tmp_path):
    folder = tmp_path / "int8"
    result = run_cli("export", str(run), "--quantization", "int8", "--output", str(folder))
    assert result.returncode == 0, result.stderr
    hyps, report = _hypotheses(run, data_dir, "--beam", "1", "--engine", "ctranslate2",
                               "--exported", str(folder))
    assert report["precision"].startswith("int8") and len(hyps) == 40  # int8_float32 here


@pytest.mark.parametrize(("args", "expected"), [
    (["export", "{tmp}/nope", "--to", "ctranslate2"], "nope"),
    (["export", "{run}", "--quantization", "int3"], "--quantization int3: CTranslate2 stores"),
    (["export", "{run}", "--to", "onnx"], "--to onnx"),
    (["export", "{run}"], "exists; give --force"),
    (["eval", "{run}", "--engine", "ctranslate2", "--exported", "{tmp}/none"], "never exported"),
    (["eval", "{run}", "--engine", "ctranslate2", "--exported", "{tmp}"], "no CTranslate2 model"),
    (["translate", "hi", "--run", "{run}", "--engine", "ctranslate2", "--show-attention"],
     "need --engine torch"),
])
def test_bad_export_input_is_one_line(run, data_dir, tmp_path, args, expected):
    filled = [a.format(run=run, tmp=tmp_path) for a in args]
    assert_one_line_error(run_cli(*filled, data_dir=data_dir), expected)


@pytest.mark.parametrize(("output", "expected"), [
    ("{run}", "holds the run itself"), ("{run}/..", "holds the run itself"),
    ("{run}/checkpoints", "not a CTranslate2 export"), ("{tmp}/notes.txt", "not a CTranslate2"),
    ("{tmp}/mine", "not a CTranslate2 export"),
])
def test_export_never_replaces_what_is_not_an_export(run, tmp_path, output, expected):
    """--force replaces an earlier export only: the run, a folder holding it, a file or a
    folder of the user's stay as they are."""
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "data.txt").write_text("keep me too")
    before = sorted(p.relative_to(run.parent) for p in run.parent.rglob("*"))
    target = output.format(run=run, tmp=tmp_path)
    assert_one_line_error(run_cli("export", str(run), "--output", target, "--force"), expected)
    assert sorted(p.relative_to(run.parent) for p in run.parent.rglob("*")) == before
    assert (tmp_path / "notes.txt").read_text() == "keep me"
    assert (tmp_path / "mine" / "data.txt").read_text() == "keep me too"
    assert not list(tmp_path.glob(".tmp-*"))


def test_force_replaces_an_earlier_export_whole(run, tmp_path):
    folder = tmp_path / "export"
    for quantization in ("float32", "int8"):
        result = run_cli("export", str(run), "--output", str(folder), "--quantization",
                         quantization, "--force")
        assert result.returncode == 0, result.stderr
        assert json.loads((folder / "attncli.json").read_text())["quantization"] == quantization
    # nothing left aside; the export's lock file (`files.entry_lock`) stays for the next one
    assert sorted(p.name for p in tmp_path.iterdir()) == [".export.lock", "export"]


@pytest.mark.parametrize(("metadata", "expected"), [
    ('{"checkpoint": "step-60", "quanti', "unreadable"),
    ('{"checkpoint": "step-60", "quantization": "float32"}', "missing or wrong: max_positions"),
    ('["step-60"]', "missing or wrong: checkpoint, quantization, max_positions"),
])
def test_damaged_export_metadata_is_one_line(run, data_dir, tmp_path, metadata, expected):
    folder = tmp_path / "damaged"
    shutil.copytree(run / "ctranslate2", folder)
    (folder / "attncli.json").write_text(metadata)
    result = run_cli("translate", "hi", "--run", str(run), "--engine", "ctranslate2",
                     "--exported", str(folder))
    assert_one_line_error(result, expected)


def test_a_run_never_exported_says_how(data_dir, tmp_path, run):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.yaml", "spm.model"):
        shutil.copy(run / name, bare / name)
    shutil.copytree(run / "checkpoints", bare / "checkpoints")
    result = run_cli("translate", "hi", "--run", str(bare), "--engine", "ctranslate2")
    assert_one_line_error(result, "attncli export")


def test_without_ctranslate2_the_command_says_how_to_install(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    assert_one_line_error(run_cli("export", str(run), "--force"), "pip install 'attncli[ct2]'")


@pytest.mark.parametrize("tie", ["false", "decoder"])
def test_post_norm_and_separate_vocabularies_export_too(data_dir, tmp_path, tie):
    """The paper's layout (post-norm, as wmt14-base.yaml) with a tokenizer per side, untied
    embeddings or the output tied to the target embedding: greedy output through CTranslate2
    equals attncli's."""
    result = train(data_dir, tmp_path, SMALL, "--name", "post",
                   sets=[*AS_MADE, "model.norm=post",
                         "tokenizer.joint=false", f"model.tie_embeddings={tie}",
                         "tokenizer.vocab_size=200"])
    assert result.returncode == 0, result.stderr
    run = tmp_path / "post"
    exported = run_cli("export", str(run))
    assert exported.returncode == 0, exported.stderr
    assert_engines_agree(run, data_dir)


@pytest.mark.parametrize("beam", [1, 3])
def test_exported_engine_blocks_repeated_ngrams_too(run, data_dir, tmp_path, beam):
    """decode.no_repeat_ngram_size reaches CTranslate2: with 2, no output repeats a pair of
    subword ids, where without it they do (the copy's output bias prefers ids 7 and 8, so the
    repeats are there whatever the run learnt); greedy output stays attncli's."""
    copy = _with_biases(run, tmp_path / "repeats", {7: 12.0, 8: 11.0})
    texts = _test_sources(data_dir)
    found = {(engine, n): _decoded(copy, engine, texts, beam, n)
             for engine in ("torch", "ctranslate2") for n in (0, 2)}
    assert any(repeats_an_ngram(tokens, 2) for tokens in found["ctranslate2", 0])
    assert not any(repeats_an_ngram(tokens, 2) for tokens in found["ctranslate2", 2])
    if beam == 1:
        assert found["ctranslate2", 2] == found["torch", 2] != found["torch", 0]
