"""`attncli serve --engine ctranslate2` as a real process: the exported model answers both APIs
as `attncli translate --engine ctranslate2` does, attention is a 400 with its reason, and the
model description says which engine serves.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli
from serving import Server

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("ctranslate2")

SENTENCES = ["The man sees a red ball.", "A dog holds the old car."]


@pytest.fixture(scope="module")
def exported(served_run, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ct2") / "model"
    result = run_cli("export", str(served_run), "--output", str(folder))
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture(scope="module")
def server(served_run, exported, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-ct2") / "server.log"
    server = Server(served_run, "--engine", "ctranslate2", "--exported", str(exported),
                    log_path=log)
    yield server
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log()


def _cli(run: Path, exported: Path, text: str, *args: str) -> dict:
    out = run_cli("translate", "--run", str(run), "--json", "--engine", "ctranslate2",
                  "--exported", str(exported), *args, text)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[0])


def test_answers_equal_attncli_translate_with_ctranslate2(server, served_run, exported):
    for text in SENTENCES:
        cli = _cli(served_run, exported, text, "--beam", "3", "--nbest", "2")
        reply = server.request("/v1/translate", {"text": [text], "beam": 3, "n_best": 2})
        assert reply.status == 200, reply.body
        (only,) = reply.json["translations"]
        assert [h["text"] for h in only["hypotheses"]] == cli["hypotheses"]
        assert [h["score"] for h in only["hypotheses"]] == pytest.approx(cli["scores"],
                                                                          abs=1e-4)
    lt = server.request("/translate", {"q": SENTENCES, "source": "en", "target": "de"})
    assert lt.status == 200, lt.body
    assert lt.json["translatedText"] == [_cli(served_run, exported, t)["hypotheses"][0]
                                         for t in SENTENCES]


def test_attention_is_refused_with_the_reason_and_the_model_says_its_engine(server):
    reply = server.request("/v1/translate", {"text": [SENTENCES[0]], "attention": True})
    assert reply.status == 400
    assert "CTranslate2" in reply.json["error"] and "\n" not in reply.json["error"]
    model = server.request("/v1/model").json
    assert model["engine"] == "ctranslate2" and model["attention"] is False
    assert server.request("/health").json["status"] == "ok"  # still serving
