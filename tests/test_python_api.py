"""attncli from Python: `attncli.Translator` against `attncli translate`, its errors, the README's
example as written, and an `import attncli` that loads no torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, run_cli

import attncli
from attncli import AttncliError, Translator

SENTENCES = ["A dog runs.", "Two men in red shirts are playing football on a green field.",
             "Hello, how are you?"]


@pytest.fixture(scope="module")
def translator(served_run) -> Translator:
    return Translator(served_run, device="cpu")


def _cli(run: Path, *args: str) -> list[str]:
    result = run_cli("translate", "--run", str(run), *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_translations_equal_attncli_translates(translator, served_run):
    found = translator.translate(SENTENCES)
    assert [t.text for t in found] == _cli(served_run, *SENTENCES)
    assert [t.source for t in found] == SENTENCES
    assert (translator.source_language, translator.target_language) == ("en", "de")
    beam1 = translator.translate(SENTENCES, beam=1)
    assert [t.text for t in beam1] == _cli(served_run, "--beam", "1", *SENTENCES)


def test_nbest_equals_attncli_translates_numbered_lines(translator, served_run):
    found = translator.translate(SENTENCES[:2], beam=5, nbest=3)
    lines = _cli(served_run, "--beam", "5", "--nbest", "3", *SENTENCES[:2])
    expected = [line.split("\t") for line in lines]
    got = [[str(number), f"{c.score:.4f}", c.text]
           for number, t in enumerate(found, 1) for c in t.nbest]
    assert got == expected
    assert all(len(t.nbest) == 3 and t.text == t.nbest[0].text for t in found)
    assert all(t.nbest[0].score >= t.nbest[1].score >= t.nbest[2].score for t in found)


def test_empty_list_chunks_and_attention(translator, served_run):
    assert translator.translate([]) == []
    whole = translator.translate(SENTENCES, beam=2)
    chunked = list(translator.translate_iter(iter(SENTENCES), beam=2, chunk=2))
    assert [t.text for t in chunked] == [t.text for t in whole]
    (one,) = translator.translate(SENTENCES[:1], attention=True)
    layers, heads = 2, 2  # the served run's decoder (conftest.served_run)
    source_pieces = len(translator.trained.tokenizer.encode_src([SENTENCES[0]])[0])
    assert one.attention.shape == (layers, heads, len(one.tokens) + 1, source_pieces)
    assert torch.allclose(one.attention.sum(-1), torch.ones(layers, heads, len(one.tokens) + 1),
                          atol=1e-4)
    assert one.text == translator.translate(SENTENCES[:1])[0].text  # asking changes nothing


@pytest.mark.parametrize(("call", "message"), [
    (lambda t: t.translate(["A dog.", 3]), "text 2: expected a string, got int"),
    (lambda t: t.translate("A dog."), "expected a list of strings, got one string"),
    (lambda t: t.translate(["A dog.", "  "]), "text 2: empty input"),
    (lambda t: t.translate(["A dog."], beam=0), "beam 0: expected a whole number of 1 or more"),
    (lambda t: t.translate(["A dog."], beam=2, nbest=3), "nbest 3: expected 1 to the beam"),
    (lambda t: list(t.translate_iter(["A dog."], chunk=0)), "chunk 0: expected 1 or more"),
])
def test_bad_input_is_one_attncli_error_line(translator, call, message):
    with pytest.raises(AttncliError) as caught:
        call(translator)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_folder_that_is_not_a_run_is_one_attncli_error_line(tmp_path):
    with pytest.raises(AttncliError) as caught:
        Translator(tmp_path)
    assert str(tmp_path) in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(AttncliError, match="engine 'onnx': expected one of torch, ctranslate2"):
        Translator(tmp_path, engine="onnx")


def test_the_readmes_example_runs_as_written(served_run, tmp_path, capsys, monkeypatch):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Use from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)[1]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "small").symlink_to(served_run)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("en -> de ")
    assert printed[-1] == "refused: text 1: empty input"
    assert len(printed) == 1 + 2 * 2 + 1


def test_import_attncli_loads_no_torch():
    code = ("import sys, attncli\n"
            "error = attncli.AttncliError\n"
            "print('torch' in sys.modules, sorted(attncli.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.split(" ", 1)[0] == "False", out
    assert set(attncli.__all__) >= {"Translator", "AttncliError"}
    assert (REPO / "attncli" / "py.typed").is_file()
